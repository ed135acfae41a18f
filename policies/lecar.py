"""lecar: Learning Cache Replacement (Vietri et al., HotStorage 2018).

Two experts, LRU and LFU (in-cache counts, ties to the least recently used), with weights
w = (w_LRU, w_LFU) starting at (0.5, 0.5). On eviction one expert's victim is taken with probability
equal to its weight and its id goes to that expert's history (FIFO, C ids each, as in the paper).
A miss on an id in H_LRU means LRU was wrong: w_LRU ← w_LRU · e^(−λ·d^t), then w is normalised
(the same update as the paper's w_LFU ← w_LFU · e^(λ·d^t)); likewise for H_LFU. t is the number of
accesses since that eviction, λ = 0.45 (learning rate) and d = 0.005^(1/C) (discount), the paper's
values. Draws come from a generator seeded with ``seed`` (default 0) at every reset.

libCacheSim differs in three ways, which is why tests compare hit rates with a tolerance: each
history holds C/2 ids, an eviction on which both experts agree goes to no history, and its random
draws come from its own generator.
"""

import math

import numpy as np
from numba import njit

from moesim.policies.base import (TAIL, list_of, list_first_unmarked, list_size, list_tail,
                                  list_push_head, list_remove, lists_clear, make_lists,
                                  min_key_slot, no_access, no_step)
from moesim.sim.engine import compile_engine

NAME = "lecar"
RECENCY, H_LRU, H_LFU = 0, 1, 2
LEARNING_RATE = 0.45


def make_state(ctx):
    n = ctx.num_objects
    # lists: recency order of residents and the two histories; count, last access, eviction time
    # per id; weights per partition; [seed, capacity, clock]; [discount]
    return (make_lists(n, ctx.num_parts, 3), np.zeros(n), np.zeros(n), np.zeros(n, np.int64),
            np.full(ctx.num_parts, 0.5), np.array([int(ctx.params.get("seed", 0)), ctx.capacity, 0], np.int64),
            np.array([0.005 ** (1.0 / ctx.capacity)]))


@njit(cache=True)
def reset(st):
    lists_clear(st[0])
    st[4][:] = 0.5
    st[5][2] = 0
    np.random.seed(st[5][0])


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    st[5][2] += 1
    list_remove(st[0], part, obj)
    list_push_head(st[0], part, RECENCY, obj)
    st[1][obj] += 1.0
    st[2][obj] = st[5][2]


@njit(cache=True)
def on_miss(st, part, obj, t):
    st[5][2] += 1
    lists, w_lru = st[0], st[4]
    found = list_of(lists, obj)
    if found == H_LRU or found == H_LFU:
        reward = st[6][0] ** (st[5][2] - st[3][obj])
        if found == H_LRU:
            lru = w_lru[part] * math.exp(-LEARNING_RATE * reward)
            lfu = 1.0 - w_lru[part]
        else:
            lru = w_lru[part]
            lfu = (1.0 - w_lru[part]) * math.exp(-LEARNING_RATE * reward)
        w_lru[part] = lru / (lru + lfu)
        list_remove(lists, part, obj)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    lists = st[0]
    if np.random.random() < st[4][part]:
        victim, history = slot_of[list_first_unmarked(lists, part, RECENCY, TAIL, mark, stamp)], H_LRU
    else:
        victim, history = min_key_slot(st[1], st[2], lo, hi, obj_of, mark, stamp), H_LFU
    gone = obj_of[victim]
    list_remove(lists, part, gone)
    if list_size(lists, part, history) >= st[5][1]:
        list_remove(lists, part, list_tail(lists, part, history))
    list_push_head(lists, part, history, gone)
    st[3][gone] = st[5][2]
    return victim


@njit(cache=True)
def on_insert(st, part, slot, obj, t):
    list_push_head(st[0], part, RECENCY, obj)
    st[1][obj] = 1.0
    st[2][obj] = st[5][2]


simulate = compile_engine(__name__, reset=reset, on_step=no_step, on_hit=on_hit, on_miss=on_miss,
                          choose_victim=choose_victim, on_evict=no_access, on_insert=on_insert)
