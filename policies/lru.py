"""lru: evict the least recently used expert.

Recency is a linked list per partition, most recent at the head; a hit moves the object to the
head, the victim is the object nearest the tail that is not in the current request set.
"""

from numba import njit

from moesim.policies.base import (TAIL, list_first_unmarked, list_push_head, list_remove, lists_clear,
                                  make_lists, no_miss, no_step)
from moesim.sim.engine import hooks

NAME = "lru"


def make_state(ctx):
    return (make_lists(ctx.num_objects, ctx.num_parts, 1),)


@njit(cache=True)
def reset(st):
    lists_clear(st[0])


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    list_remove(st[0], part, obj)
    list_push_head(st[0], part, 0, obj)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return slot_of[list_first_unmarked(st[0], part, 0, TAIL, mark, stamp)]


@njit(cache=True)
def on_evict(st, part, slot, obj, t):
    list_remove(st[0], part, obj)


@njit(cache=True)
def on_insert(st, part, slot, obj, t):
    list_push_head(st[0], part, 0, obj)


HOOKS = hooks(reset=reset, on_step=no_step, on_hit=on_hit, on_miss=no_miss,
              choose_victim=choose_victim, on_evict=on_evict, on_insert=on_insert)
