"""belady: offline optimal (Belady 1966, MIN) — evict the resident expert whose next use is furthest.

Optimal among caches that admit every miss (demand paging, Mattson et al.'s setting): a policy that may decline to
cache a miss (a bypass: ``static`` holds its Top-C and streams the rest, ``gamma`` admits by rank) can beat it, most
at small capacities (on the bundled trace at one slot a layer, sequential semantics: static 0.188 against 0.075).

One backward pass (O(accesses)) links every access to the same object's next access; a pointer per
object stands at its next access after the clock, and the next use after ``t`` is found by following
the links from there — one step per access, since the clock only grows. Asking "after t" rather
than "after this access" serves prefetches too (prefetch rule): an expert loaded early is judged by
the access it was fetched for. Under ``step`` semantics the victim is never in the current request
set. With a per-sequence reset, a use in a later sequence does not count (the cache will have been
emptied by then). Experts never used again tie at +infinity and the lowest slot goes
first; which one goes does not change the miss count.

Per layer under sequential semantics (``moesim.sim.lanes``) a slot's key is (T + 1 - its expert's next
use, slot), T the trace's positions, "never" counted at T and a use past the cache's life (the next
sequence's, with a reset) at that sequence's start, so the victim is the smallest key
(``moesim.policies.keyed_slots``).
"""

from typing import NamedTuple

import numpy as np
from numba import njit, uint64

from moesim.policies.base import NEXT_USE, FastPath, PolicySpec, Stack, hooks, min_key_slot
from moesim.policies.keyed_slots import keyed_place, keyed_reset, make_keyed

NEVER = np.iinfo(np.int64).max


@njit(cache=True)
def next_uses(experts, num_experts):
    """For every position ``(row * L + layer) * W + j``, the position of the same object's next access
    (``NEVER`` if none, and at -1 entries); and each object's first access."""
    out = np.empty(experts.size, np.int64)
    first = np.full(experts.shape[1] * num_experts, NEVER, np.int64)
    link_next(experts, num_experts, out, first)
    return out, first


@njit(cache=True)
def link_next(experts, num_experts, out, first):
    """``next_uses`` into ``out`` and ``first`` of any integer type, ``first`` filled with its "never".
    The trace is read as one flat run of positions from the end, the position a counter (a copy first if
    ``experts`` is not contiguous): computing each from its row, layer and rank took 27-31 ms for 10M accesses of
    Mixtral's shape against 18-20 ms (at OLMoE's, 15 ms against 18: docs/benchmarks.md)."""
    n_rows, n_layers, width = experts.shape
    never = first[0]
    flat = np.ascontiguousarray(experts).reshape(-1)
    pos = flat.shape[0]
    for row in range(n_rows - 1, -1, -1):
        for layer in range(n_layers - 1, -1, -1):
            for _ in range(width):
                pos -= 1
                e = flat[pos]
                if e < 0:
                    out[pos] = never
                    continue
                obj = layer * num_experts + e
                out[pos] = first[obj]
                first[obj] = pos


class State(NamedTuple):
    following: np.ndarray  # int64 [positions]: the same object's next access after each access
    ahead: np.ndarray      # int64 [objects]: its next access after the clock
    key: np.ndarray        # float64 [objects]: minus its next use (the smallest key is evicted)
    seq_end: np.ndarray    # int64 [rows]: the first position after the row's sequence (NEVER without a reset)
    limit: np.ndarray      # int64 [1]: the current row's ``seq_end``: a use from there on is never
    row_width: np.int64    # positions per row


def make_state(ctx) -> State:
    nxt, first = next_uses(ctx.experts, ctx.num_experts)
    n_layers, width = ctx.experts.shape[1], ctx.experts.shape[2]
    # the first position after each row's sequence: uses from there on do not count with a reset
    seq_end = np.full(ctx.experts.shape[0], NEVER, np.int64)
    if ctx.reset_each_seq:
        lengths = np.diff(ctx.seq_offsets)
        seq_end[:] = np.repeat(ctx.seq_offsets[1:] * n_layers * width, lengths)
    return State(nxt, first, np.zeros(ctx.num_objects, np.float64), seq_end, np.array([NEVER], np.int64),
                 np.int64(n_layers * width))


@njit(cache=True)
def reset(st):
    st.key[:] = 0.0


@njit(cache=True)
def on_step(st, part, layer, row, ranked, t):
    st.limit[0] = st.seq_end[row]


@njit(cache=True)
def on_prefetch(st, part, obj, t):
    # a fill's clock lies just before the row it serves (a preload) or at the end of the cell that
    # issues it: the limit is the one of the row after the clock
    st.limit[0] = st.seq_end[(t + 1) // st.row_width]


@njit(cache=True)
def on_access(st, part, slot, obj, t):
    nxt, ahead = st.following, st.ahead
    p = ahead[obj]
    while p <= t:  # NEVER stops it
        p = nxt[p]
    ahead[obj] = p
    # the smallest key is evicted, so the key is minus the next use
    st.key[obj] = -float(p if p < st.limit[0] else NEVER)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return min_key_slot(st.key, st.key, lo, hi, obj_of, mark, stamp)


class LaneState(NamedTuple):
    """The keyed slots (``moesim.policies.keyed_slots.Keyed``, T as ``extra``) and the next uses."""

    slot_of: np.ndarray
    expert_in: np.ndarray
    key: np.ndarray
    bits: np.int64
    extra: np.int64
    following: np.ndarray  # int32 [positions]: every access's next use (T if never)


def make_lanes(ctx, lanes: int) -> LaneState | None:
    """Every access's next use as int32 (half the memory traffic of ``next_uses``; a longer trace takes
    the engine)."""
    limit = ctx.experts.size
    keyed = make_keyed(ctx, lanes, limit + 1, limit)
    if keyed is None or limit >= np.iinfo(np.int32).max:
        return None
    following = np.empty(limit, np.int32)
    link_next(ctx.experts, ctx.num_experts, following, np.full(ctx.num_layers * ctx.num_experts, limit, np.int32))
    return LaneState(*keyed, following)


@njit(cache=True)
def lane_access(st, lane, cap, e, pos, end):
    slot, hit = keyed_place(st, lane, cap, e)
    following = min(np.int64(st.following[pos]), end)  # T if never (``make_lanes``)
    st.key[uint64(lane), uint64(slot)] = ((st.extra + 1 - following) << st.bits) | slot
    return hit


SPEC = PolicySpec("belady", make_state,
                  hooks(reset=reset, on_step=on_step, on_hit=on_access, on_prefetch=on_prefetch,
                        choose_victim=choose_victim, on_insert=on_access), reads_rows=True,
                  fast_paths=(FastPath("lanes", make_lanes, {"lane_reset": keyed_reset, "lane_access": lane_access},
                                       fullest=0.75),),
                  stack=Stack(NEXT_USE, ("sequential", "step")))
