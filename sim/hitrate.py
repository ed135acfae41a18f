"""Exact hit rates of a replacement policy on a trace: the Python face of the compiled engine."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from moesim.errors import MoesimError
from moesim.policies import get_policy
from moesim.policies.base import Context
from moesim.sim.config import CacheConfig, module_params
from moesim.sim.engine import bind, engine_args, engine_evictions, engine_hits, hitrate_loop, place
from moesim.sim.across import across_hits
from moesim.sim.lanes import lane_hits
from moesim.sim.lru_ranks import rank_counts
from moesim.tracegen.trace import Trace


@dataclass
class HitRate:
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
    return f"capacity {slots[part]} of layer {part}" if isinstance(capacity, tuple) else f"capacity {slots[part]}"


def check_fits_experts(meta, cache: CacheConfig) -> None:
    """A cache larger than the experts there are is a mistake (a capacity meant for another model)."""
    most = meta.num_experts if cache.scope == "per-layer" else meta.num_layers * meta.num_experts
    slots = cache.slots(meta.num_layers)
    if slots.max() > most:
        where = "per layer" if cache.scope == "per-layer" else f"in all {meta.num_layers} layers"
        named = capacity_named(cache.capacity, slots, int(slots.argmax()))
        raise MoesimError(f"{named} is more than the {most} experts {where}")


def check_capacity(meta, cache: CacheConfig) -> None:
    """A hit-rate run caches at least one expert, and under step semantics a whole step's k, in every
    partition; never more than there are experts."""
    if cache.capacity == "auto":
        raise MoesimError("capacity auto is what a machine's memory holds, and hit rates have no machine: give a "
                          "number of slots (or use 'moesim sim run --capacity auto')")
    slots, top_k = cache.slots(meta.num_layers), meta.top_k
    low = int(slots.argmin())
    named = capacity_named(cache.capacity, slots, low)
    if slots[low] < 1:
        raise MoesimError(f"{named} must be at least 1")
    if cache.semantics == "step" and slots[low] < top_k:
        raise MoesimError(f"{named} is below top_k {top_k}: under step semantics all "
                          f"k experts of a step are resident at once; use a capacity >= {top_k} or --semantics "
                          "sequential")
    check_fits_experts(meta, cache)


def simulate(trace: Trace, cache: CacheConfig, log_evictions: int = 0) -> HitRate:
    """Run ``cache.policy`` over ``trace`` and count hits per layer (``split`` best: on the split
    ``moesim.sim.budget.best_slots`` finds, reported as the capacity per layer). With a cache per layer
    under sequential semantics LRU counts by recency ranks (``moesim.sim.lru_ranks``), a policy with
    ``ACROSS_HOOKS`` runs with a layer in each SIMD lane (``moesim.sim.across``) and one with
    ``LANE_HOOKS`` eight layers at a time (``moesim.sim.lanes``): the same hits, no evictions to log.
    Every other run is the compiled engine with the policy's hooks.

    ``log_evictions`` > 0 keeps the first that many evictions as (access position, object).
    """
    check_capacity(trace.meta, cache)
    if cache.split == "best":
        from moesim.sim.budget import best_slots  # it runs curves, which run this

        cache = best_slots(trace, cache)
    module = get_policy(cache.policy)
    policy, capacity, scope, semantics, reset = cache.policy, cache.capacity, cache.scope, cache.semantics, cache.reset
    params = module_params(module, cache.params)
    slots = cache.slots(trace.meta.num_layers)
    per_layer_accesses = [trace.num_rows * trace.meta.top_k] * trace.meta.num_layers
    fast = None  # the same hits, by recency ranks or in lanes
    if (scope, semantics) == ("per-layer", "sequential") and not log_evictions:
        fast = _lru_ranks(trace, reset, slots) if policy == "lru" else (
            across_hits(module, trace, slots, reset, params) or lane_hits(module, trace, slots, reset, params))
    if fast is not None:
        hits, seconds = fast
        return HitRate(policy, capacity, scope, semantics, sum(per_layer_accesses), int(hits.sum()),
                       [int(h) for h in hits], per_layer_accesses, seconds)
    ctx = Context(trace.experts, trace.seq_offsets.astype(np.int64), trace.meta.num_experts, slots,
                  scope == "per-layer", semantics == "sequential", reset, params)
    # compile (or load the compiled code from cache) on a one-row slice so the timing is the engine's
    warm = Context(ctx.experts[:1], np.array([0, 1], np.int64), ctx.num_experts, slots, ctx.per_layer,
                   ctx.sequential, reset, params)
    run = bind(module, hitrate_loop, (place,))
    run(_args(warm), module.make_state(warm))
    args = _args(ctx, log_evictions)
    start = time.perf_counter()  # the policy's set-up counts: Belady's next uses, ml-ffn's predictions
    run(args, module.make_state(ctx))
    seconds = time.perf_counter() - start
    hits = engine_hits(args)
    return HitRate(policy, capacity, scope, semantics, sum(per_layer_accesses), int(hits.sum()),
                   [int(h) for h in hits], per_layer_accesses, seconds,
                   engine_evictions(args).copy() if log_evictions else None)


def _lru_ranks(trace: Trace, reset: bool, slots: np.ndarray) -> tuple[np.ndarray, float]:
    """LRU's hits per layer by recency ranks, and the seconds that took (compiled first on one row)."""
    offsets, num_experts = trace.seq_offsets.astype(np.int64), trace.meta.num_experts
    rank_counts(trace.experts[:1], np.array([0, 1], np.int64), num_experts, reset, slots)
    start = time.perf_counter()
    hits = rank_counts(trace.experts, offsets, num_experts, reset, slots)
    return hits, time.perf_counter() - start


def _args(ctx: Context, log_evictions: int = 0) -> tuple:
    return engine_args(ctx.experts, ctx.seq_offsets, ctx.slots, ctx.num_experts, ctx.per_layer,
                       ctx.sequential, ctx.reset_each_seq, log_evictions)
