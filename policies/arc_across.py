"""ARC per layer with each SIMD lane a layer (``moesim.sim.across``): ``LANES`` layers take the same
access together, and every pass over them compiles to vector instructions.

The state of all lanes is one int32 block, field-major (a field's ``LANES`` entries side by side), so
lane ``l`` of every field sits at a compile-time offset plus ``l``: LLVM vectorises a loop over the
lanes only where every address is of that form and no load sits under a condition. Per lane:

- ``WIDTH`` resident slots (expert, key) and ``WIDTH`` ghost slots (expert, key); T1 and T2 share the
  first, B1 and B2 the second (|B1| + |B2| <= c in ARC). A key is T - t + WIDTH for an entry of T1 or
  B1 and its negative for T2 or B2 (t: the access that put it there, T: the run's length), so one
  minimum and one maximum per slot set give both lists' LRU ends; an empty slot's key is its number.
- the four list sizes, the capacity c, the hits, and what the current access found: its key among
  the residents (``NOM``: none), among the ghosts, and each slot set's smallest and largest key.

The rules are those of ``moesim.policies.arc`` (Megiddo & Modha's cases I-IV and REPLACE), applied
by arithmetic on 0/1 flags; a move writes a slot found by its unique key, so no per-expert index is
kept. The cache fills compactly (the next free slot is number |T1| + |T2|, the next ghost slot
|B1| + |B2|: only a filled cache evicts, so ghosts arrive only once it is full). The pass that
moves entries also searches them for the next access's expert, so each slot is read once a step.
p stays float64, in an array of its own. Keys need T + WIDTH < 2^31 (``make_across`` says None
beyond: ARC's next fast path runs it).
"""

import numpy as np
from numba import njit, uint64

from moesim.policies.base import lane_at

NOM = np.int32(-(2 ** 31))  # no key: not found / no slot to write
TOP = np.int32(2 ** 31 - 1)
# the per-lane fields, in the order they sit in the block; the slots follow
(EXP, NXT, T1, T2, B1, B2, CAP, HITS, KAT, GK, LO, HI, GLO, GHI, ABOVE, EQUAL) = range(16)
FIELDS = 16
EIN, KEY, GIN, GKEY = range(4)  # slot fields, WIDTH entries of LANES each
CHUNK = 8  # slots per innermost loop (``_move_eight``), which LLVM unrolls
WIDEST = 8 * CHUNK  # the slots ``_move_and_find`` serves
# the lanes' shape, compile-time constants: ``moesim.sim.across`` compiles these functions once per slot width,
# with ``bind``'s ``constants`` in place of these defaults
LANES = 16  # layers stepping together
WIDTH = CHUNK  # slots per lane


def make_across(ctx, layers: np.ndarray, width: int) -> tuple | None:
    """The block and p for the lanes ``layers`` (capacities from ``ctx.slots``) with ``width`` slots
    each (a multiple of ``CHUNK``), and a view of the block's hit counters; None if the trace is too
    long for int32 keys or ``width`` past ``WIDEST``. ``across_reset`` empties it before the first
    access."""
    if ctx.experts.size + width >= TOP or width > WIDEST:
        return None
    lanes = layers.shape[0]
    block = np.zeros((FIELDS + 4 * width) * lanes, np.int32)
    block[CAP * lanes:(CAP + 1) * lanes] = ctx.slots[layers]
    return block, np.zeros(lanes), block[HITS * lanes:(HITS + 1) * lanes]


def across_reset(window, row, blk, p):
    """Every lane empty before access ``(row, 0)``: no resident, no ghost, p = 0, and the search's
    findings for that access set as the empty lists give them."""
    lanes, w = uint64(LANES), uint64(WIDTH)
    for s in range(w):
        for li in range(lanes):
            l = uint64(li)
            at = uint64(FIELDS) * lanes + s * lanes + l
            blk[at + uint64(EIN) * w * lanes] = -1
            blk[at + uint64(KEY) * w * lanes] = np.int32(s)
            blk[at + uint64(GIN) * w * lanes] = -1
            blk[at + uint64(GKEY) * w * lanes] = np.int32(s)
    for li in range(lanes):
        l = uint64(li)
        p[li] = 0.0
        blk[lane_at(NXT, lanes, l)] = np.int32(window[row % 2, 0, li])
        blk[lane_at(T1, lanes, l)], blk[lane_at(T2, lanes, l)] = 0, 0
        blk[lane_at(B1, lanes, l)], blk[lane_at(B2, lanes, l)] = 0, 0
        blk[lane_at(KAT, lanes, l)], blk[lane_at(GK, lanes, l)] = NOM, NOM
        blk[lane_at(LO, lanes, l)], blk[lane_at(HI, lanes, l)] = 0, np.int32(w - 1)
        blk[lane_at(GLO, lanes, l)], blk[lane_at(GHI, lanes, l)] = 0, np.int32(w - 1)


def across_step(window, row, j, g, n_layers, total, blk, p):
    """Serve access ``(row, j)`` in every lane (lane ``li`` is layer ``g + li``)."""
    lanes, w = uint64(LANES), uint64(WIDTH)
    k = window.shape[1]
    nrow, nj = (row, j + 1) if j + 1 < k else (row + 1, 0)  # past the last row: a stale row, unused
    width = np.int32(w)
    ein, key = uint64(FIELDS) * lanes + uint64(EIN) * w * lanes, uint64(FIELDS) * lanes + uint64(KEY) * w * lanes
    gin, gkey = uint64(FIELDS) * lanes + uint64(GIN) * w * lanes, uint64(FIELDS) * lanes + uint64(GKEY) * w * lanes
    for li in range(lanes):  # the expert, the next one, and p (case II or III adapts it)
        l = uint64(li)
        blk[lane_at(EXP, lanes, l)] = blk[lane_at(NXT, lanes, l)]
        blk[lane_at(NXT, lanes, l)] = np.int32(window[nrow % 2, nj, li])
        gk, b1, b2 = blk[lane_at(GK, lanes, l)], blk[lane_at(B1, lanes, l)], blk[lane_at(B2, lanes, l)]
        in_b2 = np.int32(gk != NOM) & np.int32(gk < 0)
        in_b1 = np.int32(gk != NOM) - in_b2
        ratio = (b1 + in_b1 * (b2 - b1)) / max(b2 + in_b1 * (b1 - b2), 1)  # |B2|/|B1| in B1, |B1|/|B2| in B2
        target = min(max(p[li] + (in_b1 - in_b2) * max(ratio, 1.0), 0.0), blk[lane_at(CAP, lanes, l)])
        p[li] = target
        t1 = blk[lane_at(T1, lanes, l)]
        blk[lane_at(ABOVE, lanes, l)] = np.int32(t1 > target)
        blk[lane_at(EQUAL, lanes, l)] = np.int32(t1 == target)
    for li in range(lanes):  # the moves, and the search for the next access
        l = uint64(li)
        e, ne = blk[lane_at(EXP, lanes, l)], blk[lane_at(NXT, lanes, l)]
        age = np.int32((row * n_layers + g + li) * k + j - total)  # t - T: older is smaller
        kat, gk = blk[lane_at(KAT, lanes, l)], blk[lane_at(GK, lanes, l)]
        t1, t2, b1, b2 = blk[lane_at(T1, lanes, l)], blk[lane_at(T2, lanes, l)], blk[lane_at(B1, lanes, l)], \
            blk[lane_at(B2, lanes, l)]
        cap = blk[lane_at(CAP, lanes, l)]
        hit = np.int32(kat != NOM)
        ghost = np.int32(gk != NOM)
        in_b2 = ghost & np.int32(gk < 0)
        in_b1 = ghost - in_b2
        from_t1 = hit & np.int32(kat > 0)
        evict = (1 - hit) & np.int32(t1 + t2 == cap)  # a ghost hit implies a full cache
        b1 -= in_b1
        b2 -= in_b2
        new = evict & (1 - ghost)  # case IV
        t1_full = np.int32(t1 + b1 >= cap)
        bare = new & t1_full & np.int32(t1 >= cap)  # T1's LRU leaves without a ghost
        drop1 = new & t1_full & np.int32(t1 < cap)  # B1's oldest ghost goes
        drop2 = new & (1 - t1_full) & np.int32(t1 + t2 + b1 + b2 >= 2 * cap)  # B2's oldest ghost goes
        dropped = drop1 | drop2
        # REPLACE: T1's LRU end if |T1| > p, or |T1| = p and the request was in B2 (or T2 is empty)
        take1 = bare | np.int32(t2 == 0) | (np.int32(t1 >= 1) & (blk[lane_at(ABOVE, lanes, l)] |
                                                                  (blk[lane_at(EQUAL, lanes, l)] & in_b2)))
        ghosted = evict & (1 - bare)
        appended = ghosted & (1 - ghost) & (1 - dropped)
        hi, lo = blk[lane_at(HI, lanes, l)], blk[lane_at(LO, lanes, l)]
        ghi, glo = blk[lane_at(GHI, lanes, l)], blk[lane_at(GLO, lanes, l)]
        resident_at = kat if hit else ((hi if take1 else lo) if evict else np.int32(t1 + t2))
        ghost_at = gk if ghost else ((ghi if drop1 else glo) if dropped else (np.int32(b1 + b2) if appended else NOM))
        resident_key = np.int32(age - width) if (hit | ghost) else np.int32(width - age)  # T2 or T1
        ghost_key = np.int32(width - age) if take1 else np.int32(age - width)  # B1 or B2
        victim, kat, lo, hi = _move_and_find(blk, key, ein, lanes, l, resident_at, resident_key, e, ne)
        _, gk, glo, ghi = _move_and_find(blk, gkey, gin, lanes, l, ghost_at, ghost_key, victim, ne)
        blk[lane_at(KAT, lanes, l)], blk[lane_at(LO, lanes, l)], blk[lane_at(HI, lanes, l)] = kat, lo, hi
        blk[lane_at(GK, lanes, l)], blk[lane_at(GLO, lanes, l)], blk[lane_at(GHI, lanes, l)] = gk, glo, ghi
        leave1, leave2 = evict & take1, evict & (1 - take1)
        blk[lane_at(T1, lanes, l)] = t1 - from_t1 - leave1 + (1 - hit) * (1 - ghost)
        blk[lane_at(T2, lanes, l)] = t2 + from_t1 + ghost - leave2
        blk[lane_at(B1, lanes, l)] = b1 - drop1 + (ghosted & take1)
        blk[lane_at(B2, lanes, l)] = b2 - drop2 + (ghosted & (1 - take1))
        blk[lane_at(HITS, lanes, l)] += hit


@njit(cache=True, inline="always")
def _move_and_find(blk, keys, ins, lanes, l, at, new_key, new_in, ne):
    """One slot set of lane ``l`` of ``lanes`` (``WIDTH`` slots, keys at ``keys``, experts at ``ins``): the
    slot keyed ``at`` takes (``new_key``, ``new_in``); returns the expert it held (-1: none) and, after
    the move, the key of expert ``ne`` (``NOM``: none) and the smallest and largest key. Each eight
    slots are an innermost loop of their own, which LLVM unrolls; a loop over more it leaves rolled
    with this body, and the lane loop around it scalar. ``WIDTH`` is a constant of the bound loop
    (``moesim.sim.engine.bind``), so numba drops the blocks past it before it inlines them."""
    got = _move_eight(blk, keys, ins, lanes, uint64(0), l, at, new_key, new_in, ne, (np.int32(-1), NOM, TOP, NOM))
    if WIDTH > 8:
        got = _move_eight(blk, keys, ins, lanes, uint64(8), l, at, new_key, new_in, ne, got)
    if WIDTH > 16:
        got = _move_eight(blk, keys, ins, lanes, uint64(16), l, at, new_key, new_in, ne, got)
    if WIDTH > 24:
        got = _move_eight(blk, keys, ins, lanes, uint64(24), l, at, new_key, new_in, ne, got)
    if WIDTH > 32:
        got = _move_eight(blk, keys, ins, lanes, uint64(32), l, at, new_key, new_in, ne, got)
    if WIDTH > 40:
        got = _move_eight(blk, keys, ins, lanes, uint64(40), l, at, new_key, new_in, ne, got)
    if WIDTH > 48:
        got = _move_eight(blk, keys, ins, lanes, uint64(48), l, at, new_key, new_in, ne, got)
    if WIDTH > 56:
        got = _move_eight(blk, keys, ins, lanes, uint64(56), l, at, new_key, new_in, ne, got)
    return got


@njit(cache=True, inline="always")
def _move_eight(blk, keys, ins, lanes, first, l, at, new_key, new_in, ne, got):
    """Slots ``first``..``first + 7`` of ``_move_and_find``, carrying its results in ``got``."""
    old, found, lo, hi = got
    for sb in range(CHUNK):
        slot = (first + uint64(sb)) * lanes + l
        kv, ev = blk[keys + slot], blk[ins + slot]
        moved = kv == at
        old = ev if moved else old
        kv = new_key if moved else kv
        ev = new_in if moved else ev
        blk[keys + slot], blk[ins + slot] = kv, ev
        found = kv if ev == ne else found
        lo, hi = min(lo, kv), max(hi, kv)
    return old, found, lo, hi
