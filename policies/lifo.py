"""lifo: evict the expert loaded most recently (FIFO's insertion list, taken from the other end).

FlashMoE lists it among the heuristic baselines; it keeps the first experts a sequence touches.
A prefetched or preloaded expert is a load like any other (prefetch rule).
"""

from numba import njit

from moesim.policies.base import HEAD, hooks, list_first_unmarked
from moesim.policies.lru import State, make_state, on_evict, on_insert, on_move, reset

NAME = "lifo"
RESIZABLE = True  # its victim ignores the object placed and its state the capacity (serve's dynamic KV)
__all__ = ["NAME", "RESIZABLE", "State", "make_state", "HOOKS"]


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return list_first_unmarked(st.order, part, 0, HEAD, mark, stamp, obj_of)


HOOKS = hooks(reset=reset, choose_victim=choose_victim, on_evict=on_evict, on_insert=on_insert, on_move=on_move)
