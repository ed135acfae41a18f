"""lfu: evict the resident expert with the fewest hits since it was loaded (in-cache counts).

A loaded expert starts at count 1 and each hit adds one; the count is forgotten on eviction, as in
libCacheSim's LFU. Ties go to the least recently used of the tied experts (then the lowest slot).
For counts that survive eviction ("perfect LFU") use ``gamma`` with γ = 1.
"""

import numpy as np
from numba import njit

from moesim.policies.base import min_key_slot, no_access, no_miss, no_step
from moesim.sim.engine import compile_engine

NAME = "lfu"


def make_state(ctx):
    return (np.zeros(ctx.num_objects, np.float64), np.zeros(ctx.num_objects, np.float64))


@njit(cache=True)
def reset(st):
    st[0][:] = 0.0


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    st[0][obj] += 1.0
    st[1][obj] = t


@njit(cache=True)
def on_insert(st, part, slot, obj, t):
    st[0][obj] = 1.0
    st[1][obj] = t


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return min_key_slot(st[0], st[1], lo, hi, obj_of, mark, stamp)


simulate = compile_engine(__name__, reset=reset, on_step=no_step, on_hit=on_hit, on_miss=no_miss,
                          choose_victim=choose_victim, on_evict=no_access, on_insert=on_insert)
