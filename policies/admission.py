"""Admission composed with any replacement policy, as libCacheSim composes an admissioner with an eviction algorithm:
whether a missed expert is kept at all is the admission's decision, which expert makes room for it the policy's.

An admission (``AdmissionSpec``) declares its state, its hooks (any of ``moesim.policies.base.HOOK_NAMES`` but
``choose_victim`` and ``on_move``: ``on_miss`` decides, ``on_insert``/``on_evict`` tell it what is resident) and its
parameters. ``compose(policy, admission)`` is a ``PolicySpec``: every hook calls the admission's and then the policy's,
each with its own state; ``on_miss`` keeps the expert iff both do, and the policy sees every miss whatever the
admission decides (libCacheSim's eviction looks an object up, and updates its ghosts, before its admissioner is
asked); ``choose_victim`` is the policy's. A prefetch or a preload is no request: the admission does not judge it.

The admissions (``ADMISSIONS``): ``all`` keeps what the policy keeps (no composition); ``gamma`` is MELINOE's
γ-cache admission (Definition C.1: a miss is kept iff its decayed request count reaches the Top-C;
``moesim.policies.gamma``). Over the eviction of the lowest decayed count (``gamma-admit``) it is MELINOE's cache,
hit for hit (``gamma`` runs that cache with one set of counts, where the composition keeps two). Over another policy
it is a frequency filter in front of its eviction order, as TinyLFU's is (Einziger et al., 2017), with MELINOE's rule:
the miss is compared with every resident outside the step's requests, not with the policy's victim alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple

from numba import njit

from moesim.params import Param
from moesim.policies.base import DEFAULT_HOOKS, HOOK_ARGS, PolicySpec

ADMISSIONS = ("all", "gamma")  # each but "all" the module moesim.policies.<name>, whose ADMISSION it is
ADMITS_ALL = "all"
_COMPOSED: dict = {}


def composed(policy: str, admission: str = ADMITS_ALL) -> str:
    """What runs, named: ``policy``, or ``policy+admission`` (whose parameters are both's)."""
    return policy if admission == ADMITS_ALL else f"{policy}+{admission}"


def parts(name: str) -> tuple[str, str]:
    """A name ``composed`` gives, as its policy and its admission (``all`` for a policy alone)."""
    policy, _, admission = name.partition("+")
    return policy, admission or ADMITS_ALL


@dataclass(frozen=True)
class AdmissionSpec:
    """An admission: ``name``, ``make_state(ctx)`` (a ``NamedTuple`` of arrays, as a policy's), ``hooks`` (hook name ->
    njit function; those left out do nothing, ``on_miss`` then admits) and ``params`` (``moesim.params.Param``)."""

    name: str
    make_state: Callable
    hooks: dict
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        if not set(self.hooks) <= set(HOOK_ARGS) - {"choose_victim", "on_move"} or \
                not all(isinstance(p, Param) for p in self.params.values()):
            raise TypeError(f"admission {self.name}: its hooks are a policy's but choose_victim and on_move, and its "
                            "params are Params")


class Composed(NamedTuple):
    """A composed policy's state: the admission's, then the policy's."""

    admission: tuple
    policy: tuple


def compose(policy: PolicySpec, admission: AdmissionSpec) -> PolicySpec:
    """``policy`` with ``admission`` in front of it (module docstring), named ``policy+admission``. It may leave a miss
    uncached (``bypasses``); it runs in the compiled engine (no fast path, no stack), and its state does not follow
    slots taken away."""
    key = (id(policy), id(admission))  # the specs held beside it: their ids are not reused
    if key not in _COMPOSED:
        namespace = {"__name__": __name__}
        lines = []
        for hook, args in HOOK_ARGS.items():
            rest = f", {args}" if args else ""
            calls = [(side, table[hook]) for side, table in (("admission", admission.hooks), ("policy", policy.hooks))
                     if hook in table and table[hook] is not DEFAULT_HOOKS.get(hook)]
            lines.append(f"def {hook}(st{rest}):")
            for side, fn in calls:  # inlined into the composed hook, which a loop inlines or calls as a policy's
                namespace[f"{side}_{hook}"] = njit(inline="always")(getattr(fn, "py_func", fn))
            if hook == "choose_victim":
                lines.append(f"    return policy_{hook}(st.policy{rest})")
            elif hook == "on_miss":
                asked = [f"{side}_{hook}(st.{side}{rest})" for side, _ in calls] or ["True"]
                lines += [f"    answer{i} = {call}" for i, call in enumerate(asked)]
                lines.append(f"    return {' and '.join(f'answer{i}' for i in range(len(asked)))}")
            else:
                lines += [f"    {side}_{hook}(st.{side}{rest})" for side, _ in calls] or ["    pass"]
        exec(compile("\n".join(lines), __file__, "exec"), namespace)  # named after this file: bind's digest covers it
        hooks = {hook: njit(namespace[hook]) for hook in HOOK_ARGS}

        def make_state(ctx):
            return Composed(admission.make_state(ctx), policy.make_state(ctx))

        _COMPOSED[key] = policy, admission, replace(
            policy, name=f"{policy.name}+{admission.name}", make_state=make_state, hooks=hooks,
            params={**policy.params, **admission.params}, bypasses=True, resizable=False, fast_paths=(), stack=None)
    return _COMPOSED[key][2]
