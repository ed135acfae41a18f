"""lru: evict the least recently used expert.

Recency is a linked list per partition of the slots that hold its residents, most recent at the head; a hit
moves the slot to the head, the victim is the slot nearest the tail whose expert is not in the current
request set. Under ``step`` semantics a step's hits are served first, in rank order, then its misses, so the
last miss is the most recent. A prefetched or preloaded expert enters at the head like a load: it was fetched
for an access about to come (prefetch rule). The list holds slots rather than experts so that the tail is
the victim's slot, one read from it, where a list of experts had to look the slot up and the engine the
expert again before unlinking it (the discrete-event loop ran 10-20% faster); a resident moved to another
slot (``on_move``) takes its place on the list.

LRU is a stack algorithm under sequential semantics (``stack``); with a cache per layer there its
hits come from recency ranks in vector registers (``moesim.policies.lru_ranks``), at one capacity
(``fast_paths``) or all of them.
"""

from typing import NamedTuple

from numba import njit

from moesim.policies.base import (RECENCY, TAIL, FastPath, Lists, PolicySpec, Stack, hooks, list_first_unmarked,
                                  list_push_head, list_remove, list_rename, list_to_head, lists_clear, make_lists)
from moesim.policies.lru_ranks import rank_counts, rank_hits


class State(NamedTuple):
    order: Lists  # one list of slots per partition, the most recent at the head (FIFO and LIFO: in load order)


def make_state(ctx) -> State:
    return State(make_lists(int(ctx.slots.sum()), ctx.num_parts, 1))


@njit(cache=True)
def reset(st):
    lists_clear(st.order)


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    list_to_head(st.order, part, 0, slot)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return list_first_unmarked(st.order, part, 0, TAIL, mark, stamp, obj_of)


@njit(cache=True)
def on_evict(st, part, slot, obj, t):
    list_remove(st.order, part, slot)


@njit(cache=True)
def on_insert(st, part, slot, obj, t):
    list_push_head(st.order, part, 0, slot)


@njit(cache=True)
def on_move(st, part, src, dst, obj):
    list_rename(st.order, part, src, dst)


SPEC = PolicySpec("lru", make_state,
                  hooks(reset=reset, on_hit=on_hit, choose_victim=choose_victim, on_evict=on_evict, on_insert=on_insert,
                        on_move=on_move), resizable=True, fast_paths=(FastPath("counts", rank_hits),),
                  stack=Stack(RECENCY, ("sequential",), histogram=rank_counts))
