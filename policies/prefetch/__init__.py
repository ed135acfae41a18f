"""Prefetchers, one module each, apart from the replacement policies (as libCacheSim keeps prefetch
apart from eviction): a prefetcher decides what to load before it is asked for; the cache's policy
decides what it evicts for it (its ``on_prefetch`` hook).

Each module declares its ``SPEC``, a ``PrefetcherSpec``: a ``"next"`` prefetcher's ``predict(trace, params)`` gives
the experts to fetch for every (token, layer), an array the engine reads and never writes (it may be the trace's
own); a ``"preload"`` one's ``scores(trace, params)`` ranks experts per sequence and layer, and the engine preloads
each layer's Top-C before a batch decodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Callable

from moesim.errors import MoesimError
from moesim.params import Param

PREFETCHERS = ("none", "oracle", "speculative", "history", "learned", "prompt", "popular")
FETCHING = PREFETCHERS[1:]  # every prefetcher but none, each a module
KINDS = ("next", "preload")
TRAIN_TRACE = Param(None, "trace", "Trace the history and popular prefetchers learn from (default: the simulated "
                                   "trace).")  # one setting for both


@dataclass(frozen=True)
class PrefetcherSpec:
    """A prefetcher: its ``kind`` (``KINDS``), the function that kind calls, and its parameters (name ->
    ``moesim.params.Param``)."""

    name: str
    kind: str
    predict: Callable | None = None  # "next"
    scores: Callable | None = None   # "preload"
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS or (self.predict is None) != (self.kind == "preload") \
                or (self.scores is None) != (self.kind == "next"):
            raise MoesimError(f"prefetcher {self.name}: a next prefetcher has predict, a preload one scores")


def get_prefetcher(name: str) -> PrefetcherSpec | None:
    """The prefetcher called ``name``, or None for "none"."""
    if name not in PREFETCHERS:
        raise MoesimError(f"unknown prefetcher {name!r}; choose from {', '.join(PREFETCHERS)}")
    return None if name == "none" else import_module(f"moesim.policies.prefetch.{name}").SPEC


