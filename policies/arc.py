"""arc: Adaptive Replacement Cache (Megiddo & Modha, FAST 2003).

Two LRU lists of resident experts, T1 (seen once recently) and T2 (seen at least twice), and their
ghost lists B1 and B2 of recently evicted ids. A hit in B1 grows the target size p of T1 by
max(|B2| / |B1|, 1), a hit in B2 shrinks it by max(|B1| / |B2|, 1) (real division, p kept in
[0, c]); REPLACE evicts T1's LRU end to B1 when |T1| > p (or |T1| = p and the request
was in B2), else T2's LRU end to B2. A miss in no list follows the paper's case IV: when
|T1| + |B1| = c, drop B1's oldest ghost (or, if T1 alone fills the cache, evict T1's LRU end with no
ghost); otherwise drop B2's oldest ghost once all four lists hold 2c ids. Under ``step`` semantics
members of the current request set are skipped when walking from an LRU end.

Prefetch rule (the paper has no prefetch; a fill is no request): p does not adapt, a ghost entry of
the expert is dropped (it is resident again), REPLACE makes room as for case IV, and the expert
enters T1's MRU end. Its first request is then its first sighting: it moves to T1's MRU end, not to T2.

Per layer under sequential semantics, up to 32 slots, the same rules run with a layer in each SIMD
lane (``moesim.policies.arc_across``, ``ACROSS_HOOKS``; ``moesim.sim.across``).
"""

import numpy as np
from numba import njit

from moesim.policies.arc_across import across_reset, across_step, make_across  # noqa: F401 (moesim.sim.across)
from moesim.policies.base import (TAIL, hooks, list_first_unmarked, list_of, list_push_head, list_remove,
                                  list_size, list_tail, lists_clear, make_lists)

NAME = "arc"
T1, T2, B1, B2 = 0, 1, 2, 3
NO_GHOST = -1


def make_state(ctx):
    # per partition: [list the missing id was found in (B1, B2 or -1), ghost list for the victim,
    # 1 if the insert is a prefetch fill], p; per object: 1 while a fill has not been requested
    return (make_lists(ctx.num_objects, ctx.num_parts, 4), np.zeros((ctx.num_parts, 3), np.int64),
            ctx.slots, np.zeros(ctx.num_parts, np.float64),
            np.zeros(ctx.num_objects, np.int64))


@njit(cache=True)
def reset(st):
    lists_clear(st[0])
    st[1][:, :2] = NO_GHOST
    st[1][:, 2] = 0
    st[3][:] = 0.0
    st[4][:] = 0


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    list_remove(st[0], part, obj)
    list_push_head(st[0], part, T1 if st[4][obj] else T2, obj)
    st[4][obj] = 0


@njit(cache=True)
def on_miss(st, part, obj, t):
    lists, ctl, c = st[0], st[1], st[2][part]
    found = list_of(lists, obj)
    ctl[part, 0] = found if found == B1 or found == B2 else NO_GHOST
    if found == B1:
        st[3][part] = min(st[3][part] + max(list_size(lists, part, B2) / list_size(lists, part, B1), 1.0), c)
        list_remove(lists, part, obj)
    elif found == B2:
        st[3][part] = max(st[3][part] - max(list_size(lists, part, B1) / list_size(lists, part, B2), 1.0), 0.0)
        list_remove(lists, part, obj)
    ctl[part, 2] = 0
    return True


@njit(cache=True)
def on_prefetch(st, part, obj, t):
    lists, ctl = st[0], st[1]
    found = list_of(lists, obj)
    if found == B1 or found == B2:
        list_remove(lists, part, obj)
    ctl[part, 0] = NO_GHOST
    ctl[part, 2] = 1


@njit(cache=True, inline="always")
def _replace(st, part, slot_of, mark, stamp):
    lists, ctl = st[0], st[1]
    t1 = list_size(lists, part, T1)
    p = st[3][part]
    old1 = list_first_unmarked(lists, part, T1, TAIL, mark, stamp)
    if old1 >= 0 and (t1 > p or (t1 == p and ctl[part, 0] == B2)):
        ctl[part, 1] = B1
        return slot_of[old1]
    old2 = list_first_unmarked(lists, part, T2, TAIL, mark, stamp)
    if old2 < 0:
        ctl[part, 1] = B1
        return slot_of[old1]
    ctl[part, 1] = B2
    return slot_of[old2]


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    lists, ctl, c = st[0], st[1], st[2][part]
    if ctl[part, 0] == NO_GHOST:
        if list_size(lists, part, T1) + list_size(lists, part, B1) >= c:
            if list_size(lists, part, T1) < c:
                list_remove(lists, part, list_tail(lists, part, B1))
            else:
                ctl[part, 1] = NO_GHOST
                return slot_of[list_first_unmarked(lists, part, T1, TAIL, mark, stamp)]
        elif list_size(lists, part, T1) + list_size(lists, part, T2) + list_size(lists, part, B1) + list_size(lists, part, B2) >= 2 * c:
            list_remove(lists, part, list_tail(lists, part, B2))
    return _replace(st, part, slot_of, mark, stamp)


@njit(cache=True)
def on_evict(st, part, slot, obj, t):
    list_remove(st[0], part, obj)
    st[4][obj] = 0
    if st[1][part, 1] != NO_GHOST:
        list_push_head(st[0], part, st[1][part, 1], obj)


@njit(cache=True)
def on_insert(st, part, slot, obj, t):
    list_push_head(st[0], part, T1 if st[1][part, 0] == NO_GHOST else T2, obj)
    st[1][part, 0] = NO_GHOST
    st[4][obj] = st[1][part, 2]


HOOKS = hooks(reset=reset, on_hit=on_hit, on_miss=on_miss, on_prefetch=on_prefetch, choose_victim=choose_victim,
              on_evict=on_evict, on_insert=on_insert)
ACROSS_HOOKS = {"across_reset": across_reset, "across_step": across_step}
