"""fifo: evict the expert that was loaded first; hits change nothing (LRU's list without the move).

A prefetched or preloaded expert joins the queue when it is loaded, like any load (prefetch rule).

Per layer under sequential semantics (``moesim.sim.lanes``) the queue is a ring of C slots: the next
slot to fill holds the oldest load, so a miss puts its expert there and moves the ring on, and a hit
leaves both alone; a byte per expert says whether it is resident.
"""

from typing import NamedTuple

import numpy as np
from numba import njit, uint64

from moesim.policies.base import FastPath, PolicySpec, hooks
from moesim.policies.lru import choose_victim, make_state, on_evict, on_insert, on_move, reset


class LaneState(NamedTuple):
    resident: np.ndarray  # uint8 [lanes, E + 1]: 1 if the expert is resident (column E: the empty slot's sentinel)
    ring: np.ndarray      # int64 [lanes, C]: the expert each slot holds, in load order around the ring
    next: np.ndarray      # int64 [lanes]: the slot the next miss fills (it holds the oldest load)


def make_lanes(ctx, lanes: int) -> LaneState:
    return LaneState(np.zeros((lanes, ctx.num_experts + 1), np.uint8),
                     np.zeros((lanes, int(ctx.slots.max())), np.int64), np.zeros(lanes, np.int64))


@njit(cache=True)
def lane_reset(st, lane, cap):
    st.resident[lane, :] = 0
    st.ring[lane, :] = st.resident.shape[1] - 1  # every slot empty: its expert is the sentinel, E
    st.next[lane] = 0


@njit(cache=True)
def lane_access(st, lane, cap, e, pos, end):
    resident, ring, nxt = st.resident, st.ring, st.next
    ln = uint64(lane)
    ue = uint64(e)
    hit = resident[ln, ue]
    miss = uint64(1) - uint64(hit)
    at = uint64(nxt[ln])
    oldest = uint64(ring[ln, at])
    resident[ln, oldest] &= hit  # a miss evicts the oldest load (or fills an empty slot: the sentinel's byte)
    resident[ln, ue] = 1
    ring[ln, at] = oldest + miss * (ue - oldest)
    at += miss
    nxt[ln] = at if at != uint64(cap) else uint64(0)
    return np.int64(hit)


SPEC = PolicySpec("fifo", make_state,
                  hooks(reset=reset, choose_victim=choose_victim, on_evict=on_evict, on_insert=on_insert,
                        on_move=on_move), resizable=True,
                  fast_paths=(FastPath("lanes", make_lanes, {"lane_reset": lane_reset, "lane_access": lane_access},
                                       fullest=0.75),))
