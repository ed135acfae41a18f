"""LeCaR per layer under sequential semantics, one layer at a time, with each resident's slot keyed for both
experts' victims (``moesim.policies.keyed_slots``): a hit writes two keys, and only an eviction looks for a
victim, one vectorised minimum over the layer's slots, where the lanes (``moesim.policies.lecar_across``) pass
over every slot at every access. The rules are ``moesim.policies.lecar``'s without a prefetch (a hit-rate run has
none): the same clock, weights, penalty table and draws (layer l draws from the seed's stream l, restarted at
every reset).

A slot's LRU key is (last access, slot), its LFU key (accesses since loaded, last access, slot), so LRU's victim
is the smallest LRU key and LFU's (fewest accesses, then least recent) the smallest LFU key; clocks are
distinct, so keys never tie. The histories are ``moesim.policies.base``'s lists; an expert's entry in ``slot_of``
(its slot) says which of them holds it too, so one load tells a hit, a history's id and neither apart (4-7% faster
at 32 and 40 slots than asking the lists). The weights' update (``reweigh``) is here, and the engine's hooks take it
from here.
"""

import numpy as np
from numba import njit, uint64

from moesim.policies.base import (GOLDEN, list_push_head, list_remove, list_size, list_tail, lists_clear,
                                  make_lists, rng_at, rng_starts)
from moesim.policies.keyed_slots import LAST, lowest, slot_bits

H_LRU, H_LFU = 1, 2  # the histories' lists, in ``moesim.policies.lecar``'s hooks too (0 is its residents')


@njit(cache=True, inline="always")
def reweigh(w_lru, penalties, age, found):
    """w_LRU after a miss on an id evicted ``age`` accesses ago into ``found``'s history: that expert's weight times
    the penalty factor of that age (``penalties``, a partition's row of ``penalty_tables``), then normalised."""
    penalty = penalties[min(age, penalties.shape[0] - 1)]
    if found == H_LRU:
        lru, lfu = w_lru * penalty, 1.0 - w_lru
    else:
        lru, lfu = w_lru, (1.0 - w_lru) * penalty
    return np.true_divide(lru, lru + lfu)


def keyed_hits(ctx, penalties: np.ndarray) -> np.ndarray | None:
    """Hits per layer of LeCaR with ``ctx.slots[layer]`` slots in each layer and ``penalties`` (``lecar``'s
    ``penalty_tables`` of these slots); None where the keys would not fit 62 bits."""
    width, bits = slot_bits(ctx.slots)
    bits = key_bits(ctx.num_rows * ctx.top_k, bits)
    if bits is None:
        return None
    n_layers, num_experts = ctx.num_layers, ctx.num_experts
    hits = np.zeros(n_layers, np.int64)
    _run(ctx.layer_major(), ctx.seq_offsets, bool(ctx.reset_each_seq),
         np.asarray(ctx.slots, np.int64), penalties, rng_starts(int(ctx.params["seed"]), n_layers), *bits,
         np.empty((3, width), np.int64), np.empty((2, num_experts), np.int64), make_lists(num_experts, 1, 3), hits)
    return hits


def key_bits(accesses: int, low: int) -> tuple | None:
    """(the slot's bits, the count's shift) of a key packing (count, clock, slot) for a layer of ``accesses``
    accesses, the slot in the ``low`` bits; None where two clocks and the slot need more than 62 bits."""
    clock_bits = (accesses + 1).bit_length()
    if 2 * clock_bits + low > 62:
        return None
    return np.int64(low), np.int64(clock_bits + low)


@njit(cache=True, _nrt=False, nogil=True)  # no reference counting: its atomic increments cost more than an access
def _run(experts, seq_offsets, reset, slots, penalties, starts, slot_bits, count_shift, per_slot, per_expert,
         lists, hits):
    """Each layer in turn (``experts`` [layer, row, k]), from empty, reset at each sequence when ``reset``.
    ``per_slot``: each slot's LRU key, LFU key and expert; ``per_expert``: its slot (-1: in no slot and no history;
    -1 - h: in history h, so one load tells a hit, a history's id and neither apart) and the clock when it was
    evicted."""
    n_layers, k = experts.shape[0], experts.shape[2]
    lru_key, lfu_key, expert_in = per_slot[0], per_slot[1], per_slot[2]
    slot_of, evicted_at = per_expert[0], per_expert[1]
    slot_mask = (np.int64(1) << slot_bits) - 1
    for layer in range(n_layers):
        c = slots[layer]
        table = penalties[layer]
        hit_count = 0
        for s in range(seq_offsets.shape[0] - 1):
            if s == 0 or reset:
                lists_clear(lists)
                lru_key[:] = LAST
                lfu_key[:] = LAST
                slot_of[:] = -1
                used = 0
                w_lru, clock, position = 0.5, 0, starts[layer]
            for row in range(seq_offsets[s], seq_offsets[s + 1]):
                for j in range(k):
                    e = uint64(experts[layer, row, j])
                    clock += 1
                    recent = clock << slot_bits
                    slot = slot_of[e]
                    if slot >= 0:
                        hit_count += 1
                        at = uint64(slot)
                        lfu_key[at] = (((lfu_key[at] >> count_shift) + 1) << count_shift) | recent | slot
                        lru_key[at] = recent | slot
                        continue
                    if slot < -1:  # in a history: that expert's choice was wrong
                        w_lru = reweigh(w_lru, table, clock - evicted_at[e], -slot - 1)
                        list_remove(lists, 0, e)
                    if used < c:
                        slot = used
                        used += 1
                    else:
                        position += GOLDEN
                        if rng_at(position) < w_lru:
                            slot, history = lowest(lru_key) & slot_mask, H_LRU
                        else:
                            slot, history = lowest(lfu_key) & slot_mask, H_LFU
                        gone = uint64(expert_in[uint64(slot)])
                        slot_of[gone] = -history - 1
                        if list_size(lists, 0, history) >= c:
                            oldest = list_tail(lists, 0, history)
                            list_remove(lists, 0, oldest)
                            slot_of[uint64(oldest)] = -1
                        list_push_head(lists, 0, history, gone)
                        evicted_at[gone] = clock
                    at = uint64(slot)
                    expert_in[at] = e
                    slot_of[e] = slot
                    lfu_key[at] = (np.int64(1) << count_shift) | recent | slot
                    lru_key[at] = recent | slot
        hits[layer] = hit_count
