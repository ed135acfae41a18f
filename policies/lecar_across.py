"""LeCaR per layer with each SIMD lane a layer (``moesim.sim.across``): ``LANES`` layers take the same
access together, and every pass over them compiles to vector instructions.

The rules are ``moesim.policies.lecar``'s, every choice made by arithmetic. State of all lanes in one
int32 block, field-major (lane ``l`` of every field at a compile-time offset plus ``l``):

- per lane its capacity C, hits and draws so far, and what the access found and will change;
- ``WIDTH`` resident slots (expert, count, last access): LRU's victim is the smallest last access,
  LFU's the smallest (count, last access); an empty slot holds expert -1, count 0 and its number
  minus ``WIDTH`` as last access, below every resident's (the lowest empty slot is both victims, so
  the cache fills before it evicts), and a slot past C the largest int32 in both;
- 2 x ``WIDTH`` history slots, H_LRU's then H_LFU's (expert, eviction clock; empty as above): the
  smallest clock of a history is a free slot while it holds fewer than C ids, else its oldest.

A layer's clock is ``row * k + j + 1`` (every lane serves the same access), which differs from the
engine's count of the layer's accesses by a constant within a sequence: the same ages and order.
The other state, ``p``: a float64 array (w_LRU and the penalty per lane, then each lane's penalty
table) and each lane's generator start (``moesim.policies.base.rng_starts``; the n-th draw is at
start + n·golden, so the count of draws is all the state a generator needs).

An access is five passes over the lanes: the search (the expert among the residents and the
histories, both victims, each history's free-or-oldest slot), the penalty lookup, the decision
(w, the draw, the victim and the history slot it goes to), and the writes of the resident and of the
history slots. LLVM leaves a loop over the lanes scalar if it holds a float division (numba's zero
check exits the loop; ``np.true_divide`` has none), a builtin ``min`` or ``max`` of ints, a load at
a computed index (hence the lookup's loop of its own), or a select between a new value and the one
held (it becomes a store under a condition; here the writes are arithmetic), found with its
vectorisation remarks. Clocks need ``rows * k + WIDTH < 2^31`` (``make_across`` says None beyond:
LeCaR's next fast path runs it).
"""

import numpy as np
from numba import njit, uint64

from moesim.policies.base import GOLDEN, lane_at, rng_at, rng_starts

TOP = np.int32(2 ** 31 - 1)
# per-lane fields: the capacity, the hits, the draws so far; what the search found: the expert, its slot
# (-1: none), LRU's and LFU's victims (slot, expert), its history slot (-1: none), its age there, each
# history's free-or-oldest slot; what the access changes: the slot it writes and whether it hit there,
# the history slot it pushes to (-1: none) and the id pushed (HIT is KAT >= 0, kept as a field: deriving it
# in the write pass was slower, docs/benchmarks.md)
(CAP, HITS, DRAWS, EXP, KAT, LRU_AT, LRU_IN, LFU_AT, LFU_IN, HAT, AGE, OLD_LRU, OLD_LFU, SLOT, HIT, TARGET,
 INTO) = range(17)
FIELDS = 17
EIN, CNT, LAST = range(3)  # resident slot fields, WIDTH entries of LANES each
HEXP, HKEY = range(2)  # history slot fields, 2 * WIDTH entries of LANES each
CHUNK = 8  # slots per innermost loop, which LLVM unrolls
WIDEST = 3 * CHUNK  # the slots the helpers' blocks of eight serve (``if WIDTH > ...``; the offsets use ``w``, the same):
# wider, the keyed slots of ``moesim.policies.lecar_keyed`` are faster (docs/benchmarks.md)
# the lanes' shape, compile-time constants: ``moesim.sim.across`` compiles these functions once per slot width,
# with ``bind``'s ``constants`` in place of these defaults
LANES = 16  # layers stepping together
WIDTH = CHUNK  # slots per lane


def make_across(ctx, layers: np.ndarray, width: int, penalties: np.ndarray) -> tuple | None:
    """The block, the other state and a view of the hit counters for the lanes ``layers`` with
    ``width`` slots each (``penalties``: the policy's table per layer); None if the clock would
    overflow int32 or ``width`` is past ``WIDEST``."""
    if ctx.experts.shape[0] * ctx.top_k + width >= TOP or width > WIDEST:
        return None
    lanes = layers.shape[0]
    block = np.zeros((FIELDS + 3 * width + 4 * width) * lanes, np.int32)
    block[CAP * lanes:(CAP + 1) * lanes] = ctx.slots[layers]
    floats = np.concatenate([np.zeros(2 * lanes), penalties[layers].ravel()])
    return block, (floats, rng_starts(int(ctx.params["seed"]), ctx.num_layers)[layers]), \
        block[HITS * lanes:(HITS + 1) * lanes]


def across_reset(window, row, blk, p):
    """Every lane empty before access ``(row, 0)``, w_LRU = 0.5 and the generators at their starts."""
    lanes, w = uint64(LANES), uint64(WIDTH)
    residents, history = uint64(FIELDS) * lanes, uint64(FIELDS + 3 * w) * lanes
    for li in range(lanes):
        l = uint64(li)
        cap = blk[lane_at(CAP, lanes, l)]
        for s in range(w):
            at = residents + uint64(s) * lanes + l
            empty = np.int32(s) < cap
            blk[at + uint64(EIN) * w * lanes] = -1
            blk[at + uint64(CNT) * w * lanes] = 0 if empty else TOP
            blk[at + uint64(LAST) * w * lanes] = np.int32(s) - np.int32(w) if empty else TOP
        for s in range(2 * w):
            at = history + uint64(s) * lanes + l
            blk[at + uint64(HEXP) * 2 * w * lanes] = -1
            blk[at + uint64(HKEY) * 2 * w * lanes] = np.int32(s % w) - np.int32(w) if np.int32(s % w) < cap else TOP
        p[0][li] = 0.5
        blk[lane_at(DRAWS, lanes, l)] = 0


def across_step(window, row, j, g, n_layers, total, blk, p):
    """Serve access ``(row, j)`` in every lane (lane ``li`` is layer ``g + li``)."""
    lanes, w = uint64(LANES), uint64(WIDTH)
    residents, history = uint64(FIELDS) * lanes, uint64(FIELDS + 3 * w) * lanes
    now = np.int32(row * window.shape[1] + j + 1)
    floats, starts = p
    depth = uint64(floats.shape[0]) // lanes - uint64(2)
    width, last = np.int32(w), np.int32(depth) - np.int32(1)
    for li in range(lanes):  # the search
        l = uint64(li)
        e = np.int32(window[row % 2, j, li])
        kat, lru_at, lru_in, lfu_at, lfu_in = _residents(blk, residents, lanes, w, l, e)
        hat, evicted, old_lru = _history(blk, history, lanes, w, l, e, 0, (np.int32(-1), np.int32(0)))
        hat, evicted, old_lfu = _history(blk, history, lanes, w, l, e, 1, (hat, evicted))
        blk[lane_at(EXP, lanes, l)], blk[lane_at(KAT, lanes, l)] = e, kat
        blk[lane_at(LRU_AT, lanes, l)], blk[lane_at(LRU_IN, lanes, l)] = lru_at, lru_in
        blk[lane_at(LFU_AT, lanes, l)], blk[lane_at(LFU_IN, lanes, l)] = lfu_at, lfu_in
        blk[lane_at(HAT, lanes, l)] = hat
        age = now - evicted  # up to the table's last row
        blk[lane_at(AGE, lanes, l)] = age if age < last else last
        blk[lane_at(OLD_LRU, lanes, l)], blk[lane_at(OLD_LFU, lanes, l)] = old_lru, old_lfu
    for li in range(lanes):  # the penalty at that age, a lookup per lane
        l = uint64(li)
        floats[lanes + l] = floats[uint64(2) * lanes + l * depth + uint64(blk[lane_at(AGE, lanes, l)])]
    for li in range(lanes):  # the decision
        l = uint64(li)
        kat, hat = blk[lane_at(KAT, lanes, l)], blk[lane_at(HAT, lanes, l)]
        lru_at, lru_in = blk[lane_at(LRU_AT, lanes, l)], blk[lane_at(LRU_IN, lanes, l)]
        lfu_at, lfu_in = blk[lane_at(LFU_AT, lanes, l)], blk[lane_at(LFU_IN, lanes, l)]
        hit = np.int32(kat >= 0)
        # a miss on an id in a history: the expert that evicted it was wrong, its weight takes the penalty
        found = np.int32(hat >= 0)
        in_lfu = found & np.int32(hat >= width)
        penalty, wl = floats[lanes + l], floats[l]
        lru = wl * (penalty if found - in_lfu else 1.0)
        lfu = (1.0 - wl) * (penalty if in_lfu else 1.0)
        wl = np.true_divide(lru, lru + lfu) * found + wl * (1 - found)  # exact either way; lru + lfu > 0
        floats[l] = wl
        # a full cache's miss: the draw picks LRU's or LFU's victim, whose id goes to that expert's history
        evict = (1 - hit) & np.int32(lru_in >= 0)
        draws = blk[lane_at(DRAWS, lanes, l)] + 1
        take_lru = np.int32(rng_at(starts[li] + uint64(draws) * GOLDEN) < wl)
        blk[lane_at(DRAWS, lanes, l)] = draws - 1 + evict
        victim = lru_at if take_lru else lfu_at
        into = lru_in if take_lru else lfu_in
        same = found & np.int32(in_lfu == 1 - take_lru)  # the id left the history the victim goes to
        oldest = blk[lane_at(OLD_LRU, lanes, l)] if take_lru else blk[lane_at(OLD_LFU, lanes, l)] + width
        target = (hat if same else oldest) if evict else np.int32(-1)
        blk[lane_at(SLOT, lanes, l)], blk[lane_at(HIT, lanes, l)] = kat if hit else victim, hit
        blk[lane_at(TARGET, lanes, l)], blk[lane_at(INTO, lanes, l)] = target, into
        blk[lane_at(HITS, lanes, l)] += hit
    for li in range(lanes):  # the slot served: its expert, count (one more on a hit, 1 after a load), access
        l = uint64(li)
        _write_residents(blk, residents, lanes, w, l, blk[lane_at(SLOT, lanes, l)], blk[lane_at(EXP, lanes, l)],
                         blk[lane_at(HIT, lanes, l)], now)
    for li in range(lanes):  # the pushed id, and the requested one out of its history
        l = uint64(li)
        target, into, hat = blk[lane_at(TARGET, lanes, l)], blk[lane_at(INTO, lanes, l)], blk[lane_at(HAT, lanes, l)]
        _write_history(blk, history, lanes, w, l, 0, target, into, hat, now)
        _write_history(blk, history, lanes, w, l, 1, target, into, hat, now)


@njit(cache=True, inline="always")
def _residents(blk, at, lanes, w, l, e):
    """Lane ``l``'s slot holding ``e`` (-1: none), and LRU's and LFU's victims (slot, expert). Each
    eight slots are an innermost loop of their own, which LLVM unrolls (``WIDTH`` is a constant of the
    bound loop, ``moesim.sim.engine.bind``, so numba drops the blocks past it before it inlines them)."""
    got = (np.int32(-1), np.int32(0), TOP, np.int32(-1), np.int32(0), TOP, TOP, np.int32(-1))
    got = _residents_eight(blk, at, lanes, w, l, e, uint64(0), got)
    if WIDTH > 8:
        got = _residents_eight(blk, at, lanes, w, l, e, uint64(8), got)
    if WIDTH > 16:
        got = _residents_eight(blk, at, lanes, w, l, e, uint64(16), got)
    kat, lru_at, _, lru_in, lfu_at, _, _, lfu_in = got
    return kat, lru_at, lru_in, lfu_at, lfu_in


@njit(cache=True, inline="always")
def _residents_eight(blk, at, lanes, w, l, e, first, got):
    kat, lru_at, lru_last, lru_in, lfu_at, lfu_cnt, lfu_last, lfu_in = got
    for sb in range(CHUNK):
        s = first + uint64(sb)
        cell = at + s * lanes + l
        ein, cnt, last = blk[cell + uint64(EIN) * w * lanes], blk[cell + uint64(CNT) * w * lanes], \
            blk[cell + uint64(LAST) * w * lanes]
        kat = np.int32(s) if ein == e else kat
        older = last < lru_last  # one select per value: LLVM turns a select of tuples into branches
        lru_at = np.int32(s) if older else lru_at
        lru_last = last if older else lru_last
        lru_in = ein if older else lru_in
        fewer = (cnt < lfu_cnt) | ((cnt == lfu_cnt) & (last < lfu_last))
        lfu_at = np.int32(s) if fewer else lfu_at
        lfu_cnt = cnt if fewer else lfu_cnt
        lfu_last = last if fewer else lfu_last
        lfu_in = ein if fewer else lfu_in
    return kat, lru_at, lru_last, lru_in, lfu_at, lfu_cnt, lfu_last, lfu_in


@njit(cache=True, inline="always")
def _history(blk, at, lanes, w, l, e, h, got):
    """History ``h`` of lane ``l``: carries (the slot holding ``e``, -1: none, numbered across both
    histories; its eviction clock) in ``got`` and returns them with the history's free-or-oldest slot
    (numbered within it)."""
    base = uint64(h) * w
    got = _history_eight(blk, at, lanes, w, l, e, base, uint64(0), got + (np.int32(0), TOP))
    if WIDTH > 8:
        got = _history_eight(blk, at, lanes, w, l, e, base, uint64(8), got)
    if WIDTH > 16:
        got = _history_eight(blk, at, lanes, w, l, e, base, uint64(16), got)
    return got[0], got[1], got[2]


@njit(cache=True, inline="always")
def _history_eight(blk, at, lanes, w, l, e, base, first, got):
    hat, evicted, oldest, key = got
    for sb in range(CHUNK):
        s = first + uint64(sb)
        cell = at + (base + s) * lanes + l
        hexp, hkey = blk[cell + uint64(HEXP) * 2 * w * lanes], blk[cell + uint64(HKEY) * 2 * w * lanes]
        mine, older = hexp == e, hkey < key
        hat = np.int32(base + s) if mine else hat
        evicted = hkey if mine else evicted
        oldest = np.int32(s) if older else oldest
        key = hkey if older else key
    return hat, evicted, oldest, key


@njit(cache=True, inline="always")
def _write_residents(blk, at, lanes, w, l, slot, e, hit, now):
    """Slot ``slot`` of lane ``l`` now holds ``e``, accessed at ``now``: its count one more on a hit, 1
    after a load."""
    _write_residents_eight(blk, at, lanes, w, l, slot, e, hit, now, uint64(0))
    if WIDTH > 8:
        _write_residents_eight(blk, at, lanes, w, l, slot, e, hit, now, uint64(8))
    if WIDTH > 16:
        _write_residents_eight(blk, at, lanes, w, l, slot, e, hit, now, uint64(16))


@njit(cache=True, inline="always")
def _write_residents_eight(blk, at, lanes, w, l, slot, e, hit, now, first):
    for sb in range(CHUNK):
        s = first + uint64(sb)
        cell = at + s * lanes + l
        mine = np.int32(np.int32(s) == slot)
        ein, cnt, last = blk[cell + uint64(EIN) * w * lanes], blk[cell + uint64(CNT) * w * lanes], \
            blk[cell + uint64(LAST) * w * lanes]
        blk[cell + uint64(EIN) * w * lanes] = ein + mine * (e - ein)
        blk[cell + uint64(CNT) * w * lanes] = cnt + mine * (cnt * hit + 1 - cnt)
        blk[cell + uint64(LAST) * w * lanes] = last + mine * (now - last)


@njit(cache=True, inline="always")
def _write_history(blk, at, lanes, w, l, h, target, into, hat, now):
    """History ``h`` of lane ``l``: slot ``target`` (numbered across both; -1: none) takes ``into``,
    evicted at ``now``; slot ``hat`` (-1: none), whose id was requested, is emptied unless it is the
    target."""
    base = uint64(h) * w
    _write_history_eight(blk, at, lanes, w, l, base, target, into, hat, now, uint64(0))
    if WIDTH > 8:
        _write_history_eight(blk, at, lanes, w, l, base, target, into, hat, now, uint64(8))
    if WIDTH > 16:
        _write_history_eight(blk, at, lanes, w, l, base, target, into, hat, now, uint64(16))


@njit(cache=True, inline="always")
def _write_history_eight(blk, at, lanes, w, l, base, target, into, hat, now, first):
    for sb in range(CHUNK):
        s = first + uint64(sb)
        cell = at + (base + s) * lanes + l
        push, drop = np.int32(np.int32(base + s) == target), np.int32(np.int32(base + s) == hat)
        hexp, hkey = blk[cell + uint64(HEXP) * 2 * w * lanes], blk[cell + uint64(HKEY) * 2 * w * lanes]
        hexp = hexp + drop * (np.int32(-1) - hexp)  # emptied, then (the same slot or another) filled
        hkey = hkey + drop * (np.int32(s) - np.int32(w) - hkey)
        blk[cell + uint64(HEXP) * 2 * w * lanes] = hexp + push * (into - hexp)
        blk[cell + uint64(HKEY) * 2 * w * lanes] = hkey + push * (now - hkey)
