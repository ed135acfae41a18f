"""lru: evict the least recently used expert.

Recency is a linked list per partition, most recent at the head; a hit moves the object to the
head, the victim is the object nearest the tail that is not in the current request set. Under
``step`` semantics a step's hits are served first, in rank order, then its misses, so the last
miss is the most recent. A prefetched or preloaded expert enters at the head like a load: it was
fetched for an access about to come (prefetch rule).

LRU is a stack algorithm under sequential semantics (``STACK``); with a cache per layer there its
hits come from recency ranks in vector registers (``moesim.policies.lru_ranks``), at one capacity
(``FAST_PATHS``) or all of them.
"""

from typing import NamedTuple

from numba import njit

from moesim.policies.base import (RECENCY, TAIL, FastPath, Lists, Stack, hooks, list_first_unmarked, list_push_head,
                                  list_remove, list_to_head, lists_clear, make_lists)
from moesim.policies.lru_ranks import rank_counts

NAME = "lru"
RESIZABLE = True  # its victim ignores the object placed and its state the capacity (serve's dynamic KV)
FAST_PATHS = (FastPath("counts", rank_counts),)
STACK = Stack(RECENCY, ("sequential",), histogram=rank_counts)


class State(NamedTuple):
    order: Lists  # one list per partition, the most recent at the head (FIFO and LIFO: in load order)


def make_state(ctx) -> State:
    return State(make_lists(ctx.num_objects, ctx.num_parts, 1))


@njit(cache=True)
def reset(st):
    lists_clear(st.order)


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    list_to_head(st.order, part, 0, obj)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return slot_of[list_first_unmarked(st.order, part, 0, TAIL, mark, stamp)]


@njit(cache=True)
def on_evict(st, part, slot, obj, t):
    list_remove(st.order, part, obj)


@njit(cache=True)
def on_insert(st, part, slot, obj, t):
    list_push_head(st.order, part, 0, obj)


HOOKS = hooks(reset=reset, on_hit=on_hit, choose_victim=choose_victim, on_evict=on_evict, on_insert=on_insert)
