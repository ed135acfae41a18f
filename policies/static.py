"""static: pin the C most popular experts of each layer, its own C when capacities are listed per
layer (Fiddler / DAOP-style static placement).

Popularity is the activation count in a training trace (parameter ``pin_trace``, a Trace; without
one the simulated trace itself is used, which is an oracle upper bound for static placement). With
global scope the C most popular (layer, expert) pairs are pinned. Pinned experts are loaded on first
use and never leave; an expert that is not pinned is served from the slow tier without being cached
(a miss every time), except while free slots remain at the start, which it may hold until a pinned
expert needs the slot. Count ties go to the lower expert id. A prefetch of an expert that is not
pinned is dropped once the cache is full; a pinned one is placed as a miss would be (prefetch rule).
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from moesim.errors import MoesimError
from moesim.params import Param
from moesim.policies.base import PolicySpec, hooks, min_key_slot
from moesim.tracegen.stats import layer_counts


class State(NamedTuple):
    pinned: np.ndarray  # float64 [objects]: 1.0 if pinned


def make_state(ctx) -> State:
    source = ctx.params["pin_trace"]
    experts = ctx.experts if source is None else source.experts
    if source is not None and (source.meta.num_experts != ctx.num_experts or experts.shape[1] != ctx.num_layers):
        raise MoesimError(f"pin trace has {experts.shape[1]} layers x {source.meta.num_experts} experts, "
                          f"the simulated trace {ctx.num_layers} x {ctx.num_experts}")
    counts = layer_counts(experts, ctx.num_experts)
    pinned = np.zeros(ctx.num_objects, np.float64)
    if ctx.per_layer:
        order = np.argsort(-counts, axis=1, kind="stable")
        top = np.arange(ctx.num_experts)[None, :] < ctx.slots[:, None]  # each layer's first C_l
        pinned[(np.arange(ctx.num_layers)[:, None] * ctx.num_experts + order)[top]] = 1.0
    else:
        pinned[np.argsort(-counts.ravel(), kind="stable")[:ctx.slots[0]]] = 1.0
    return State(pinned)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    if st.pinned[obj] == 0.0:
        return -1
    return min_key_slot(st.pinned, st.pinned, lo, hi, obj_of, mark, stamp)


SPEC = PolicySpec("static", make_state, hooks(choose_victim=choose_victim),
                  params={"pin_trace": Param(None, "trace", "Trace whose popularity the static policy pins (default: "
                                                             "the simulated trace).")},
                  bypasses=True)
