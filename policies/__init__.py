"""Replacement policies, one module each, behind one registry.

Every module declares its ``SPEC``, a ``moesim.policies.base.PolicySpec`` (its name, state, hooks, parameters
and what it declares of itself); see ``moesim.policies.base`` for the hook contract. Registering a policy is adding
its name here (and to a group of ``moesim.sim.policy_groups.GROUPS``, the policies whose discrete-event loop it
shares; a policy in none has its own).
An admission (``moesim.policies.admission``: ``gamma``, MELINOE's) composes with any policy that keeps every miss;
``get_policy(name, admission)`` gives the composition.
Prefetchers are the subpackage ``moesim.policies.prefetch``, one module each behind ``get_prefetcher``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from moesim.errors import MoesimError
from moesim.policies import admission as admissions
from moesim.policies.admission import ADMITS_ALL, compose, parts

if TYPE_CHECKING:
    from moesim.policies.admission import AdmissionSpec
    from moesim.policies.base import PolicySpec

POLICIES = ("belady", "lru", "lfu", "fifo", "lifo", "random", "arc", "lecar", "gamma", "gamma-admit", "ml-ffn",
            "static")
DEFAULT_POLICY = "lru"  # a configuration's policy where none is named


def get_policy(name: str, admission: str = "all") -> PolicySpec:
    """The policy called ``name``, as its module declares it (read at each call, so a test may patch it), with
    ``admission`` in front of it (``moesim.policies.admission``); ``name`` may also say both, ``policy+admission``
    (a composition's own name)."""
    name, named_admission = parts(name)
    if name not in POLICIES:
        raise MoesimError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    spec = import_module(f"moesim.policies.{name.replace('-', '_')}").SPEC
    admission = named_admission if named_admission != ADMITS_ALL else admission
    return spec if admission == ADMITS_ALL else compose(spec, get_admission(admission))


def get_admission(name: str) -> AdmissionSpec:
    """The admission called ``name`` (not ``all``): its module's ``ADMISSION`` (the registry is read at each call, so a
    test may add one)."""
    if name == ADMITS_ALL or name not in admissions.ADMISSIONS:
        raise MoesimError(f"unknown admission {name!r}; choose from {', '.join(admissions.ADMISSIONS)}")
    return import_module(f"moesim.policies.{name}").ADMISSION
