"""lfu: evict the resident expert with the fewest hits since it was loaded (in-cache counts).

A loaded expert starts at count 1 and each hit adds one; the count is forgotten on eviction, as in
libCacheSim's LFU. Ties go to the least recently used of the tied experts (then the lowest slot).
For counts that survive eviction ("perfect LFU") use ``gamma`` with γ = 1.

Counts never fall below 1, so while some resident has count 1 the victim is the oldest of those:
they sit on one list in load order and the victim is found at its tail; only when every resident
outside the request set has been hit does the victim take a scan of the slots. The helpers below are
LeCaR's LFU expert too.
"""

import numpy as np
from numba import njit

from moesim.policies.base import (TAIL, list_first_unmarked, list_of, list_push_head, list_remove, lists_clear,
                                  make_lists, min_key_slot, no_miss, no_step)
from moesim.sim.engine import hooks

NAME = "lfu"
ONES = 0


def make_lfu(ctx) -> tuple:
    """LFU state: count and last access per object, and the list of residents with count 1."""
    return np.zeros(ctx.num_objects), np.zeros(ctx.num_objects), make_lists(ctx.num_objects, ctx.num_parts, 1)


@njit(cache=True, inline="always")
def lfu_clear(lfu):
    lists_clear(lfu[2])


@njit(cache=True, inline="always")
def lfu_hit(lfu, part, obj, now):
    count, seen, ones = lfu
    if count[obj] == 1.0:
        list_remove(ones, part, obj)
    count[obj] += 1.0
    seen[obj] = now


@njit(cache=True, inline="always")
def lfu_insert(lfu, part, obj, now):
    lfu[0][obj] = 1.0
    lfu[1][obj] = now
    list_push_head(lfu[2], part, ONES, obj)


@njit(cache=True, inline="always")
def lfu_evict(lfu, part, obj):
    if list_of(lfu[2], obj) == ONES:
        list_remove(lfu[2], part, obj)


@njit(cache=True, inline="always")
def lfu_victim(lfu, part, lo, hi, obj_of, slot_of, mark, stamp):
    oldest_one = list_first_unmarked(lfu[2], part, ONES, TAIL, mark, stamp)
    if oldest_one >= 0:
        return slot_of[oldest_one]
    return min_key_slot(lfu[0], lfu[1], lo, hi, obj_of, mark, stamp)


def make_state(ctx):
    return make_lfu(ctx)


@njit(cache=True)
def reset(st):
    lfu_clear(st)


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    lfu_hit(st, part, obj, t)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return lfu_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp)


@njit(cache=True)
def on_evict(st, part, slot, obj, t):
    lfu_evict(st, part, obj)


@njit(cache=True)
def on_insert(st, part, slot, obj, t):
    lfu_insert(st, part, obj, t)


HOOKS = hooks(reset=reset, on_step=no_step, on_hit=on_hit, on_miss=no_miss,
              choose_victim=choose_victim, on_evict=on_evict, on_insert=on_insert)
