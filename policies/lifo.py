"""lifo: evict the expert loaded most recently (FIFO's insertion list, taken from the other end).

FlashMoE lists it among the heuristic baselines; it keeps the first experts a sequence touches.
A prefetched or preloaded expert is a load like any other (prefetch rule).
"""

from numba import njit

from moesim.policies.base import HEAD, PolicySpec, hooks, list_first_unmarked
from moesim.policies.lru import make_state, on_evict, on_insert, on_move, reset


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return list_first_unmarked(st.order, part, 0, HEAD, mark, stamp, obj_of)


SPEC = PolicySpec("lifo", make_state,
                  hooks(reset=reset, choose_victim=choose_victim, on_evict=on_evict, on_insert=on_insert,
                        on_move=on_move), resizable=True)
