"""Replacement policies, one module each, behind one registry.

Every module declares its ``SPEC``, a ``moesim.policies.base.PolicySpec`` (its name, state, hooks, parameters
and what it declares of itself); see ``moesim.policies.base`` for the hook contract. Registering a policy is adding
its name here (and to a group of ``moesim.sim.policy_groups.GROUPS``, the policies whose discrete-event loop it
shares; a policy in none has its own).
Prefetchers are the subpackage ``moesim.policies.prefetch``, one module each behind ``get_prefetcher``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from moesim.errors import MoesimError

if TYPE_CHECKING:
    from moesim.policies.base import PolicySpec

POLICIES = ("belady", "lru", "lfu", "fifo", "lifo", "random", "arc", "lecar", "gamma", "gamma-admit", "ml-ffn",
            "static")
DEFAULT_POLICY = "lru"  # a configuration's policy where none is named


def get_policy(name: str) -> PolicySpec:
    """The policy called ``name``, as its module declares it (read at each call, so a test may patch it)."""
    if name not in POLICIES:
        raise MoesimError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    return import_module(f"moesim.policies.{name.replace('-', '_')}").SPEC
