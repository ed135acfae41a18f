"""Exact hit rates of a replacement policy on a trace: the Python face of the hit-rate engines."""

from __future__ import annotations

from moesim.sim.budget import best_slots
from moesim.sim.config import CacheConfig
from moesim.sim.hits import HitRate, check_capacity, count_hits
from moesim.tracegen.trace import Trace

__all__ = ["HitRate", "simulate"]


def simulate(trace: Trace, cache: CacheConfig, log_evictions: int = 0) -> HitRate:
    """Run ``cache.policy`` over ``trace`` and count hits per layer (``moesim.sim.hits.count_hits``);
    ``split`` best runs the split ``moesim.sim.budget.best_slots`` finds, reported as the capacity per
    layer. ``log_evictions`` > 0 keeps the first that many evictions as (access position, object)."""
    if cache.split == "best":
        check_capacity(trace.meta, cache)  # the slots to share out, before they are
        cache = best_slots(trace, cache)
    return count_hits(trace, cache, log_evictions)
