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
from llvmlite import ir
from numba import njit, types, uint64
from numba.core import cgutils
from numba.extending import intrinsic

from moesim.policies.base import UNBOUND as policy  # the hooks of the policy a loop is bound to (``bind``)
from moesim.policies.base import Context, FastPath
from moesim.policies.belady import NEVER
from moesim.sim.engine import bind

LANES = 8  # layers served side by side
PACKED = 1 << 16  # bytes up to which a state array joins the loop's one block (``packed``)
PAGE = 4096
ABOVE_STACK = 768  # bytes from the probed stack address to the block's first (``packed``)


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
        scratch = np.zeros((3, LANES), np.int64)
        stack = stack_address(ctx.experts, ctx.seq_offsets, slots, reset, st, scratch, hits)
        st, scratch = packed(st, scratch, stack)
        run(ctx.experts, ctx.seq_offsets, slots, reset, st, scratch, hits)  # called as the probe was
        return hits[:ctx.num_layers]

    return hits_of


def packed(st, scratch: np.ndarray, stack: int) -> tuple:
    """``scratch`` and ``st``'s small arrays (up to ``PACKED`` bytes each) copied side by side into one
    block, in that order (the counters first), each at a 64-byte boundary, the block's first byte
    ``ABOVE_STACK`` bytes past ``stack``'s place in its page (``stack_address``), rounded up to 64; larger
    arrays (Belady's next uses) stay put.

    The loop stores to its state and counters on every access and, on the stack, reloads the arguments
    numba's call passed there (above the address its caller leaves) and spills values to its frame
    (below it). Addresses that agree in their low 12 bits can slow each other (a load waits for a store
    it only seems to depend on: 4K aliasing; which mechanism acts here was not measured), and the arrays'
    placement decided the speed: allocated apart, the same LFU run went at 96M or 165M
    accesses/s; packed into a page-aligned block, LFU, Belady and FIFO fell to half speed at some stack
    depths of their caller and not at others. ``ABOVE_STACK`` clears the arguments (some 700 bytes for
    these loops, counted from their signatures; the loop's call wrapper takes 96 bytes more stack than
    the probe's, from their assembly) and leaves the frame (about 450 bytes) clear of a block up to about
    2.7 KB (LFU's at 64 experts and 16 slots: 2.5 KB; at 160 experts and 40 slots it is 6 KB and cannot
    miss them all: the counters and the keys come first). Over 48 depths in 6 processes of LFU, Belady and
    FIFO each, 24 of the 864 ran below 3/4 of their policy's median with the page-aligned block, 50 with
    the block 256 bytes past the probed address (on the arguments), 5 with this (one process of Belady;
    docs/benchmarks.md, ``benchmarks/lanes_stack_depth.py``)."""
    small = [a for a in (scratch, *st) if isinstance(a, np.ndarray) and a.nbytes <= PACKED]
    starts = np.cumsum([0] + [-(-a.nbytes // 64) * 64 for a in small])
    block = np.zeros(int(starts[-1]) + 2 * PAGE, np.uint8)
    base = -block.ctypes.data % PAGE + ((stack + ABOVE_STACK) % PAGE + 63) // 64 * 64
    views = {}
    for a, at in zip(small, starts):
        view = block[base + at:base + at + a.nbytes].view(a.dtype).reshape(a.shape)
        view[...] = a
        views[id(a)] = view
    return type(st)(*(views.get(id(a), a) for a in st)), views[id(scratch)]


@intrinsic
def _frame_slot(typingctx):
    """The address of an 8-byte slot in the calling function's stack frame."""
    def codegen(context, builder, signature, args):
        slot = cgutils.alloca_once(builder, ir.IntType(64))
        builder.store(ir.Constant(ir.IntType(64), 0), slot)
        return builder.ptrtoint(slot, ir.IntType(64))
    return types.int64(), codegen


@njit(cache=True)
def stack_address(experts, seq_offsets, slots, reset, st, scratch, hits):
    """Where the stack is when the lanes' loop is called with these arguments from the same place: a
    slot in this function's frame, which numba's call wrapper (the same for the same argument types)
    puts where it will put the loop's."""
    return _frame_slot()


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
                                                   np.int64(experts[uint64(row), uint64(layer[lane]), uint64(j)]),
                                                   (row * n_layers + layer[lane]) * k + j, end)
        for lane in range(LANES):
            hits[g + lane] = count[lane]
