"""ARC per layer under sequential semantics, one layer at a time over its accesses (``Context.layer_major``), its
four lists ``moesim.policies.base``'s: an access costs the same at any capacity, where the lanes
(``moesim.policies.arc_across``) pass over every slot. Past their widest the lanes lose to this (docs/benchmarks.md).

The rules are ``moesim.policies.arc``'s without a prefetch (a hit-rate run has none) and without a request set
to skip (sequential semantics): a hit moves the expert to T2's head; a miss adapts p on a ghost hit, makes room
once the cache is full (the paper's case IV, then REPLACE), and puts the expert at T1's head (T2's after a ghost
hit). No slot is kept: which expert a slot holds does not change a hit.
"""

import numpy as np
from numba import njit, uint64

from moesim.policies.base import (list_of, list_push_head, list_remove, list_size, list_tail, list_to_head,
                                  lists_clear, make_lists)

T1, T2, B1, B2 = 0, 1, 2, 3  # ``moesim.policies.arc``'s lists


def list_hits(ctx) -> np.ndarray:
    """Hits per layer of ARC with ``ctx.slots[layer]`` slots in each layer (a ``FastPath`` of kind ``counts``)."""
    hits = np.zeros(ctx.num_layers, np.int64)
    _run(ctx.layer_major(), ctx.seq_offsets, bool(ctx.reset_each_seq), np.asarray(ctx.slots, np.int64),
         make_lists(ctx.num_experts, 1, 4), hits)
    return hits


@njit(cache=True, _nrt=False)  # without reference counting: its atomic increments cost more than an access
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
                    t1 = list_size(lists, 0, T1)
                    if found == B1:
                        p = min(p + max(np.true_divide(list_size(lists, 0, B2), list_size(lists, 0, B1)), 1.0), c)
                        list_remove(lists, 0, e)
                    elif found == B2:
                        p = max(p - max(np.true_divide(list_size(lists, 0, B1), list_size(lists, 0, B2)), 1.0), 0.0)
                        list_remove(lists, 0, e)
                    if t1 + list_size(lists, 0, T2) >= c:
                        _make_room(lists, c, p, t1, found)
                    list_push_head(lists, 0, T1 if found < 0 else T2, e)
        hits[layer] = count


@njit(cache=True, inline="always")
def _make_room(lists, c, p, t1, found):
    """A full cache loses a resident. On a miss in no list, case IV first: B1's oldest ghost goes when T1 and B1
    hold c (or T1's LRU end, with no ghost, when T1 alone does), else B2's once the four lists hold 2c; then
    REPLACE: T1's LRU end to B1 when |T1| > p (or |T1| = p after a hit in B2), else T2's to B2."""
    if found < 0:
        if t1 + list_size(lists, 0, B1) >= c:
            if t1 >= c:
                list_remove(lists, 0, list_tail(lists, 0, T1))
                return
            list_remove(lists, 0, list_tail(lists, 0, B1))
        elif t1 + list_size(lists, 0, T2) + list_size(lists, 0, B1) + list_size(lists, 0, B2) >= 2 * c:
            list_remove(lists, 0, list_tail(lists, 0, B2))
    if t1 > 0 and (t1 > p or (t1 == p and found == B2)) or list_size(lists, 0, T2) == 0:
        source, ghost = T1, B1
    else:
        source, ghost = T2, B2
    victim = list_tail(lists, 0, source)
    list_remove(lists, 0, victim)
    list_push_head(lists, 0, ghost, victim)
