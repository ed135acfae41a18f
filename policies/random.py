"""random: evict a uniformly chosen resident expert that is not in the request set.

Seeded (``seed`` parameter, default 0): numba's generator is re-seeded at every reset, so the same
trace, capacity and seed give the same misses.
"""

import numpy as np
from numba import njit

from moesim.policies.base import no_access, no_miss, no_step
from moesim.sim.engine import compile_engine

NAME = "random"


def make_state(ctx):
    return (np.array([int(ctx.params.get("seed", 0))], np.int64),)


@njit(cache=True)
def reset(st):
    np.random.seed(st[0][0])


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    while True:
        slot = lo + np.random.randint(0, hi - lo)
        if mark[obj_of[slot]] != stamp:
            return slot


simulate = compile_engine(__name__, reset=reset, on_step=no_step, on_hit=no_access, on_miss=no_miss,
                          choose_victim=choose_victim, on_evict=no_access, on_insert=no_access)
