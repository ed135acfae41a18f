"""lecar: Learning Cache Replacement (Vietri et al., HotStorage 2018).

Two experts, LRU and LFU (the ``lfu`` policy: in-cache counts, ties to the least recently used),
with weights w = (w_LRU, w_LFU) starting at (0.5, 0.5). On eviction one expert's victim is taken
with probability equal to its weight and its id goes to that expert's history (FIFO, C ids each,
as in the paper).
A miss on an id in H_LRU means LRU was wrong: w_LRU ← w_LRU · e^(−λ·d^t), then w is normalised
(the same update as the paper's w_LFU ← w_LFU · e^(λ·d^t)); likewise for H_LFU. t is the number
of accesses to that cache (the layer's, under per-layer scope) since that eviction, λ = 0.45
(learning rate) and d = 0.005^(1/C) (discount), the paper's values. The penalty factor e^(−λ·d^t)
is tabulated once per run for every t below the age at which it rounds to exactly 1.0, so a history
hit costs a lookup. Each partition (each layer's cache, under per-layer scope) draws from a generator
of its own (``moesim.policies.base.make_rng``: the seed's stream, started a fixed distance in per
partition), restarted at every reset, so a layer's draws do not depend on the other layers and the
layers can be run apart; ``seed`` defaults to 0.

Prefetch rule (the paper has no prefetch; a fill is no request): the clock does not advance, the
weights do not move, a history entry of the expert is dropped (it is resident again), and the
experts take it in as a load: LRU at its MRU end, LFU at count 0 (see ``lfu``).

Per layer under sequential semantics the same rules run, up to 24 slots, with a layer in each SIMD lane
(``moesim.policies.lecar_across``; ``moesim.sim.across``), and past the lanes a layer at a time with keyed slots
(``moesim.policies.lecar_keyed``): both are ``fast_paths``.

libCacheSim differs in three ways, which is why tests compare hit rates with a tolerance: each
history holds C/2 ids, an eviction on which both experts agree goes to no history, and its random
draws come from its own generator.
"""

import functools
import math
from typing import NamedTuple

import numpy as np
from numba import njit

from moesim.policies import lecar_across, lecar_keyed
from moesim.policies.lecar_keyed import H_LFU, H_LRU, reweigh
from moesim.policies.base import (NARROW_LANES, SEED, TAIL, FastPath, Lists, PolicySpec, hooks, list_first_unmarked,
                                  list_of, list_push_head, list_remove, list_size, list_tail, list_to_head,
                                  lists_clear, make_lists, make_rng, rng_reset, rng_uniform)
from moesim.policies.lfu import State as LfuState
from moesim.policies.lfu import lfu_clear, lfu_evict, lfu_fill_next, lfu_hit, lfu_insert, lfu_victim, make_lfu

RECENCY = 0  # the residents' list; the histories' are H_LRU and H_LFU
LEARNING_RATE = 0.45


class State(NamedTuple):
    lists: Lists             # per partition the residents' recency order (RECENCY) and the histories H_LRU, H_LFU
    lfu: LfuState            # the LFU expert
    evicted_at: np.ndarray   # int64 [objects]: the partition's access clock when the id was evicted
    w_lru: np.ndarray        # float64 [partitions]: LRU's weight
    clock: np.ndarray        # int64 [partitions]: accesses so far
    slots: np.ndarray        # int64 [partitions]
    penalties: np.ndarray    # float64 [partitions, ages]: the penalty factor by age (``penalty_tables``)
    rng: np.ndarray          # the generator, a stream per partition (``moesim.policies.base.make_rng``)


def make_state(ctx) -> State:
    return State(make_lists(ctx.num_objects, ctx.num_parts, 3), make_lfu(ctx), np.zeros(ctx.num_objects, np.int64),
                 np.full(ctx.num_parts, 0.5), np.zeros(ctx.num_parts, np.int64), ctx.slots, penalty_tables(ctx.slots),
                 make_rng(int(ctx.params["seed"]), ctx.num_parts))


def penalty_tables(slots: np.ndarray) -> np.ndarray:
    """Per partition of C slots, e^(−λ·d^t) for t = 0, 1, ... up to the first t where it is exactly
    1.0 (d = 0.005^(1/C)), the shorter rows padded with 1.0."""
    rows = [_penalties(int(capacity)) for capacity in slots]
    table = np.ones((len(rows), max(map(len, rows))))
    for part, factors in enumerate(rows):
        table[part, :len(factors)] = factors
    return table


@functools.cache
def _penalties(capacity: int) -> tuple:
    """One capacity's row of ``penalty_tables`` (hundreds of factors, each a ``math.exp``: kept, as a run at the
    same capacity asks again)."""
    discount = 0.005 ** (1.0 / capacity)
    factors = [math.exp(-LEARNING_RATE * discount ** 0)]
    while factors[-1] < 1.0:
        factors.append(math.exp(-LEARNING_RATE * discount ** len(factors)))
    return tuple(factors)


@njit(cache=True)
def reset(st):
    lists_clear(st.lists)
    lfu_clear(st.lfu)
    st.w_lru[:] = 0.5
    st.clock[:] = 0
    rng_reset(st.rng)


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    lists, clock = st.lists, st.clock
    clock[part] += 1
    list_to_head(lists, part, RECENCY, obj)  # a resident is on RECENCY
    lfu_hit(st.lfu, part, obj, clock[part])


@njit(cache=True)
def on_miss(st, part, obj, t):
    lists, w_lru, clock, penalties = st.lists, st.w_lru, st.clock, st.penalties
    clock[part] += 1
    found = list_of(lists, obj)
    if found == H_LRU or found == H_LFU:
        w_lru[part] = reweigh(w_lru[part], penalties[part], clock[part] - st.evicted_at[obj], found)
        list_remove(lists, part, obj)
    lfu_fill_next(st.lfu, 0)
    return True


@njit(cache=True)
def on_prefetch(st, part, obj, t):
    found = list_of(st.lists, obj)
    if found == H_LRU or found == H_LFU:
        list_remove(st.lists, part, obj)
    lfu_fill_next(st.lfu, 1)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    lists, capacity = st.lists, st.slots[part]
    if rng_uniform(st.rng, part) < st.w_lru[part]:
        victim, history = slot_of[list_first_unmarked(lists, part, RECENCY, TAIL, mark, stamp)], H_LRU
    else:
        victim, history = lfu_victim(st.lfu, part, lo, hi, obj_of, slot_of, mark, stamp), H_LFU
    gone = obj_of[victim]
    list_remove(lists, part, gone)
    lfu_evict(st.lfu, part, gone)
    if list_size(lists, part, history) >= capacity:
        list_remove(lists, part, list_tail(lists, part, history))
    list_push_head(lists, part, history, gone)
    st.evicted_at[gone] = st.clock[part]
    return victim


@njit(cache=True)
def on_insert(st, part, slot, obj, t):
    list_push_head(st.lists, part, RECENCY, obj)
    lfu_insert(st.lfu, part, obj, st.clock[part])


def make_across(ctx, layers: np.ndarray, width: int) -> tuple | None:
    """The lanes' state (``moesim.policies.lecar_across``), with this run's penalty tables."""
    return lecar_across.make_across(ctx, layers, width, penalty_tables(ctx.slots))


def keyed_hits(ctx) -> np.ndarray | None:
    """Hits per layer a layer at a time with keyed slots (``moesim.policies.lecar_keyed``), with this run's penalty
    tables."""
    return lecar_keyed.keyed_hits(ctx, penalty_tables(ctx.slots))


# up to WIDEST slots per layer with a layer in each SIMD lane (NARROW_LANES without 512-bit vectors); wider than eight
# slots, up to half a layer's experts; past them, keyed slots a layer at a time (the crossovers: docs/benchmarks.md)


SPEC = PolicySpec("lecar", make_state,
                  hooks(reset=reset, on_hit=on_hit, on_miss=on_miss, on_prefetch=on_prefetch,
                        choose_victim=choose_victim, on_insert=on_insert), params={"seed": SEED},
                  fast_paths=(FastPath("across", make_across, {"across_reset": lecar_across.across_reset,
                                                                 "across_step": lecar_across.across_step},
                                       fullest=0.5, crowded=8, widest=lecar_across.WIDEST,
                                       narrow=NARROW_LANES),
                              FastPath("counts", keyed_hits)))
