"""random: evict a uniformly chosen resident expert that is not in the request set.

Seeded (``seed`` parameter, default 0): the policy's own generator restarts from the seed at every
reset, so the same trace, capacity and seed give the same misses. A prefetch draws its victim the
same way (prefetch rule).
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from moesim.policies.base import SEED, PolicySpec, hooks, make_rng, rng_reset, rng_uniform


class State(NamedTuple):
    rng: np.ndarray  # one generator for every partition (``moesim.policies.base.make_rng``)


def make_state(ctx) -> State:
    return State(make_rng(int(ctx.params["seed"])))


@njit(cache=True)
def reset(st):
    rng_reset(st.rng)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    while True:
        slot = lo + int(rng_uniform(st.rng, 0) * (hi - lo))
        if mark[obj_of[slot]] != stamp:
            return slot


SPEC = PolicySpec("random", make_state, hooks(reset=reset, choose_victim=choose_victim), params={"seed": SEED},
                  resizable=True)
