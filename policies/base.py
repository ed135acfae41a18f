"""What every policy module shares: its context, the hook contract, no-op hooks and two helpers.

A policy module defines ``NAME``, ``make_state(ctx) -> tuple`` of arrays, ``HOOKS = hooks(...)``
with its njit hooks, which ``moesim.sim.engine.bind`` compiles into the hit-rate loop and into the
discrete-event loop, and may declare:

- ``BYPASSES = True``: it may leave a missed expert uncached (the memory account then keeps a scratch
  buffer for it);
- ``READS_ROWS = True``: ``make_state`` reads the rows the run will serve ahead of serving them (Belady's
  next uses, ML-FFN's predictions), so it cannot serve steps formed while the run goes on
  (``moesim.sim.serve``);
- ``RESIZABLE = True``: its ``choose_victim`` ignores the object being placed and its state does not
  depend on the capacity, so the engine may take slots away between steps (a served stream's KV cache
  growing: ``moesim.sim.des_loop.fit_live``).
- ``make_lanes`` and ``LANE_HOOKS``: the same policy for caches per layer under sequential semantics,
  eight layers at a time without a branch on hit or miss (the contract: ``moesim.sim.lanes``).
- ``make_across`` and ``ACROSS_HOOKS``: the same, with a layer in each SIMD lane (the contract:
  ``moesim.sim.across``).

Hooks a policy leaves out are no-ops (``on_miss`` then admits every miss):

- ``reset(st)``: forget everything (start, and each sequence when the cache resets).
- ``on_step(st, part, layer, row, ranked, t)``: R for (row, layer) arrives; ``ranked`` is int16[W]
  (W = k in the hit-rate engine; the discrete-event engine's batched rows are wider and pad with -1).
- ``on_hit(st, part, slot, obj, t)``: one access that found ``obj`` resident.
- ``on_miss(st, part, obj, t) -> bool``: one access that missed, before any eviction; False leaves
  ``obj`` uncached (a bypass: it is served from the slow tier and nothing is evicted).
- ``on_prefetch(st, part, obj, t)``: ``obj`` is about to be loaded without being requested (a
  prefetch or a preload, DESIGN.md: "no access"). ``place`` follows, as after an admitted miss; a
  policy that treats a fill unlike a demand load records that here and applies it in ``on_insert``.
- ``choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t) -> slot``: slots
  ``lo..hi-1`` are full; never pick a slot whose object has ``mark[o] == stamp`` (it is in R, or
  protected while a prefetch is placed); -1 leaves ``obj`` uncached.
- ``on_evict(st, part, slot, obj, t)`` and ``on_insert(st, part, slot, obj, t)``.

``t`` is a clock: the flat position ``(row * L + layer) * W + j`` of an access. A prefetch carries the
position of the cell that issues it (before the accesses it anticipates); a preload at the start of
a row carries the position just before the row.

State lives in the tuple of arrays the policy built, so the engine compiles once per policy and
never changes when a policy is added. The hooks are inlined into the loop, which runs without
reference counting: they must not allocate arrays (do that in ``make_state``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit


@dataclass(frozen=True)
class Context:
    """What ``make_state`` may look at: the trace being simulated and the cache configuration."""

    experts: np.ndarray          # int16 [rows, L, W], W >= k; -1 entries are padding, not requests
    seq_offsets: np.ndarray      # int64 [S + 1]
    num_experts: int
    slots: np.ndarray            # int64 [num_parts]: each partition's slots
    per_layer: bool
    sequential: bool
    reset_each_seq: bool
    params: dict = field(default_factory=dict)
    clock_rows: int | None = None  # rows the run's clock will count (default: those of ``experts``)

    @property
    def num_rows(self) -> int:
        """Rows the run serves: the clock's extent (``on_step``'s row is below it)."""
        return self.experts.shape[0] if self.clock_rows is None else self.clock_rows

    @property
    def num_layers(self) -> int:
        return self.experts.shape[1]

    @property
    def top_k(self) -> int:
        return self.experts.shape[2]

    @property
    def num_objects(self) -> int:
        return self.num_layers * self.num_experts

    @property
    def num_parts(self) -> int:
        return self.num_layers if self.per_layer else 1


@njit(cache=True)
def no_reset(st):
    pass


@njit(cache=True)
def no_step(st, part, layer, row, ranked, t):
    pass


@njit(cache=True)
def no_access(st, part, slot, obj, t):
    pass


@njit(cache=True)
def admit(st, part, obj, t):
    return True


@njit(cache=True)
def no_prefetch(st, part, obj, t):
    pass


HOOK_NAMES = ("reset", "on_step", "on_hit", "on_miss", "on_prefetch", "choose_victim", "on_evict", "on_insert")
DEFAULT_HOOKS = dict(reset=no_reset, on_step=no_step, on_hit=no_access, on_miss=admit, on_prefetch=no_prefetch,
                     on_evict=no_access, on_insert=no_access)


def hooks(**given) -> dict:
    """A policy's hooks: ``choose_victim`` and any of ``HOOK_NAMES``; the others are the no-ops above."""
    unknown = set(given) - set(HOOK_NAMES)
    if unknown or "choose_victim" not in given:
        raise TypeError(f"hooks are {', '.join(HOOK_NAMES)} (choose_victim required), got {', '.join(sorted(given))}")
    return {**DEFAULT_HOOKS, **given}


@njit(cache=True, inline="always")
def min_key_slot(key, tie, lo, hi, obj_of, mark, stamp):
    """The slot in lo..hi-1 whose object has the smallest ``(key[obj], tie[obj])``, skipping R.

    Equal pairs go to the lowest slot.
    """
    best, best_key, best_tie = -1, 0.0, 0.0
    for slot in range(lo, hi):
        obj = obj_of[slot]
        if mark[obj] == stamp:
            continue
        k = key[obj]
        if best < 0 or k < best_key or (k == best_key and tie[obj] < best_tie):
            best, best_key, best_tie = slot, k, tie[obj]
    return best


# Doubly linked lists over object ids, several per partition (LRU order, FIFO order, ARC's T1/T2/B1/B2,
# LeCaR's histories). ``lists`` is (node, ends): node[obj] = (prev, next, list it is on) and
# ends[part, list] = (head, tail, size). The head is the most recent end. Two 2-D tables rather than
# six vectors: it is several times faster in numba.
PREV, NEXT, WHICH = 0, 1, 2
HEAD, TAIL, SIZE = 0, 1, 2


def make_lists(num_objects: int, num_parts: int, num_lists: int) -> tuple:
    node = np.full((num_objects, 3), -1, np.int64)
    ends = np.full((num_parts, num_lists, 3), -1, np.int64)
    ends[:, :, SIZE] = 0
    return node, ends


@njit(cache=True, inline="always")
def lists_clear(lists):
    node, ends = lists
    node[:] = -1
    ends[:] = -1
    ends[:, :, SIZE] = 0


@njit(cache=True, inline="always")
def list_size(lists, part, li):
    return lists[1][part, li, SIZE]


@njit(cache=True, inline="always")
def list_tail(lists, part, li):
    return lists[1][part, li, TAIL]


@njit(cache=True, inline="always")
def list_of(lists, obj):
    return lists[0][obj, WHICH]


@njit(cache=True, inline="always")
def list_push_head(lists, part, li, obj):
    node, ends = lists
    head = ends[part, li, HEAD]
    node[obj, PREV] = -1
    node[obj, NEXT] = head
    if head >= 0:
        node[head, PREV] = obj
    else:
        ends[part, li, TAIL] = obj
    ends[part, li, HEAD] = obj
    node[obj, WHICH] = li
    ends[part, li, SIZE] += 1


@njit(cache=True, inline="always")
def list_remove(lists, part, obj):
    node, ends = lists
    li = node[obj, WHICH]
    prev = node[obj, PREV]
    nxt = node[obj, NEXT]
    if prev >= 0:
        node[prev, NEXT] = nxt
    else:
        ends[part, li, HEAD] = nxt
    if nxt >= 0:
        node[nxt, PREV] = prev
    else:
        ends[part, li, TAIL] = prev
    node[obj, PREV] = -1
    node[obj, NEXT] = -1
    node[obj, WHICH] = -1
    ends[part, li, SIZE] -= 1


@njit(cache=True, inline="always")
def list_first_unmarked(lists, part, li, end, mark, stamp):
    """Walking list ``li`` from ``end`` (TAIL: oldest first, HEAD: newest first), the first
    object not in R, or -1."""
    node, ends = lists
    step = PREV if end == TAIL else NEXT
    obj = ends[part, li, end]
    while obj >= 0 and mark[obj] == stamp:
        obj = node[obj, step]
    return obj


# A seeded generator that lives in the policy's state: SplitMix64 (Steele, Lea & Flood, OOPSLA 2014),
# one stream per partition. rng = uint64[parts, 2] = (start, position) per partition; partition p's
# stream is the seed's, started p * STREAM draws in (disjoint for fewer than STREAM draws each), so
# partition 0 draws what a single generator of the seed draws. No global state.
_GOLDEN, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
STREAM = 1 << 40


def rng_starts(seed: int, parts: int) -> np.ndarray:
    """Where each partition's stream starts: seed + p * STREAM * golden (mod 2^64)."""
    return np.array([(seed + p * STREAM * int(_GOLDEN)) % (1 << 64) for p in range(parts)], np.uint64)


def make_rng(seed: int, parts: int = 1) -> np.ndarray:
    return np.repeat(rng_starts(seed, parts)[:, None], 2, axis=1)


@njit(cache=True, inline="always")
def rng_reset(rng):
    for part in range(rng.shape[0]):
        rng[part, 1] = rng[part, 0]


@njit(cache=True, inline="always")
def rng_at(position):
    """The draw at a stream's ``position`` (after its step), uniform in [0, 1)."""
    z = position
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, inline="always")
def rng_uniform(rng, part):
    """Partition ``part``'s next draw, uniform in [0, 1)."""
    rng[part, 1] += _GOLDEN
    return rng_at(rng[part, 1])
