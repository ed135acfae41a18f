"""Caches per layer under sequential semantics, eight layers at a time and without a branch: the fast
path behind ``moesim.sim.hitrate.simulate`` for a policy that declares ``LANE_HOOKS`` (FIFO, LFU,
Belady; LRU has its own, ``moesim.sim.lru_ranks``).

Layers of a per-layer cache never interact, so ``LANES`` of them run side by side: one loop body
serves the same access (row, rank j) in each, and their updates overlap in the CPU instead of waiting
on each other. The policy's ``lane_access`` serves one access of one lane without a branch on hit or
miss (whether an access hits is a coin toss at the hit rates of interest, and the engine's branch on
it mispredicts about half the time): it computes what a miss would evict and keeps it or not by
arithmetic. The hits are the engine's, access for access (tests/test_lanes.py); no evictions are
logged, so a run that asks for them takes the engine. So does a cache of more than ``FULLEST`` of a
layer's experts: there nearly every access hits, the engine's branch is predicted, and the engine is
the faster (on the benchmark's trace of 64 experts the lanes led at 48 slots and trailed at 56,
FIFO, LFU and Belady alike: README, "Benchmarks").

A policy module opts in with

- ``make_lanes(ctx, lanes) -> tuple | None``: state for ``lanes`` layers at once (arrays with a first
  axis of ``lanes``), or None where the trace is too long for its packed keys (the engine runs it);
- ``LANE_HOOKS = {"lane_reset": f(st, lane, cap), "lane_access": f(st, lane, cap, expert, pos, end)
  -> 1 on a hit, else 0}``, where ``pos`` is the access's clock ``(row * L + layer) * k + j`` (the
  engine's ``t``) and ``end`` the first position the cache will not live to see (the next sequence's,
  with a reset; else ``NEVER``).
"""

from __future__ import annotations

import time

import numpy as np

from moesim.policies.base import Context
from moesim.policies.belady import NEVER
from moesim.sim.engine import bind

LANES = 8  # layers served side by side
FULLEST = 0.75  # the largest share of a layer's experts a lane cache holds (more: the engine)
PACKED = 1 << 16  # bytes up to which a state array joins the loop's one block (``packed``)


def lane_hits(module, trace, slots: np.ndarray, reset: bool, params: dict) -> tuple[np.ndarray, float] | None:
    """Hits per layer of ``module``'s policy with ``slots[layer]`` slots each, and the seconds the run
    took (its state's set-up included, as the engine's timing includes ``make_state``); None where the
    policy has no lane path for this trace or these slots."""
    if not hasattr(module, "LANE_HOOKS") or slots.max() > FULLEST * trace.meta.num_experts:
        return None

    def context(experts, offsets):
        return Context(experts, offsets, trace.meta.num_experts, slots, True, True, reset, params)

    ctx = context(np.ascontiguousarray(trace.experts, np.int16), trace.seq_offsets.astype(np.int64))
    run = bind(module, _lanes_loop, hooks="LANE_HOOKS")
    warm = context(ctx.experts[:1], np.array([0, 1], np.int64))  # compiles (or loads) it on one row
    hits = np.zeros(-(-ctx.num_layers // LANES) * LANES, np.int64)
    scratch = np.zeros((3, LANES), np.int64)
    st = module.make_lanes(warm, LANES)
    if st is None:
        return None
    run(warm.experts, warm.seq_offsets, slots, reset, *packed(st, scratch), hits)
    start = time.perf_counter()
    st = module.make_lanes(ctx, LANES)
    if st is None:
        return None
    run(ctx.experts, ctx.seq_offsets, slots, reset, *packed(st, scratch), hits)
    return hits[:ctx.num_layers], time.perf_counter() - start


def packed(st: tuple, scratch: np.ndarray) -> tuple:
    """``st``'s small arrays (up to ``PACKED`` bytes each) and ``scratch`` copied side by side into one
    page-aligned block, each at a 64-byte boundary; larger arrays (Belady's next uses) stay put.

    A load whose address matches an earlier store's in its low 12 bits waits for that store as if
    they were the same (4K aliasing). The loop stores to its state and counters on every access, so
    where separately allocated arrays happen to sit decided it: the same LFU run went at 96M or 165M
    accesses/s by the arrays' placement alone. In one block the layout is fixed, and a block that fits
    in a page has no two addresses 4096 bytes apart."""
    small = [a for a in (*st, scratch) if isinstance(a, np.ndarray) and a.nbytes <= PACKED]
    starts = np.cumsum([0] + [-(-a.nbytes // 64) * 64 for a in small])
    block = np.zeros(int(starts[-1]) + 4096, np.uint8)
    base = -block.ctypes.data % 4096
    views = {}
    for a, at in zip(small, starts):
        view = block[base + at:base + at + a.nbytes].view(a.dtype).reshape(a.shape)
        view[...] = a
        views[id(a)] = view
    return tuple(views.get(id(a), a) for a in st), views[id(scratch)]


def _lanes_loop(experts, seq_offsets, slots, reset, st, scratch, hits):
    """Every access in trace order, ``LANES`` layers at a time (the last group's extra lanes repeat the
    last layer and are discarded): ``lane_access`` serves it and says whether it hit."""
    n_layers, k = experts.shape[1], experts.shape[2]
    layer, cap, count = scratch[0], scratch[1], scratch[2]
    for g in range(0, hits.shape[0], LANES):
        for lane in range(LANES):
            layer[lane] = min(g + lane, n_layers - 1)
            cap[lane] = slots[layer[lane]]
            count[lane] = 0
        for s in range(seq_offsets.shape[0] - 1):
            if reset or s == 0:
                for lane in range(LANES):
                    lane_reset(st, lane, cap[lane])  # noqa: F821 (the policy's, bound by ``bind``)
            end = seq_offsets[s + 1] * n_layers * k if reset else NEVER
            for row in range(seq_offsets[s], seq_offsets[s + 1]):
                for j in range(k):
                    for lane in range(LANES):
                        count[lane] += lane_access(st, lane, cap[lane],  # noqa: F821
                                                   np.int64(experts[row, layer[lane], j]),
                                                   (row * n_layers + layer[lane]) * k + j, end)
        for lane in range(LANES):
            hits[g + lane] = count[lane]
