"""Slots ranked by one integer key each, for the lane path of a policy whose victim is a minimum
(``moesim.sim.lanes``): LFU's fewest accesses then least recent, Belady's furthest next use.

A key packs what the policy compares, most significant first, above the slot number in the low
``bits`` bits, so keys never tie and the smallest key's low bits name the victim: one vectorised
minimum over the lane's slots, taken at every access and kept only on a miss, with no branch. An
empty slot's key is its number, below every occupied slot's (a policy's keys are at least
``1 << bits``), so the cache fills before it evicts; slots past the capacity hold the largest key.
"""

from typing import NamedTuple

import numpy as np
from numba import njit, uint64

LAST = np.iinfo(np.int64).max  # the key of a slot past the capacity: never the minimum


class Keyed(NamedTuple):
    """Per lane, the slots and their keys; then two constants, scalars of the tuple so that the compiled
    loop keeps them in registers. A policy with more state extends it with fields of its own after these."""

    slot_of: np.ndarray    # int16 [lanes, E + 1]: the expert's slot (the capacity if not resident; column E:
                           # the empty slot's sentinel)
    expert_in: np.ndarray  # int16 [lanes, width]: the expert in each slot
    key: np.ndarray        # int64 [lanes, width]: each slot's key, padded to whole vectors
    bits: np.int64         # the low bits that hold the slot number
    extra: np.int64        # the policy's own constant


def slot_bits(slots: np.ndarray) -> tuple[int, int]:
    """(the slots a layer's keys are padded to, whole vectors of eight; the low bits that number them) for caches of
    ``slots``."""
    width = -(-int(slots.max()) // 8) * 8
    return width, max(1, (width - 1).bit_length())


def make_keyed(ctx, lanes: int, most: int, extra: int = 0) -> Keyed | None:
    """The keyed slots of ``lanes`` lanes; None if keys up to ``most`` above the slot bits would overflow."""
    width, bits = slot_bits(ctx.slots)
    if most.bit_length() + bits > 62:
        return None
    return Keyed(np.zeros((lanes, ctx.num_experts + 1), np.int16), np.zeros((lanes, width), np.int16),
                 np.zeros((lanes, width), np.int64), np.int64(bits), np.int64(extra))


@njit(cache=True, inline="always")
def keyed_reset(st, lane, cap):
    """Every slot of the lane empty (a policy's ``lane_reset``)."""
    st.slot_of[lane, :] = cap
    st.expert_in[lane, :] = st.slot_of.shape[1] - 1  # the sentinel, E
    for slot in range(st.key.shape[1]):
        st.key[lane, slot] = slot if slot < cap else LAST


@njit(cache=True, inline="always")
def lowest(key):
    """The smallest of ``key`` (an unsigned count keeps the loop free of negative-index checks, so it
    compiles to vector minimums)."""
    best = key[0]
    for i in range(uint64(key.shape[0])):
        best = min(best, key[i])
    return best


@njit(cache=True, inline="always")
def keyed_place(st, lane, cap, e):
    """Serve expert ``e``: its slot if resident (a hit), else the lowest key's, which it now holds.
    Returns (slot, 1 on a hit else 0); the caller writes the slot's new key."""
    slot_of, expert_in, key = st.slot_of, st.expert_in, st.key[lane]
    ln, ue, ucap = uint64(lane), uint64(e), uint64(cap)
    held = uint64(slot_of[ln, ue])
    hit = uint64(held < ucap)
    victim = uint64(lowest(key)) & ((uint64(1) << uint64(st.bits)) - uint64(1))
    slot = victim + hit * (held - victim)
    slot_of[ln, uint64(expert_in[ln, slot])] = ucap + hit * (slot - ucap)  # the evicted expert (or the sentinel)
    slot_of[ln, ue] = slot
    expert_in[ln, slot] = ue
    return np.int64(slot), np.int64(hit)
