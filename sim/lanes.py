"""Caches per layer under sequential semantics, eight layers at a time and without a branch: the
driver of a policy's ``FastPath`` of kind ``"lanes"`` (``moesim.sim.hitrate.simulate``).

Layers of a per-layer cache never interact, so ``LANES`` of them run side by side: one loop body
serves the same access (row, rank j) in each, and their updates overlap in the CPU instead of waiting
on each other. The policy's ``lane_access`` serves one access of one lane without a branch on hit or
miss (whether an access hits is a coin toss at the hit rates of interest, and the engine's branch on
it mispredicts about half the time): it computes what a miss would evict and keeps it or not by
arithmetic. The hits are the engine's, access for access (tests/test_lanes.py); no evictions are
logged, so a run that asks for them takes the engine. So does a cache of more than the path's
``fullest`` share of a layer's experts: there nearly every access hits, the engine's branch is
predicted, and the engine is the faster (docs/benchmarks.md, gives the crossover).

The path's ``make(ctx, lanes) -> NamedTuple | None`` builds the state of ``lanes`` layers at once (arrays
with a first axis of ``lanes``), or None where the trace is too long for its packed keys (the engine runs
it); its ``hooks`` are ``lane_reset(st, lane, cap)`` and ``lane_access(st, lane, cap, expert, pos, end) ->
1 on a hit, else 0``, where ``pos`` is the access's clock ``(row * L + layer) * k + j`` (the engine's
``t``) and ``end`` the first position the cache will not live to see (the next sequence's, with a
reset; else ``NEVER``).
"""

from __future__ import annotations

import numpy as np

from moesim.policies.base import UNBOUND as policy  # the hooks of the policy a loop is bound to (``bind``)
from moesim.policies.base import Context, FastPath
from moesim.policies.belady import NEVER
from moesim.sim.engine import bind

LANES = 8  # layers served side by side
PACKED = 1 << 16  # bytes up to which a state array joins the loop's one block (``packed``)


def lane_runner(path: FastPath, name: str, num_experts: int, slots: np.ndarray, reset: bool, params: dict):
    """A function of (experts, seq_offsets) giving hits per layer of the policy ``name`` with ``slots[layer]``
    slots each, its state's set-up included (as the engine's includes ``make_state``), or None where the
    policy's state does not fit this trace."""
    run = bind(_lanes_loop, name, path.hooks)

    def hits_of(experts, seq_offsets):
        ctx = Context(experts, seq_offsets, num_experts, slots, True, True, reset, params)
        st = path.make(ctx, LANES)
        if st is None:
            return None
        hits = np.zeros(-(-ctx.num_layers // LANES) * LANES, np.int64)
        run(ctx.experts, ctx.seq_offsets, slots, reset, *packed(st, np.zeros((3, LANES), np.int64)), hits)
        return hits[:ctx.num_layers]

    return hits_of


def packed(st, scratch: np.ndarray) -> tuple:
    """``st``'s small arrays (up to ``PACKED`` bytes each) and ``scratch`` copied side by side into one
    page-aligned block, each at a 64-byte boundary; larger arrays (Belady's next uses) stay put.

    A load whose address matches an earlier store's in its low 12 bits waits for that store as if they were
    the same (4K aliasing). The loop stores to its state and counters on every access, so where
    separately allocated arrays happen to sit decided it: the same LFU run's speed changed severalfold
    by the arrays' placement alone (docs/benchmarks.md). In one block the layout is fixed, and a block
    that fits in a page has no two addresses 4096 bytes apart."""
    small = [a for a in (*st, scratch) if isinstance(a, np.ndarray) and a.nbytes <= PACKED]
    starts = np.cumsum([0] + [-(-a.nbytes // 64) * 64 for a in small])
    block = np.zeros(int(starts[-1]) + 4096, np.uint8)
    base = -block.ctypes.data % 4096
    views = {}
    for a, at in zip(small, starts):
        view = block[base + at:base + at + a.nbytes].view(a.dtype).reshape(a.shape)
        view[...] = a
        views[id(a)] = view
    return type(st)(*(views.get(id(a), a) for a in st)), views[id(scratch)]


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
                    policy.lane_reset(st, lane, cap[lane])
            end = seq_offsets[s + 1] * n_layers * k if reset else NEVER
            for row in range(seq_offsets[s], seq_offsets[s + 1]):
                for j in range(k):
                    for lane in range(LANES):
                        count[lane] += policy.lane_access(st, lane, cap[lane],
                                                   np.int64(experts[row, layer[lane], j]),
                                                   (row * n_layers + layer[lane]) * k + j, end)
        for lane in range(LANES):
            hits[g + lane] = count[lane]
