"""gamma: MELINOE's γ-cache — a decayed request count per expert, evict the lowest.

MELINOE (eq. 8–9, Definition C.1): at every token t and layer ℓ, Count ← γ·Count + r, where r is
the 0/1 request vector of the k routed experts, and the cache is Top-C of Count. Here the count is
kept for every expert of the layer whether resident or not, starts at 0 (the paper's fill-phase
initialisation), and the lowest decayed count among resident experts outside the current request
set is evicted. Decay is applied lazily: an expert last counted at token τ has score c·γ^(t−τ) now, and
an expert is counted when it is served (hits first, then misses), so under ``sequential`` semantics
an expert later in the request set is not yet counted when an earlier one misses. Ties go to the
least recently served expert, so γ = 0 is exactly LRU and γ = 1 is perfect LFU (counts that survive
eviction), the two limits the paper states. Parameter ``gamma`` (default 0.9, the
paper's value). With global scope the count is still per (layer, expert) and decays once per token.
"""

import numpy as np
from numba import njit

from moesim import MoesimError
from moesim.policies.base import min_key_slot, no_access
from moesim.sim.engine import hooks

NAME = "gamma"


def make_state(ctx):
    gamma = float(ctx.params.get("gamma", 0.9))
    if not 0.0 <= gamma <= 1.0:
        raise MoesimError(f"gamma must lie in [0, 1], got {gamma}")
    n = ctx.num_objects
    # count at its last update, token (row) of that update, order of the last access, scratch
    # scores, γ^d for every gap d a trace of this length can have, [experts per layer, access clock, current row]
    return (np.zeros(n), np.zeros(n, np.int64), np.zeros(n), np.zeros(n), powers(gamma, ctx.experts.shape[0]),
            np.array([ctx.num_experts, 0, 0], np.int64))


@njit(cache=True)
def powers(gamma, n):
    """γ^d for d = 0..n (the decay over d tokens), one table so the run computes no powers."""
    out = np.empty(n + 1)
    for d in range(n + 1):
        out[d] = gamma ** d
    return out


@njit(cache=True)
def reset(st):
    st[0][:] = 0.0
    st[1][:] = 0
    st[2][:] = -1.0
    st[5][1] = 0


@njit(cache=True)
def on_step(st, part, layer, row, ranked, t):
    st[5][2] = row


@njit(cache=True)
def on_access(st, part, obj, t):
    count, last_row, last_seen, decay, ctl = st[0], st[1], st[2], st[4], st[5]
    row = ctl[2]
    count[obj] = count[obj] * decay[row - last_row[obj]] + 1.0
    last_row[obj] = row
    ctl[1] += 1
    last_seen[obj] = ctl[1]


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    on_access(st, part, obj, t)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    count, last_row, score, decay, row = st[0], st[1], st[3], st[4], st[5][2]
    for slot in range(lo, hi):
        o = obj_of[slot]
        score[o] = count[o] * decay[row - last_row[o]]
    return min_key_slot(score, st[2], lo, hi, obj_of, mark, stamp)


HOOKS = hooks(reset=reset, on_step=on_step, on_hit=on_hit, on_miss=on_access,
              choose_victim=choose_victim, on_evict=no_access, on_insert=no_access)
