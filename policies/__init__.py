"""Replacement policies, one module each, behind one registry.

Every module has ``NAME``, ``make_state(ctx)`` and its ``HOOKS``; see
``moesim.policies.base`` for the hook contract. Registering a policy is adding its name here (and to a group
of ``moesim.sim.policy_groups.GROUPS``, the policies whose discrete-event loop it shares; a policy in none has
its own).
Prefetchers are the subpackage ``moesim.policies.prefetch``, one module each behind ``get_prefetcher``.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from moesim.errors import MoesimError

POLICIES = ("belady", "lru", "lfu", "fifo", "lifo", "random", "arc", "lecar", "gamma", "gamma-admit", "ml-ffn",
            "static")
DEFAULT_POLICY = "lru"  # a configuration's policy where none is named


def get_policy(name: str) -> ModuleType:
    if name not in POLICIES:
        raise MoesimError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    return import_module(f"moesim.policies.{name.replace('-', '_')}")
