"""belady: offline optimal (Belady 1966, MIN) — evict the resident expert whose next use is furthest.

The next use of every access is precomputed in one backward pass, O(accesses). Under ``step``
semantics the victim is never in the current request set. With a per-sequence reset, a use in a
later sequence does not count (the cache will have been emptied by then). Experts never used again
tie at +infinity and the lowest slot goes first; which one goes does not change the miss count.
"""

import numpy as np
from numba import njit

from moesim.policies.base import min_key_slot, no_access, no_miss, no_step
from moesim.sim.engine import compile_engine

NAME = "belady"
NEVER = np.iinfo(np.int64).max


@njit(cache=True)
def next_use(experts, seq_offsets, num_experts, per_sequence):
    """For every access position (row * L + layer) * k + j, the position of the object's next access.

    ``NEVER`` where there is none (within the sequence when ``per_sequence``).
    """
    n_rows, n_layers, k = experts.shape
    out = np.empty(n_rows * n_layers * k, np.int64)
    last = np.full(n_layers * num_experts, NEVER, np.int64)
    s = seq_offsets.shape[0] - 2
    for row in range(n_rows - 1, -1, -1):
        if per_sequence and row < seq_offsets[s]:
            last[:] = NEVER
            s -= 1
        for layer in range(n_layers - 1, -1, -1):
            for j in range(k - 1, -1, -1):
                pos = (row * n_layers + layer) * k + j
                obj = layer * num_experts + experts[row, layer, j]
                out[pos] = last[obj]
                last[obj] = pos
    return out


def make_state(ctx):
    nxt = next_use(ctx.experts, ctx.seq_offsets, ctx.num_experts, ctx.reset_each_seq)
    return (nxt, np.zeros(ctx.num_objects, np.float64))


@njit(cache=True)
def reset(st):
    st[1][:] = 0.0


@njit(cache=True)
def on_access(st, part, slot, obj, t):
    # the smallest key is evicted, so the key is minus the next use
    st[1][obj] = -float(st[0][t])


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return min_key_slot(st[1], st[1], lo, hi, obj_of, mark, stamp)


simulate = compile_engine(__name__, reset=reset, on_step=no_step, on_hit=on_access, on_miss=no_miss,
                          choose_victim=choose_victim, on_evict=no_access, on_insert=on_access)
