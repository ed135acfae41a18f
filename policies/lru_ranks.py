"""LRU with a cache per layer under sequential semantics, as recency ranks: the fast path behind
``moesim.sim.hitrate.simulate`` (LRU's ``FAST_PATHS``) and ``moesim.sim.mrc.curve`` (its ``STACK``) for
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
that wait: eight beat four, docs/benchmarks.md); the ranks are padded to whole blocks of ``BLOCK`` (padding is never used and never moves), so every
update is whole vectors. The hit-rate engine's linked list takes a branch per access whose outcome
is a coin toss at these hit rates; this takes none.
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


@njit(cache=True, inline="always")
def move_down(ranks, d, e, blocks):
    """An access at rank ``d`` to expert ``e``: the ranks below ``d`` move down one, ``e`` goes to 0. (A
    loop bound that is a whole number of blocks keeps it in vectors: with the width as the bound LLVM
    leaves the update scalar.)"""
    for b in range(0, blocks * BLOCK, BLOCK):
        for i in range(BLOCK):
            ranks[b + i] += ranks[b + i] < d
    ranks[e] = 0


@njit(cache=True, nogil=True)
def _ranks(experts, seq_offsets, ranks, hist, num_experts, reset):
    """For each group of ``LANES`` layers (the last one's extra lanes repeat the last layer into ranks
    and counts of their own, discarded), every access in trace order: count its rank d in ``hist[layer,
    d]`` (first uses at column E), move the ranks below it down one, put it at 0. The eight lanes are
    written out so that their independent updates sit side by side in one loop body."""
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
                for j in range(k):
                    e0, e1, e2, e3 = (uint64(experts[row, l0, j]), uint64(experts[row, l1, j]),
                                      uint64(experts[row, l2, j]), uint64(experts[row, l3, j]))
                    e4, e5, e6, e7 = (uint64(experts[row, l4, j]), uint64(experts[row, l5, j]),
                                      uint64(experts[row, l6, j]), uint64(experts[row, l7, j]))
                    d0, d1, d2, d3, d4, d5, d6, d7 = r0[e0], r1[e1], r2[e2], r3[e3], r4[e4], r5[e5], r6[e6], r7[e7]
                    g0[min(uint64(d0), top)] += 1
                    g1[min(uint64(d1), top)] += 1
                    g2[min(uint64(d2), top)] += 1
                    g3[min(uint64(d3), top)] += 1
                    g4[min(uint64(d4), top)] += 1
                    g5[min(uint64(d5), top)] += 1
                    g6[min(uint64(d6), top)] += 1
                    g7[min(uint64(d7), top)] += 1
                    move_down(r0, d0, e0, blocks)
                    move_down(r1, d1, e1, blocks)
                    move_down(r2, d2, e2, blocks)
                    move_down(r3, d3, e3, blocks)
                    move_down(r4, d4, e4, blocks)
                    move_down(r5, d5, e5, blocks)
                    move_down(r6, d6, e6, blocks)
                    move_down(r7, d7, e7, blocks)
