"""Replacement policies, one module each, behind one registry.

Every module has ``NAME``, ``make_state(ctx)`` and its ``HOOKS``; see
``moesim.policies.base`` for the hook contract. Registering a policy is adding its name here.
Prefetchers are modules ``prefetch_<name>`` behind ``get_prefetcher``.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from moesim import MoesimError

POLICIES = ("belady", "lru", "lfu", "fifo", "lifo", "random", "arc", "lecar", "gamma", "gamma-admit", "ml-ffn",
            "static")


PREFETCHERS = ("none", "oracle", "speculative", "history", "prompt", "popular")


def get_prefetcher(name: str) -> ModuleType | None:
    """A prefetcher module (``KIND`` "next": ``predict(trace, params)`` gives the experts to fetch for
    every (token, layer); "preload": ``scores(trace, params)`` ranks experts per sequence and layer),
    or None for "none"."""
    if name not in PREFETCHERS:
        raise MoesimError(f"unknown prefetcher {name!r}; choose from {', '.join(PREFETCHERS)}")
    return None if name == "none" else import_module(f"moesim.policies.prefetch_{name}")


def get_policy(name: str) -> ModuleType:
    if name not in POLICIES:
        raise MoesimError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    return import_module(f"moesim.policies.{name.replace('-', '_')}")
