"""`moesim validate`: simulated against measured time per token, configuration by configuration."""

from __future__ import annotations

from moesim.replay.run import replay
from moesim.sim.config import Config
from moesim.sim.hardware import Hardware
from moesim.tracegen.models import ModelSpec
from moesim.tracegen.trace import Trace


def validate(trace: Trace, config: Config, hardware: Hardware, policies: list[str], capacities: list[int],
             backend: str = "cpu", layers: int | None = None, scale: float = 1.0, workdir=None,
             model: ModelSpec | None = None) -> list[dict]:
    """One row per (capacity, policy) of ``config``: simulated and replayed TPOT, the error in percent, each
    policy's speedup over the first policy at that capacity in simulation and in replay, and both hit rates."""
    rows = []
    for capacity in capacities:
        runs = [replay(trace, config.replace(policy=p, capacity=capacity), hardware, backend, layers, scale, workdir,
                       model=model) for p in policies]
        base = runs[0]
        for r in runs:
            rows.append({"policy": r.policy, "capacity": capacity, "sim_tpot_s": r.sim_tpot_s, "real_tpot_s": r.tpot_s,
                         "error_pct": 100.0 * (r.sim_tpot_s - r.tpot_s) / r.tpot_s,
                         "sim_speedup": base.sim_tpot_s / r.sim_tpot_s, "real_speedup": base.tpot_s / r.tpot_s,
                         "hit_rate_sim": r.sim_hit_rate, "hit_rate_real": r.hit_rate, "layers": r.layers,
                         "scale": r.scale})
    return rows
