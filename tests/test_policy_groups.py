"""The policies sharing one compiled discrete-event loop (``moesim.sim.policy_groups``)."""

import numba
import numpy as np
import pytest

from moesim.policies import POLICIES, get_policy
from moesim.policies.base import DEFAULT_HOOKS, HOOK_NAMES, Context
from moesim.sim import policy_groups
from moesim.sim.config import run_params

SHARED = [p for group in policy_groups.GROUPS if len(group) > 1 for p in group]


def test_every_policy_is_in_one_group_and_a_plan_needs_one():
    members = [p for group in policy_groups.GROUPS for p in group]
    assert sorted(members) == sorted(POLICIES)
    assert policy_groups.group_of("lru") == policy_groups.group_of("static")  # a plan's two policies: one loop
    assert policy_groups.group_of("ml-ffn") == ("ml-ffn",)  # its state needs a model file: no stand-in


@pytest.mark.parametrize("policy", SHARED)
def test_a_stand_in_has_the_types_of_a_real_state(policy, mixtral):
    """A group's loop is compiled for its members' states' types: a stand-in of other types would compile it again
    (silently, 15 s) for every run."""
    spec = get_policy(policy)
    for per_layer, sequential, reset in ((True, False, False), (False, True, True)):
        slots = np.full(mixtral.meta.num_layers if per_layer else 1, 4 if per_layer else 96, np.int64)
        ctx = Context(mixtral.experts, mixtral.seq_offsets, mixtral.meta.num_experts, slots, per_layer, sequential,
                      reset, run_params(spec, {}))
        assert numba.typeof(policy_groups.stand_in(policy)) == numba.typeof(spec.make_state(ctx))


def test_a_groups_state_puts_the_runs_own_state_at_its_members_place():
    group = policy_groups.group_of("fifo")
    own = ("fifo's own",)
    st = policy_groups.state("fifo", own)
    assert st[0] == group.index("fifo") and st[1 + group.index("fifo")] is own
    assert all(st[1 + i] is policy_groups.stand_in(p) for i, p in enumerate(group) if p != "fifo")


def test_group_hooks_name_each_members_hook_by_its_index():
    """The table written as source: every hook of the contract and ``place``, each branch calling member i's hook
    with state i."""
    group = policy_groups.group_of("lfu")
    table = policy_groups.hooks(group)
    assert set(table) == {*HOOK_NAMES, "place"}
    namespace = table["on_hit"].py_func.__globals__
    for i, member in enumerate(group):
        hook, own = namespace[f"m{i}_on_hit"], get_policy(member).hooks["on_hit"]
        assert hook.py_func is own.py_func  # a no-op default inlined, any other called
        assert (hook.targetoptions.get("inline") == "always") == any(own is d for d in DEFAULT_HOOKS.values())
        assert namespace[f"m{i}_place"].py_func.__globals__["policy"].choose_victim.py_func is \
            get_policy(member).hooks["choose_victim"].py_func


def test_a_hook_every_member_leaves_to_the_same_default_is_that_default():
    """LRU and the static pin both take the default on_step, on_miss and on_prefetch (no-ops that read no state):
    the group's hook calls it with no branch on the member; a hook one member has of its own keeps the branch,
    each state to its member's hook (the runs' results: ``tests/test_reference.py`` and the golden table)."""
    import dis

    def branches(fn):
        return any(op.opname == "COMPARE_OP" for op in dis.get_instructions(fn.py_func))

    table = policy_groups.hooks(("lru", "static"))
    for hook in ("on_step", "on_miss", "on_prefetch"):
        assert all(get_policy(p).hooks[hook] is DEFAULT_HOOKS[hook] for p in ("lru", "static"))
        called = table[hook].py_func.__globals__["m0_" + hook]
        assert not branches(table[hook]) and called.py_func is DEFAULT_HOOKS[hook].py_func
        assert called.targetoptions["inline"] == "always"  # inlined, not compiled as a function of its own
    for hook in ("reset", "on_hit", "on_evict", "on_insert", "choose_victim", "place"):
        assert branches(table[hook])
