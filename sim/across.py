"""Caches per layer under sequential semantics with each SIMD lane a layer: the driver of a policy's
``FastPath`` of kind ``"across"`` (``moesim.sim.hitrate.simulate``; ARC's and LeCaR's).

``moesim.sim.lanes`` serves one layer per loop body and lets the CPU overlap eight of them; that
leaves a policy whose access is long and serial (ARC's four lists, LeCaR's two experts and their
histories) near the engine's speed. Here ``LANES`` layers take the same access (row, rank j)
together and the policy's loops run over the lanes, so LLVM compiles each to vector instructions:
one instruction serves all sixteen layers where the CPU has AVX-512 (``prefer_wide_vectors``),
eight otherwise. A row of the trace is copied (rank, layer)-major as the row before it starts, so
that the lanes' experts are one contiguous load. The slot loops inside are
unrolled at compile time: the policy's code sees ``LANES`` and ``WIDTH`` (slots per lane, the largest
capacity rounded up to a multiple of eight) as constants, one compilation per width.

Past the slots the policy's passes serve (the path's ``widest``; ``make`` says None too) the policy's next fast
path runs it (ARC's lists, LeCaR's keyed slots, a layer at a time), and past the path's ``fullest`` share of a
layer's experts in lanes wider than eight slots (``crowded``): nearly every access hits there, a branch on a hit
is predicted, and a path that takes one is faster. Eight-slot lanes are not overtaken even when full
(docs/benchmarks.md gives the crossovers).

The hits are the engine's, access for access (tests/test_lanes.py); no evictions are logged, so a
run that asks for them takes the engine.

The path's ``make(ctx, layers, width) -> (block, p, hits) | None`` builds the state of the lanes
``layers`` (int32 block, the policy's other state: an array or a tuple of arrays, a view of the
block's hit counters), None where the trace is too long for its keys or ``width`` wider than its
passes serve; its ``hooks`` are ``across_reset(window, row, block, p)``, which empties every lane before
access (row, 0), and ``across_step(window, row, j, g, n_layers, total, block, p)``, which serves access
(row, j), lane ``li`` being layer ``g + li`` and ``total`` the run's length (the clock's end).
``window[r % 2, j, li]`` is the expert of access (r, j) in lane ``li``, for the row and the next.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from moesim.policies.base import UNBOUND as policy  # the hooks of the policy a loop is bound to (``bind``)
from moesim.policies.base import Context, FastPath, prefer_wide_vectors
from moesim.sim.engine import bind

LANES = 16  # layers served together: one int32 vector with AVX-512, two without (eight: LLVM leaves them scalar)
STEP = 8  # slot widths are multiples of this


def across_runner(path: FastPath, name: str, num_experts: int, slots: np.ndarray, reset: bool, params: dict):
    """A function of (experts, seq_offsets) giving hits per layer of the policy ``name`` with ``slots[layer]``
    slots each, the copies of the rows and the state's set-up included, or None where the policy's state
    does not fit this trace."""
    width = -(-int(slots.max()) // STEP) * STEP
    run = bind(_across_loop, name, path.hooks, constants={"LANES": LANES, "WIDTH": width})

    def hits_of(experts, seq_offsets):
        ctx = Context(experts, seq_offsets, num_experts, slots, True, True, reset, params)
        n_layers = ctx.num_layers
        hits = np.zeros(-(-n_layers // LANES) * LANES, np.int64)
        window = np.zeros((2, ctx.top_k, LANES), np.int16)
        for g in range(0, hits.shape[0], LANES):  # the last group's extra lanes repeat the last layer
            state = path.make(ctx, np.minimum(np.arange(g, g + LANES), n_layers - 1), width)
            if state is None:
                return None
            block, p, counts = state
            run(ctx.experts, ctx.seq_offsets, reset, g, window, block, p)
            hits[g:g + LANES] = counts
        return hits[:n_layers]

    return hits_of


def _across_loop(experts, seq_offsets, reset, g, window, block, p):
    """Every access in trace order, in the lanes of group ``g``. Row r's experts of the group's layers
    are copied to ``window[r % 2]`` (rank-major) as row r - 1 begins, so that a step reads the next
    access's expert, one row ahead, as a contiguous vector."""
    prefer_wide_vectors()
    n_rows, n_layers, k = experts.shape
    total = experts.size
    fresh = True
    for s in range(seq_offsets.shape[0] - 1):
        for row in range(seq_offsets[s], seq_offsets[s + 1]):
            if fresh:
                _window_row(experts, row, g, window)
            if row + 1 < n_rows:
                _window_row(experts, row + 1, g, window)
            if reset and row == seq_offsets[s] or fresh:
                policy.across_reset(window, row, block, p)
                fresh = False
            for j in range(k):
                policy.across_step(window, row, j, g, n_layers, total, block, p)


@njit(cache=True, inline="always")
def _window_row(experts, row, g, window):
    """Copy row ``row``'s experts of the group's layers into ``window[row % 2]``."""
    n_layers = experts.shape[1]
    for j in range(experts.shape[2]):
        for li in range(window.shape[2]):
            window[row % 2, j, li] = experts[row, min(g + li, n_layers - 1), j]
