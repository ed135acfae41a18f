"""The discrete-event simulator's outputs on a fixed set of configurations, pinned to the values it
gave before the architecture refactor (issue 16): a refactor must not move a number.

``python tests/test_des_pins.py --write`` rewrites tests/golden/des_pins.json (only when a change of
behaviour is intended, and reviewed).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

# its module-scoped fixtures are built once: its tests run on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_des_pins")

PINS = Path(__file__).parent / "golden" / "des_pins.json"
KEEP = ("tpot_s", "tpot_p50_s", "tpot_p99_s", "tokens_per_s", "ttft_s", "compute_s", "copy_s", "stall_s", "bytes_h2d",
        "bytes_ssd", "hit_rate", "hits", "accesses", "loads", "prefill_loads", "prefetch_loads", "prefetch_used",
        "prefetch_precision", "prefetch_recall", "substitutions", "substituted_weight", "decode_steps",
        "decode_tokens")
# (case name, trace, model preset or None for the trace's, hardware, settings)
CASES = [
    ("lru-c4", "mixtral", None, "rtx4090", dict(policy="lru", capacity=4)),
    ("belady-c4-per-expert", "mixtral", None, "rtx4090", dict(policy="belady", capacity=4, kernel="per-expert")),
    ("lfu-global-96", "mixtral", None, "h100", dict(policy="lfu", capacity=96, scope="global")),
    ("no-cache-oracle", "mixtral", None, "rtx4090", dict(policy="lru", capacity=0, prefetch="oracle")),
    ("lru-oracle-commit", "mixtral", None, "rtx4090", dict(policy="lru", capacity=4, prefetch="oracle", mode="commit")),
    ("arc-history-batch2", "mixtral", None, "a6000", dict(policy="arc", capacity=4, prefetch="history", batch=2)),
    ("gamma-popular", "mixtral", None, "rtx4090", dict(policy="gamma", capacity=4, prefetch="popular", gamma=0.8)),
    ("fifo-ssd", "mixtral", None, "rtx4090+pcie3+ssd", dict(policy="fifo", capacity=4, dram_capacity=64)),
    ("static-int4-context-reset", "mixtral", None, "rtx4090",
     dict(policy="static", capacity=5, dtype="int4", context=2048, reset=True)),
    ("lecar-prompt-prefill", "olmoe", None, "rtx4090", dict(policy="lecar", capacity=16, prefetch="prompt", seed=3)),
    ("random-speculative-batch4", "olmoe", None, "rtx4090",
     dict(policy="random", capacity=12, prefetch="speculative", batch=4, kernel="per-expert", seed=5)),
    ("lru-speculative-commit-global", "olmoe", None, "h100",
     dict(policy="lru", capacity=160, scope="global", prefetch="speculative", mode="commit")),
    ("mole", "moe160m", "mole-160m-4e", "rtx4090", dict(policy="lru", capacity=0)),
    ("measured-compute", "olmoe", None, "measured", dict(policy="lru", capacity=16, batch=2, kernel="per-expert")),
]


def traces() -> dict:
    from moesim.tracegen.io import load_trace
    from moesim.tracegen.trace import bundled_trace_path
    from moesim.tracegen.synth import synth_trace

    olmoe = synth_trace(layers=16, experts=64, top_k=8, sequences=4, tokens=24, seed=11, prompt_tokens=6,
                        model="olmoe-1b-7b")
    spec = np.full_like(olmoe.experts, -1)
    spec[:, :-1] = olmoe.experts[:, 1:]
    spec[::3] = np.where(spec[::3] >= 0, (spec[::3] + 1) % 64, -1)  # some right, some wrong
    return {"mixtral": load_trace(bundled_trace_path()), "olmoe": dataclasses.replace(olmoe, spec=spec),
            "moe160m": synth_trace(layers=12, experts=10, top_k=2, sequences=2, tokens=8, seed=0,
                                   model="moe-160m-10e")}


def hardware(name: str):
    """The machine of a case, its memory size left unknown: the pins are of time, and several of these caches
    would not fit the real card (issue 18 made memory checked)."""
    from moesim.sim.hardware import get_hardware
    from moesim.sim.machine import MeasuredCompute

    if name == "rtx4090+pcie3+ssd":
        hw = get_hardware("rtx4090", "pcie3", "pcie5-nvme")
    elif name == "measured":
        hw = dataclasses.replace(get_hardware("rtx4090"), compute=MeasuredCompute(
            "olmoe-1b-7b", layer_s=9e-5, expert_s=1.2e-5, layer_token_s=3e-7, layer_ctx_s=2e-9, expert_token_s=2e-8,
            moe_launch_s=1.5e-5, expert_launch_s=6e-6))
    else:
        hw = get_hardware(name)
    return dataclasses.replace(hw, gpu=dataclasses.replace(hw.gpu, hbm_gb=0.0))


def run_case(trace, model, hw, settings) -> dict:
    from moesim.sim.config import Config
    from moesim.sim.des import simulate_des

    r = simulate_des(trace, Config.build(**settings, **({"model": model} if model else {})), hardware=hw)
    out = {k: getattr(r, k) for k in KEEP}
    out["step_times_sum"] = float(r.step_times.sum())
    out["step_times_head"] = [float(x) for x in r.step_times[:5]]
    out["per_layer_hit_rate"] = [float(x) for x in r.per_layer_hit_rate]
    return out


def _same(a, b) -> bool:
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, (int, float)):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


@pytest.fixture(scope="module")
def pinned():
    return json.loads(PINS.read_text())


@pytest.fixture(scope="module")
def case_traces():
    return traces()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_des_outputs_are_pinned(case, pinned, case_traces):
    name, trace, model, hw, settings = case
    got = run_case(case_traces[trace], model, hardware(hw), settings)
    want = pinned[name]
    moved = {k: (want[k], got[k]) for k in want if not _same(want[k], got[k])}
    assert not moved, f"{name}: {moved}"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    ts = traces()
    PINS.write_text(json.dumps({n: run_case(ts[t], m, hardware(h), s) for n, t, m, h, s in CASES}, indent=1) + "\n")
    print(f"wrote {PINS}")
