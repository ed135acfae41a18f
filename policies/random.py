"""random: evict a uniformly chosen resident expert that is not in the request set.

Seeded (``seed`` parameter, default 0): the policy's own generator restarts from the seed at every
reset, so the same trace, capacity and seed give the same misses.
"""

from numba import njit

from moesim.policies.base import make_rng, no_access, no_miss, no_step, rng_reset, rng_uniform
from moesim.sim.engine import hooks

NAME = "random"


def make_state(ctx):
    return (make_rng(int(ctx.params.get("seed", 0))),)


@njit(cache=True)
def reset(st):
    rng_reset(st[0])


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    while True:
        slot = lo + int(rng_uniform(st[0]) * (hi - lo))
        if mark[obj_of[slot]] != stamp:
            return slot


HOOKS = hooks(reset=reset, on_step=no_step, on_hit=no_access, on_miss=no_miss,
              choose_victim=choose_victim, on_evict=no_access, on_insert=no_access)
