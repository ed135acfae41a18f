"""`moesim validate`: simulated against measured time per token, configuration by configuration."""

from __future__ import annotations

from moesim.replay.run import replay
from moesim.errors import MoesimError, named
from moesim.policies.admission import composed
from moesim.sim.config import Config, check_params_used, params_for
from moesim.sim.machine import Hardware
from moesim.sim.strategies import get_strategy
from moesim.tracegen.models import ModelSpec
from moesim.tracegen.trace import Trace


def validate(trace: Trace, config: Config, hardware: Hardware, policies: list[str], capacities: list[int],
             backend: str = "cpu", layers: int | None = None, scale: float = 1.0, workdir=None,
             model: ModelSpec | None = None, cpu_layers: list[int] | None = None, params: dict | None = None
             ) -> list[dict]:
    """One row per (capacity, policy) of ``config`` — or, for a strategy that places experts without a cache
    (its ``places`` parameter, the number of layers on the CPU), per value in ``cpu_layers`` — with simulated and
    replayed TPOT, the error in percent, each row's speedup over the first of its group (the first policy
    at that capacity; the first placement) in simulation and in replay, and both hit rates. ``params``: policy
    parameters, each given to the policies that take it."""
    rows = []
    for group in run_groups(config, policies, capacities, cpu_layers, params):
        runs = [replay(trace, c, hardware, backend, layers, scale, workdir, model=model) for c in group]
        base = runs[0]
        for r in runs:
            rows.append({"model": r.model, "hardware": r.hardware, "policy": r.policy, "capacity": r.capacity,
                         "strategy": r.strategy, "cpu_layers": r.cpu_layers, "dtype": r.dtype,
                         "sim_tpot_s": r.sim_tpot_s, "real_tpot_s": r.tpot_s,
                         "error_pct": 100.0 * (r.sim_tpot_s - r.tpot_s) / r.tpot_s,
                         "sim_speedup": base.sim_tpot_s / r.sim_tpot_s, "real_speedup": base.tpot_s / r.tpot_s,
                         "hit_rate_sim": r.sim_hit_rate, "hit_rate_real": r.hit_rate, "layers": r.layers,
                         "scale": r.scale})
    return rows


def run_groups(config: Config, policies: list[str], capacities: list[int], cpu_layers: list[int] | None = None,
               params: dict | None = None, listed: list[str] = ()) -> list[list[Config]]:
    """The configurations ``validate`` replays, in groups whose first is the others' baseline: every policy at each
    capacity (each with those of the policy ``params`` it takes; one no policy takes is refused), or every number of
    CPU layers for a strategy that places experts (more than the one default, 0, refused for a strategy that keeps a
    cache, and the lists ``listed`` and policy parameters for one that places: nothing reads them). Built (and so
    checked) before anything is measured."""
    strategy = config.execution.strategy
    places = get_strategy(strategy).places
    if places is not None:
        if params:
            raise MoesimError(f"{', '.join(map(named, params))}: strategy {strategy} keeps no expert cache, so nothing "
                              "reads it")
        if listed:
            raise MoesimError(f"{' and '.join(listed)}: strategy {strategy} keeps no expert cache (it places layers: "
                              f"cpu_layers=[...]), so nothing reads {'it' if len(listed) == 1 else 'them'}")
        return [[config.replace(**{places: n}) for n in cpu_layers or [0]]]
    if cpu_layers not in (None, [0]):
        raise MoesimError(f"{named('cpu_layers')}: strategy {strategy} places no layers on the CPU (it keeps a cache, "
                          "whose runs are the policies and capacities listed), so nothing reads it")
    groups = [[config.replace(policy=p, capacity=c) for p in policies] for c in capacities]  # names checked first
    check_params_used([composed(p, config.cache.admission) for p in policies], params or {},
                      [config.prefetch.prefetcher], [strategy])
    return [[c.replace(**params_for(c.cache.composed, params or {})) for c in group] for group in groups]
