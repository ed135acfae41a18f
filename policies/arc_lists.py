"""ARC per layer under sequential semantics, one layer at a time over its accesses (``Context.layer_major``), its
four lists ``moesim.policies.base``'s: an access costs the same at any capacity, where the lanes
(``moesim.policies.arc_across``) pass over every slot. Past their widest the lanes lose to this (docs/benchmarks.md).

ARC's rules that decide from the lists' sizes (``adapt``, ``case_iv``, ``from_t1``) are here, and the engine's hooks
(``moesim.policies.arc``) take them from here. This path runs them without a prefetch (a hit-rate run has none) and
without a request set to skip (sequential semantics): a hit moves the expert to T2's head; a miss adapts p on a
ghost hit, makes room once the cache is full, and puts the expert at T1's head (T2's after a ghost hit). No slot is
kept: which expert a slot holds does not change a hit.
"""

import numpy as np
from numba import njit, uint64

from moesim.policies.base import (list_of, list_push_head, list_remove, list_size, list_tail, list_to_head,
                                  lists_clear, make_lists)

T1, T2, B1, B2 = 0, 1, 2, 3  # the lists, in ``moesim.policies.arc``'s hooks too
NO_GHOST = -1


@njit(cache=True, inline="always")
def adapt(p, b1, b2, c, found):
    """The target size p after a miss found in ``found`` (B1: grown by max(|B2| / |B1|, 1), at most c; B2: shrunk by
    max(|B1| / |B2|, 1), at least 0; else as it was), ``b1`` and ``b2`` the ghost lists' sizes with the id still in."""
    if found == B1:
        return min(p + max(np.true_divide(b2, b1), 1.0), c)
    if found == B2:
        return max(p - max(np.true_divide(b1, b2), 1.0), 0.0)
    return p


@njit(cache=True, inline="always")
def case_iv(t1, t2, b1, b2, c):
    """A full cache's miss in no list (case IV): the list whose LRU end leaves before REPLACE, B1's when T1 and B1
    hold c (T1's when T1 alone does: that victim goes with no ghost, and REPLACE is skipped), else B2's once the four
    lists hold 2c; NO_GHOST: none."""
    if t1 + b1 >= c:
        return B1 if t1 < c else T1
    return B2 if t1 + t2 + b1 + b2 >= 2 * c else NO_GHOST


@njit(cache=True, inline="always")
def from_t1(has_t1, has_t2, t1, p, found):
    """REPLACE: whether the victim is T1's LRU end (to B1): T1 has one and |T1| > p, or |T1| = p after a hit in B2;
    or T2 has none. Else T2's (to B2)."""
    return has_t1 and (t1 > p or (t1 == p and found == B2)) or not has_t2


def list_hits(ctx) -> np.ndarray:
    """Hits per layer of ARC with ``ctx.slots[layer]`` slots in each layer (a ``FastPath`` of kind ``counts``)."""
    hits = np.zeros(ctx.num_layers, np.int64)
    _run(ctx.layer_major(), ctx.seq_offsets, bool(ctx.reset_each_seq), np.asarray(ctx.slots, np.int64),
         make_lists(ctx.num_experts, 1, 4), hits)
    return hits


@njit(cache=True, _nrt=False, nogil=True)  # no reference counting: its atomic increments cost more than an access
def _run(experts, seq_offsets, reset, slots, lists, hits):
    """Each layer in turn (``experts`` [layer, row, k]), from empty, reset at each sequence when ``reset``."""
    n_layers, k = experts.shape[0], experts.shape[2]
    for layer in range(n_layers):
        c = slots[layer]
        count = 0
        for s in range(seq_offsets.shape[0] - 1):
            if s == 0 or reset:
                lists_clear(lists)
                p = 0.0
            for row in range(seq_offsets[s], seq_offsets[s + 1]):
                for j in range(k):
                    e = uint64(experts[layer, row, j])
                    found = list_of(lists, e)
                    if found == T2:
                        count += 1
                        list_to_head(lists, 0, T2, e)
                        continue
                    if found == T1:
                        count += 1
                        list_remove(lists, 0, e)
                        list_push_head(lists, 0, T2, e)
                        continue
                    if found == B1 or found == B2:
                        p = adapt(p, list_size(lists, 0, B1), list_size(lists, 0, B2), c, found)
                        list_remove(lists, 0, e)
                    t1, t2 = list_size(lists, 0, T1), list_size(lists, 0, T2)
                    if t1 + t2 >= c:
                        _make_room(lists, c, p, t1, t2, found)
                    list_push_head(lists, 0, T1 if found < 0 else T2, e)
        hits[layer] = count


@njit(cache=True, inline="always")
def _make_room(lists, c, p, t1, t2, found):
    """A full cache loses a resident: on a miss in no list case IV's first, then REPLACE (``moesim.policies.arc``)."""
    if found < 0:
        first = case_iv(t1, t2, list_size(lists, 0, B1), list_size(lists, 0, B2), c)
        if first != NO_GHOST:
            list_remove(lists, 0, list_tail(lists, 0, first))
        if first == T1:  # its LRU end went with no ghost
            return
    source, ghost = (T1, B1) if from_t1(t1 > 0, t2 > 0, t1, p, found) else (T2, B2)
    victim = list_tail(lists, 0, source)
    list_remove(lists, 0, victim)
    list_push_head(lists, 0, ghost, victim)
