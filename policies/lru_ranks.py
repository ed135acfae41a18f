"""LRU with a cache per layer under sequential semantics, as recency ranks: the fast path behind
``moesim.sim.hitrate.simulate`` (LRU's ``fast_paths``) and ``moesim.sim.mrc.curve`` (its ``stack``) for
that case.

LRU is a stack algorithm (Mattson, Gecsei, Slutz & Traiger, 1970): a cache of C slots holds the C
experts of its layer used most recently, so an access hits exactly when fewer than C other experts of
the layer were used since its own expert's last use — its stack distance. Each layer keeps every
expert's distance as a rank (0: used last; ``NEVER``: not used since the start or the last reset) in
one byte (two for more than 254 experts). An access reads its expert's rank d; every expert ranked
below d moves down one, which is one compare-and-add over the layer's ranks in vector registers with
no branch and no list; the expert goes to rank 0. The histogram of d gives the hits at every C at
once: the accesses with d < C. One capacity costs what the whole curve does. An expert not used yet keeps ``NEVER``, the
largest rank the type holds, which no update moves: its first use counts at no capacity.

Speed: layers are independent, so ``LANES`` of them run interleaved and their updates overlap (an
update's byte store has to land before the next vector load of the same ranks, and more lanes fill
that wait: eight beat four, docs/benchmarks.md); a layer's accesses are taken two at a time, one pass over
its ranks for both (``move_two``), which halves the loads, stores and waits (1.1-1.4x at 64 to 160
experts, docs/benchmarks.md); the ranks are padded to whole blocks of ``BLOCK`` (padding is never used and
never moves), so every update is whole vectors. The hit-rate engine's linked list takes a branch per access
whose outcome is a coin toss at these hit rates; this takes none.
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

from moesim.policies.base import prefer_wide_vectors

LANES, BLOCK = 8, 64  # layers interleaved (``_ranks`` writes its lanes out), ranks per vector block


def rank_counts(experts: np.ndarray, seq_offsets: np.ndarray, num_experts: int, reset: bool,
                slots: np.ndarray | None = None) -> np.ndarray:
    """Hits per layer at ``slots`` (int64 [L]: each layer's capacity), or with ``slots`` None the
    histogram int64 [L, E + 1] of stack distances (column E: first uses)."""
    n_layers = experts.shape[1]
    never = 255 if num_experts < 255 else 65535
    ranks = np.full((-(-n_layers // LANES) * LANES, -(-num_experts // BLOCK) * BLOCK), never,
                    np.uint8 if never == 255 else np.uint16)
    hist = np.zeros((ranks.shape[0], num_experts + 1), np.int64)
    _ranks(np.ascontiguousarray(experts, np.int16), np.ascontiguousarray(seq_offsets, np.int64), ranks, hist,
           np.int64(num_experts), bool(reset))
    hist = hist[:n_layers]
    if slots is None:
        return hist
    below = np.cumsum(hist, axis=1)  # below[layer, d]: accesses at rank <= d
    return below[np.arange(n_layers), np.asarray(slots, np.int64) - 1]


def rank_hits(ctx) -> np.ndarray:
    """Hits per layer at ``ctx.slots`` (LRU's ``FastPath`` of kind ``counts``)."""
    return rank_counts(ctx.experts, ctx.seq_offsets, ctx.num_experts, ctx.reset_each_seq, ctx.slots)


@njit(cache=True, inline="always")
def move_one(ranks, hist, experts, row, layer, j, blocks, top):
    """Access ``j`` of ``layer`` at ``row``: count its expert's rank d in ``hist`` (first uses at ``top``, the
    column E), move the ranks below d down one, put the expert at 0. (A loop bound that is a whole number of
    blocks keeps the pass in vectors: with the width as the bound LLVM leaves it scalar.)"""
    e = uint64(experts[row, layer, j])
    d = ranks[e]
    hist[min(uint64(d), top)] += 1
    for b in range(0, blocks * BLOCK, BLOCK):
        for i in range(BLOCK):
            ranks[b + i] += ranks[b + i] < d
    ranks[e] = 0


@njit(cache=True, inline="always")
def move_two(ranks, hist, experts, row, layer, j, blocks, top):
    """Accesses ``j`` and ``j + 1`` of ``layer`` at ``row`` in one pass over the ranks, as ``move_one`` twice.
    The second expert's distance is its rank d1 plus one if the first one's, d0, was above it (the first moved
    to 0 over it). A rank r moves down once for each of d0, d1 it is below: the first access keeps the order of
    every other rank, so "below d1 after it" is "below d1 before it". That holds for two experts; one twice (a cell of
    a trace not validated) is at rank 0 the second time, and moves nothing (d1 taken as 0)."""
    e0, e1 = uint64(experts[row, layer, j]), uint64(experts[row, layer, j + 1])
    same = e1 == e0  # the same expert twice (a trace not validated): at rank 0 the second time
    d0, d1 = ranks[e0], ranks[e1] if not same else ranks.dtype.type(0)
    hist[min(uint64(d0), top)] += 1
    hist[uint64(0) if same else min(uint64(d1) + uint64(d1 < d0), top)] += 1
    for b in range(0, blocks * BLOCK, BLOCK):
        for i in range(BLOCK):
            r = ranks[b + i]
            ranks[b + i] = r + (r < d0) + (r < d1)
    ranks[e0] = 1
    ranks[e1] = 0


@njit(cache=True, nogil=True)
def _ranks(experts, seq_offsets, ranks, hist, num_experts, reset):
    """For each group of ``LANES`` layers (the last one's extra lanes repeat the last layer into ranks
    and counts of their own, discarded), every access in trace order, two at a time (``move_two``) and the
    last of an odd top-k alone (``move_one``). The eight lanes are written out so that their independent
    updates sit side by side in one loop body."""
    prefer_wide_vectors()  # a block of 64 ranks in one vector, not two (128 and 160 experts: 1.4x)
    n_layers, k, blocks = experts.shape[1], experts.shape[2], ranks.shape[1] // BLOCK
    never = ranks[0, 0]
    top = uint64(num_experts)  # unsigned indices (``moesim.policies.base``)
    for g in range(0, ranks.shape[0], LANES):
        l0, l1, l2, l3 = g, min(g + 1, n_layers - 1), min(g + 2, n_layers - 1), min(g + 3, n_layers - 1)
        l4, l5, l6, l7 = (min(g + 4, n_layers - 1), min(g + 5, n_layers - 1), min(g + 6, n_layers - 1),
                          min(g + 7, n_layers - 1))
        r0, r1, r2, r3, r4, r5, r6, r7 = (ranks[g], ranks[g + 1], ranks[g + 2], ranks[g + 3], ranks[g + 4],
                                          ranks[g + 5], ranks[g + 6], ranks[g + 7])
        g0, g1, g2, g3, g4, g5, g6, g7 = (hist[g], hist[g + 1], hist[g + 2], hist[g + 3], hist[g + 4], hist[g + 5],
                                          hist[g + 6], hist[g + 7])
        for s in range(seq_offsets.shape[0] - 1):
            if reset and s > 0:
                ranks[g:g + LANES] = never
            for row in range(seq_offsets[s], seq_offsets[s + 1]):
                for j in range(0, k - 1, 2):
                    move_two(r0, g0, experts, row, l0, j, blocks, top)
                    move_two(r1, g1, experts, row, l1, j, blocks, top)
                    move_two(r2, g2, experts, row, l2, j, blocks, top)
                    move_two(r3, g3, experts, row, l3, j, blocks, top)
                    move_two(r4, g4, experts, row, l4, j, blocks, top)
                    move_two(r5, g5, experts, row, l5, j, blocks, top)
                    move_two(r6, g6, experts, row, l6, j, blocks, top)
                    move_two(r7, g7, experts, row, l7, j, blocks, top)
                if k % 2:
                    move_one(r0, g0, experts, row, l0, k - 1, blocks, top)
                    move_one(r1, g1, experts, row, l1, k - 1, blocks, top)
                    move_one(r2, g2, experts, row, l2, k - 1, blocks, top)
                    move_one(r3, g3, experts, row, l3, k - 1, blocks, top)
                    move_one(r4, g4, experts, row, l4, k - 1, blocks, top)
                    move_one(r5, g5, experts, row, l5, k - 1, blocks, top)
                    move_one(r6, g6, experts, row, l6, k - 1, blocks, top)
                    move_one(r7, g7, experts, row, l7, k - 1, blocks, top)
