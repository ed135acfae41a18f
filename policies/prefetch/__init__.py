"""Prefetchers, one module each, apart from the replacement policies (as libCacheSim keeps prefetch
apart from eviction): a prefetcher decides what to load before it is asked for; the cache's policy
decides what it evicts for it (its ``on_prefetch`` hook).

A ``KIND = "next"`` module's ``predict(trace, params)`` gives the experts to fetch for every
(token, layer), an array the engine reads and never writes (it may be the trace's own); a
``KIND = "preload"`` module's ``scores(trace, params)`` ranks experts per sequence and layer, and
the engine preloads each layer's Top-C before a batch decodes.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from moesim.errors import MoesimError

PREFETCHERS = ("none", "oracle", "speculative", "history", "prompt", "popular")


def get_prefetcher(name: str) -> ModuleType | None:
    """The prefetcher module called ``name``, or None for "none"."""
    if name not in PREFETCHERS:
        raise MoesimError(f"unknown prefetcher {name!r}; choose from {', '.join(PREFETCHERS)}")
    return None if name == "none" else import_module(f"moesim.policies.prefetch.{name}")


