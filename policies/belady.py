"""belady: offline optimal (Belady 1966, MIN) — evict the resident expert whose next use is furthest.

Every object's access positions are listed once, in order (one forward pass, O(accesses)); the next
use after clock ``t`` is found by advancing a per-object pointer, amortised O(1) because the clock
only grows. Asking "after t" rather than "after this access" serves prefetches too: an expert loaded
early is judged by the access it was fetched for. Under ``step`` semantics the victim is never in the
current request set. With a per-sequence reset, a use in a later sequence does not count (the cache
will have been emptied by then). Experts never used again tie at +infinity and the lowest slot goes
first; which one goes does not change the miss count.
"""

import numpy as np
from numba import njit

from moesim.policies.base import min_key_slot, no_access, no_miss
from moesim.sim.engine import hooks

NAME = "belady"
NEVER = np.iinfo(np.int64).max


@njit(cache=True)
def uses(experts, num_experts):
    """Access positions grouped by object: ``positions[offsets[o]:offsets[o + 1]]`` ascending.

    Position of ``experts[row, layer, j]`` is ``(row * L + layer) * W + j``; -1 entries are skipped.
    """
    n_rows, n_layers, width = experts.shape
    offsets = np.zeros(n_layers * num_experts + 1, np.int64)
    for row in range(n_rows):
        for layer in range(n_layers):
            for j in range(width):
                if experts[row, layer, j] >= 0:
                    offsets[layer * num_experts + experts[row, layer, j] + 1] += 1
    for o in range(offsets.shape[0] - 1):
        offsets[o + 1] += offsets[o]
    fill = offsets[:-1].copy()
    positions = np.empty(offsets[-1], np.int64)
    for row in range(n_rows):
        for layer in range(n_layers):
            for j in range(width):
                e = experts[row, layer, j]
                if e >= 0:
                    obj = layer * num_experts + e
                    positions[fill[obj]] = (row * n_layers + layer) * width + j
                    fill[obj] += 1
    return positions, offsets


def make_state(ctx):
    positions, offsets = uses(ctx.experts, ctx.num_experts)
    n_layers, width = ctx.experts.shape[1], ctx.experts.shape[2]
    # the first position after each row's sequence: uses from there on do not count with a reset
    seq_end = np.full(ctx.experts.shape[0], NEVER, np.int64)
    if ctx.reset_each_seq:
        lengths = np.diff(ctx.seq_offsets)
        seq_end[:] = np.repeat(ctx.seq_offsets[1:] * n_layers * width, lengths)
    # uses by object, where each object's pointer stands, minus the next use per object (the key),
    # the row-end table and [the current row's limit]
    return (positions, offsets, offsets[:-1].copy(), np.zeros(ctx.num_objects, np.float64), seq_end,
            np.array([NEVER], np.int64))


@njit(cache=True)
def reset(st):
    st[3][:] = 0.0


@njit(cache=True)
def on_step(st, part, layer, row, ranked, t):
    st[5][0] = st[4][row]


@njit(cache=True)
def on_access(st, part, slot, obj, t):
    positions, offsets, ptr, key, limit = st[0], st[1], st[2], st[3], st[5][0]
    p, end = ptr[obj], offsets[obj + 1]
    while p < end and positions[p] <= t:
        p += 1
    ptr[obj] = p
    nxt = positions[p] if p < end else NEVER
    # the smallest key is evicted, so the key is minus the next use
    key[obj] = -float(nxt if nxt < limit else NEVER)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return min_key_slot(st[3], st[3], lo, hi, obj_of, mark, stamp)


HOOKS = hooks(reset=reset, on_step=on_step, on_hit=on_access, on_miss=no_miss,
              choose_victim=choose_victim, on_evict=no_access, on_insert=on_access)
