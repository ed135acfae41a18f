"""Exact hits of a replacement policy at one capacity on a trace: the compiled engine with the policy's
hooks, or the first of the policy's fast paths that takes the run. ``moesim.sim.hitrate.simulate`` is
the public face (it also splits a budget over the layers, ``split = "best"``); ``moesim.sim.mrc`` runs
this at every capacity."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from moesim.errors import MoesimError, named
from moesim.frames import Tabular
from moesim.policies import get_policy
from moesim.policies.base import Context
from moesim.sim.across import across_runner
from moesim.sim.config import CacheConfig, run_params
from moesim.sim.engine import (bind, engine_args, engine_evictions, engine_hits, hitrate_loop, place,
                               warm_then_time)
from moesim.sim.lanes import lane_runner
from moesim.tracegen.trace import Trace


@dataclass
class HitRate(Tabular):
    """One simulated configuration and what it measured (``seconds`` excludes compilation)."""

    policy: str
    capacity: int | tuple      # slots per layer or in the pool, or each layer's own
    scope: str
    semantics: str
    accesses: int
    hits: int
    per_layer_hits: list
    per_layer_accesses: list
    seconds: float
    evictions: np.ndarray | None = field(default=None, repr=False)  # (t, object) when asked for

    @property
    def misses(self) -> int:
        return self.accesses - self.hits

    @property
    def hit_rate(self) -> float:
        return self.hits / self.accesses if self.accesses else float("nan")

    @property
    def per_layer_hit_rate(self) -> list:
        return [h / a if a else float("nan") for h, a in zip(self.per_layer_hits, self.per_layer_accesses)]

    @property
    def accesses_per_s(self) -> float:
        return self.accesses / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("per_layer_hits", "per_layer_accesses", "evictions")}
        out.update(misses=self.misses, hit_rate=self.hit_rate, per_layer_hit_rate=self.per_layer_hit_rate,
                   accesses_per_s=self.accesses_per_s)
        return out


def capacity_named(capacity, slots: np.ndarray, part: int) -> str:
    """How an error names one partition's capacity: the capacity, or a listed layer's entry."""
    return (f"{named('capacity')} {slots[part]} of layer {part}" if isinstance(capacity, tuple)
            else named("capacity", int(slots[part])))


def check_fits_experts(meta, cache: CacheConfig) -> None:
    """A cache larger than the experts there are is a mistake (a capacity meant for another model)."""
    most = meta.num_experts if cache.scope == "per-layer" else meta.num_layers * meta.num_experts
    slots = cache.slots(meta.num_layers)
    if slots.max() > most:
        where = "per layer" if cache.scope == "per-layer" else f"in all {meta.num_layers} layers"
        which = capacity_named(cache.capacity, slots, int(slots.argmax()))
        raise MoesimError(f"{which} is more than the {most} experts {where}")


def check_capacity(meta, cache: CacheConfig) -> None:
    """A hit-rate run caches at least one expert, and under step semantics a whole step's k, in every
    partition; never more than there are experts."""
    if cache.capacity == "auto":
        raise MoesimError(f"{named('capacity', 'auto')} is what a machine's memory holds, and hit rates have no machine: give a "
                          f"number of slots (or time a run with {named('capacity', 'auto')}: 'moesim sim run', "
                          "moesim.simulate)")
    slots, top_k = cache.slots(meta.num_layers), meta.top_k
    low = int(slots.argmin())
    which = capacity_named(cache.capacity, slots, low)
    if slots[low] < 1:
        raise MoesimError(f"{which} keeps no expert cache, and a hit rate counts a cache's hits: give at least 1 slot")
    if cache.semantics == "step" and slots[low] < top_k:
        raise MoesimError(f"{which} is below top_k {top_k}: under step semantics all "
                          f"k experts of a step are resident at once; use a capacity >= {top_k} or "
                          f"{named('semantics', 'sequential')}")
    check_fits_experts(meta, cache)


def count_hits(trace: Trace, cache: CacheConfig, log_evictions: int = 0) -> HitRate:
    """Run ``cache.policy`` over ``trace`` at its capacity (each layer's slots as given: ``split`` is the
    caller's) and count hits per layer. With a cache per layer under sequential semantics the policy's
    ``fast_paths`` are tried in order (``FastPath.takes``); the first that takes the run gives the same
    hits as the engine and logs no evictions. Every other run is the compiled engine with the policy's
    hooks. The seconds are the run's alone: each runner is first compiled (or loaded from numba's cache)
    on the trace's first row (``moesim.sim.engine.warm_then_time``).

    ``log_evictions`` > 0 keeps the first that many evictions as (access position, object).
    """
    check_capacity(trace.meta, cache)
    policy = get_policy(cache.composed)
    params = run_params(policy, cache.params)
    slots = cache.slots(trace.meta.num_layers)
    per_layer_accesses = [trace.num_rows * trace.meta.top_k] * trace.meta.num_layers
    experts, offsets = np.ascontiguousarray(trace.experts, np.int16), trace.seq_offsets.astype(np.int64)
    timed = None
    if (cache.scope, cache.semantics) == ("per-layer", "sequential") and not log_evictions:
        for path in policy.fast_paths:
            if path.takes(int(slots.max()), trace.meta.num_experts):
                runner = RUNNERS[path.kind](path, policy.name, trace.meta.num_experts, slots, cache.reset, params)
                timed = warm_then_time(runner, experts, offsets)
                if timed is not None:
                    break
    evictions = None
    if timed is None:
        run = bind(hitrate_loop, policy.name, policy.hooks, (place,))

        def engine(rows, seq_offsets):
            ctx = Context(rows, seq_offsets, trace.meta.num_experts, slots, cache.scope == "per-layer",
                          cache.semantics == "sequential", cache.reset, params)
            args = engine_args(ctx.experts, ctx.seq_offsets, ctx.slots, ctx.num_experts, ctx.per_layer,
                               ctx.sequential, ctx.reset_each_seq, log_evictions)
            run(args, policy.make_state(ctx))  # the policy's set-up counts: Belady's next uses, ml-ffn's predictions
            return args

        args, seconds = warm_then_time(engine, experts, offsets)
        timed = engine_hits(args), seconds
        evictions = engine_evictions(args).copy() if log_evictions else None
    hits, seconds = timed
    return HitRate(cache.composed, cache.capacity, cache.scope, cache.semantics, sum(per_layer_accesses),
                   int(hits.sum()), [int(h) for h in hits], per_layer_accesses, seconds, evictions)


def _counts_runner(path, name: str, num_experts: int, slots: np.ndarray, reset: bool, params: dict):
    """A ``FastPath`` of kind ``"counts"``: the policy's own whole-run function of the run's ``Context``."""
    return lambda experts, seq_offsets: path.make(Context(experts, seq_offsets, num_experts, slots, True, True, reset,
                                                          params))


# the driver of each kind of fast path (``moesim.policies.base.FastPath``)
RUNNERS = {"counts": _counts_runner, "lanes": lane_runner, "across": across_runner}
