"""lfu: evict the resident expert with the fewest accesses since it was loaded (in-cache counts).

A loaded expert starts at count 1 and each hit adds one; the count is forgotten on eviction, as in
libCacheSim's LFU. Ties go to the least recently used of the tied experts (then the lowest slot).
A prefetched or preloaded expert starts at count 0, since loading it was no access (prefetch rule):
its first use brings it to 1, as for an expert loaded on demand. For counts that survive eviction
("perfect LFU") use ``gamma`` with γ = 1.

Counts never fall below the starting value, so while some resident has count 0 or 1 the victim is
the oldest of those: residents of count 0 and of count 1 sit on two lists in the order they got
that count, and the victim is found at a tail; only when every resident outside the request set has
been hit twice does the victim take a scan of the slots. The helpers below are LeCaR's LFU expert too.

Per layer under sequential semantics (``moesim.sim.lanes``) a slot's key packs (count, last access,
slot) into one integer (``moesim.policies.keyed_slots``), so the victim, fewest accesses then least
recent, is the smallest key.
"""

from typing import NamedTuple

import numpy as np
from numba import njit, uint64

from moesim.policies.base import (TAIL, FastPath, Lists, PolicySpec, hooks, list_first_unmarked, list_of,
                                  list_push_head, list_remove, lists_clear, make_lists, min_key_slot)
from moesim.policies.keyed_slots import Keyed, keyed_place, keyed_reset, make_keyed

ONES, ZEROS = 0, 1


class State(NamedTuple):
    """LFU's state (LeCaR's LFU expert too)."""

    count: np.ndarray  # float64 [objects]: accesses since it was loaded
    seen: np.ndarray   # float64 [objects]: its last access
    low: Lists         # per partition the residents of count 1 (ONES) and 0 (ZEROS), in the order they got it
    fill: np.ndarray   # int64 [1]: 1 if the next insert is a prefetch fill (``lfu_fill_next``)


def make_lfu(ctx) -> State:
    return State(np.zeros(ctx.num_objects), np.zeros(ctx.num_objects), make_lists(ctx.num_objects, ctx.num_parts, 2),
                 np.zeros(1, np.int64))


@njit(cache=True, inline="always")
def lfu_clear(lfu):
    lists_clear(lfu.low)


@njit(cache=True, inline="always")
def lfu_fill_next(lfu, fill):
    """The next insert is a prefetch fill (count 0) or a demand load (count 1)."""
    lfu.fill[0] = fill


@njit(cache=True, inline="always")
def lfu_hit(lfu, part, obj, now):
    count, seen, lists = lfu.count, lfu.seen, lfu.low
    if count[obj] <= 1.0:
        list_remove(lists, part, obj)
        if count[obj] == 0.0:
            list_push_head(lists, part, ONES, obj)
    count[obj] += 1.0
    seen[obj] = now


@njit(cache=True, inline="always")
def lfu_insert(lfu, part, obj, now):
    fill = lfu.fill[0] == 1
    lfu.count[obj] = 0.0 if fill else 1.0
    lfu.seen[obj] = now
    list_push_head(lfu.low, part, ZEROS if fill else ONES, obj)


@njit(cache=True, inline="always")
def lfu_evict(lfu, part, obj):
    if list_of(lfu.low, obj) >= 0:
        list_remove(lfu.low, part, obj)


@njit(cache=True, inline="always")
def lfu_victim(lfu, part, lo, hi, obj_of, slot_of, mark, stamp):
    for li in (ZEROS, ONES):
        oldest = list_first_unmarked(lfu.low, part, li, TAIL, mark, stamp)
        if oldest >= 0:
            return slot_of[oldest]
    return min_key_slot(lfu.count, lfu.seen, lo, hi, obj_of, mark, stamp)


def make_state(ctx) -> State:
    return make_lfu(ctx)


@njit(cache=True)
def reset(st):
    lfu_clear(st)


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    lfu_hit(st, part, obj, t)


@njit(cache=True)
def on_miss(st, part, obj, t):
    lfu_fill_next(st, 0)
    return True


@njit(cache=True)
def on_prefetch(st, part, obj, t):
    lfu_fill_next(st, 1)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return lfu_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp)


@njit(cache=True)
def on_evict(st, part, slot, obj, t):
    lfu_evict(st, part, obj)


@njit(cache=True)
def on_insert(st, part, slot, obj, t):
    lfu_insert(st, part, obj, t)


def make_lanes(ctx, lanes: int) -> Keyed | None:
    """The keyed slots, with the clock's bits as the constant (``extra``): a key is (count, clock, slot)."""
    clock = ctx.experts.size.bit_length()
    return make_keyed(ctx, lanes, (ctx.experts.shape[0] * ctx.top_k) << clock, clock)


@njit(cache=True)
def lane_access(st, lane, cap, e, pos, end):
    slot, hit = keyed_place(st, lane, cap, e)
    shift, key = st.extra + st.bits, st.key
    at = (uint64(lane), uint64(slot))  # unsigned indices (``moesim.policies.base``)
    count = ((key[at] >> shift) + 1) * hit + 1 - hit  # a load starts at 1
    key[at] = (count << shift) | (pos << st.bits) | slot
    return hit


SPEC = PolicySpec("lfu", make_state,
                  hooks(reset=reset, on_hit=on_hit, on_miss=on_miss, on_prefetch=on_prefetch,
                        choose_victim=choose_victim, on_evict=on_evict, on_insert=on_insert), resizable=True,
                  fast_paths=(FastPath("lanes", make_lanes, {"lane_reset": keyed_reset, "lane_access": lane_access},
                                       fullest=0.75),))
