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

Per layer under sequential semantics the same rules run, up to 64 slots, with a layer in each SIMD lane
(``moesim.policies.arc_across``; ``moesim.sim.across``), and past the lanes a layer at a time on these lists
(``moesim.policies.arc_lists``): both are ``fast_paths``.
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from moesim.policies.arc_across import WIDEST, across_reset, across_step, make_across
from moesim.policies.arc_lists import B1, B2, NO_GHOST, T1, T2, adapt, case_iv, from_t1, list_hits
from moesim.policies.base import (NARROW_LANES, TAIL, FastPath, Lists, PolicySpec, hooks, list_first_unmarked,
                                  list_of, list_push_head, list_remove, list_size, list_tail, lists_clear, make_lists)

# up to WIDEST slots per layer with a layer in each SIMD lane (NARROW_LANES without 512-bit vectors); wider than eight
# slots, up to 3/4 of a layer's experts; past them, the lists a layer at a time (the crossovers: docs/benchmarks.md)


class State(NamedTuple):
    lists: Lists         # per partition T1, T2, B1, B2
    found: np.ndarray    # int64 [partitions]: the ghost list the missing id was found in (B1, B2 or NO_GHOST)
    ghost: np.ndarray    # int64 [partitions]: the ghost list the victim goes to (NO_GHOST: none)
    filling: np.ndarray  # int64 [partitions]: 1 if the insert is a prefetch fill
    slots: np.ndarray    # int64 [partitions]: c
    p: np.ndarray        # float64 [partitions]: the target size of T1
    unused: np.ndarray   # int64 [objects]: 1 while a prefetched expert has not been requested


def make_state(ctx) -> State:
    parts = ctx.num_parts
    return State(make_lists(ctx.num_objects, parts, 4), np.zeros(parts, np.int64), np.zeros(parts, np.int64),
                 np.zeros(parts, np.int64), ctx.slots, np.zeros(parts, np.float64), np.zeros(ctx.num_objects, np.int64))


@njit(cache=True)
def reset(st):
    lists_clear(st.lists)
    st.found[:] = NO_GHOST
    st.ghost[:] = NO_GHOST
    st.filling[:] = 0
    st.p[:] = 0.0
    st.unused[:] = 0


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    list_remove(st.lists, part, obj)
    list_push_head(st.lists, part, T1 if st.unused[obj] else T2, obj)
    st.unused[obj] = 0


@njit(cache=True)
def on_miss(st, part, obj, t):
    lists = st.lists
    found = list_of(lists, obj)
    st.found[part] = found if found == B1 or found == B2 else NO_GHOST
    if found == B1 or found == B2:
        st.p[part] = adapt(st.p[part], list_size(lists, part, B1), list_size(lists, part, B2), st.slots[part], found)
        list_remove(lists, part, obj)
    st.filling[part] = 0
    return True


@njit(cache=True)
def on_prefetch(st, part, obj, t):
    found = list_of(st.lists, obj)
    if found == B1 or found == B2:
        list_remove(st.lists, part, obj)
    st.found[part] = NO_GHOST
    st.filling[part] = 1


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    lists = st.lists
    t1 = list_size(lists, part, T1)
    old1 = list_first_unmarked(lists, part, T1, TAIL, mark, stamp)
    if st.found[part] == NO_GHOST:
        first = case_iv(t1, list_size(lists, part, T2), list_size(lists, part, B1), list_size(lists, part, B2),
                        st.slots[part])
        if first == T1:
            st.ghost[part] = NO_GHOST
            return slot_of[old1]
        if first != NO_GHOST:
            list_remove(lists, part, list_tail(lists, part, first))
    old2 = list_first_unmarked(lists, part, T2, TAIL, mark, stamp)
    if from_t1(old1 >= 0, old2 >= 0, t1, st.p[part], st.found[part]):
        st.ghost[part] = B1
        return slot_of[old1]
    st.ghost[part] = B2
    return slot_of[old2]


@njit(cache=True)
def on_evict(st, part, slot, obj, t):
    list_remove(st.lists, part, obj)
    st.unused[obj] = 0
    if st.ghost[part] != NO_GHOST:
        list_push_head(st.lists, part, st.ghost[part], obj)


@njit(cache=True)
def on_insert(st, part, slot, obj, t):
    list_push_head(st.lists, part, T1 if st.found[part] == NO_GHOST else T2, obj)
    st.found[part] = NO_GHOST
    st.unused[obj] = st.filling[part]


SPEC = PolicySpec("arc", make_state,
                  hooks(reset=reset, on_hit=on_hit, on_miss=on_miss, on_prefetch=on_prefetch,
                        choose_victim=choose_victim, on_evict=on_evict, on_insert=on_insert),
                  fast_paths=(FastPath("across", make_across,
                                       {"across_reset": across_reset, "across_step": across_step},
                                       fullest=0.75, crowded=8, widest=WIDEST, narrow=NARROW_LANES),
                              FastPath("counts", list_hits)))
