"""Policies that share one compiled discrete-event loop.

Most of the discrete-event loop's compile time is its policy-free body (about 11 s on a 2-core host for the
whole loop; a policy's hooks add 0.2-4 s), so its policies are compiled in groups (``GROUPS``): one loop per group,
whose hooks (``hooks``) pass each call on to the member the run names. The state a group's loop takes
(``state``) is the member's index, then one state per member: the run's own for its policy, and for the others
stand-ins of the same types built on a one-expert trace, which no hook reads. A branch on the index, the same at
every access, is what a policy pays for its company.

Policies whose hooks compile fast and that one command runs together share a group: a plan runs LRU and the
static pin, the demo those and Belady, LFU, FIFO and the γ-cache. A policy that cannot build its state without
an input of its own (ML-FFN's model file) has no stand-in, and is alone in its group.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from moesim.policies import get_policy
from moesim.policies.base import DEFAULT_HOOKS, HOOK_ARGS, Context
from moesim.sim.config import run_params
from moesim.sim.engine import bind, place

GROUPS = (("lru", "static"), ("belady", "lfu", "fifo", "gamma"), ("gamma-admit", "lifo", "random", "arc", "lecar"),
          ("ml-ffn",))
_HOOKS: dict = {}
_STAND_INS: dict = {}
_INLINED = {fn: njit(inline="always")(fn.py_func) for fn in set(DEFAULT_HOOKS.values())}


def group_of(policy: str) -> tuple[str, ...]:
    """The members of ``policy``'s group (a policy in none is alone)."""
    get_policy(policy)  # an unknown name is refused with the registry's message
    return next((group for group in GROUPS if policy in group), (policy,))


def group_name(group: tuple[str, ...]) -> str:
    """A group as compiled loops are named: its members, joined."""
    return "_".join(name.replace("-", "_") for name in group)


PLACE_ARGS = "part, obj, t, lo, hi, slot_of, obj_of, used, mark, stamp"  # ``moesim.sim.engine.place``'s, after ``st``


def hooks(group: tuple[str, ...]) -> dict:
    """The hook table of a group's loop: each hook calls the hook of the member whose index heads the state
    (``st[0]``) with that member's state (``st[1 + index]``), and ``place`` the member's ``engine.place``,
    compiled once with its hooks (``bind``) and called: the loop places at four sites, and inlining every
    member's victim hooks at each took a third longer to compile. A hook that every member leaves to the same
    no-op default (``moesim.policies.base.DEFAULT_HOOKS``, which read no state) is that default, with no branch:
    a plan's LRU and static pin share three, and each site of one compiled as two. A member's hook that is such a
    default is inlined (``_INLINED``): called, each was compiled as a function of its own, 0.05-0.1 s apiece.
    Written as source once per group and process, so that each call is static (``moesim.sim.engine.bind`` inlines
    the table)."""
    if group not in _HOOKS:
        namespace = {"__name__": __name__}
        lines = []
        tables = [get_policy(member).hooks for member in group]
        for hook, args in {**HOOK_ARGS, "place": PLACE_ARGS}.items():
            rest = f", {args}" if args else ""
            lines.append(f"def {hook}(st{rest}):")
            shared = hook in DEFAULT_HOOKS and all(table[hook] is DEFAULT_HOOKS[hook] for table in tables)
            for i in range(0 if shared else len(group) - 1):
                lines += [f"    if st[0] == {i}:", f"        return m{i}_{hook}(st[{i + 1}]{rest})"]
            last = 0 if shared else len(group) - 1
            lines.append(f"    return m{last}_{hook}(st[{last + 1}]{rest})")
            for i, member in enumerate(group):
                namespace[f"m{i}_{hook}"] = (bind(place, member, tables[i]) if hook == "place" else
                                             _INLINED.get(tables[i][hook], tables[i][hook]))
        exec(compile("\n".join(lines), __file__, "exec"), namespace)  # named after this file: its digest covers it
        _HOOKS[group] = {hook: njit(inline="always")(namespace[hook]) for hook in (*HOOK_ARGS, "place")}
    return _HOOKS[group]


def state(policy: str, policy_state: tuple) -> tuple:
    """What a group's loop takes for a run of ``policy`` whose state is ``policy_state``."""
    group = group_of(policy)
    return (np.int64(group.index(policy)),
            *(policy_state if member == policy else stand_in(member) for member in group))


def stand_in(policy: str) -> tuple:
    """A state of ``policy``'s types for a trace of one token, one layer and one expert, with its default
    parameters (built once per process)."""
    if policy not in _STAND_INS:
        spec = get_policy(policy)
        ctx = Context(np.zeros((1, 1, 1), np.int16), np.array([0, 1], np.int64), 1, np.ones(1, np.int64), True, False,
                      False, run_params(spec, {}))
        _STAND_INS[policy] = spec.make_state(ctx)
    return _STAND_INS[policy]
