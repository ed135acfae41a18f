"""gamma-admit: evict the lowest decayed request count (MELINOE's eq. 8), every miss admitted.

Counts follow eq. 8 of MELINOE's Definition C.1 (lazy decay per token, ties to the expert served more recently), and a
missed expert is always cached, in the place of the resident with the lowest decayed count outside the request set.
It is the eviction half of the γ-cache: ``gamma`` is this policy with the γ admission in front of it
(``moesim.policies.admission``), which keeps a miss only when its count reaches the Top-C. Counts are updated as
experts are served (hits first, then misses), so under ``sequential`` semantics an expert later in R is not yet
counted when an earlier one misses. γ = 0 is exactly LRU; γ = 1 is LFU with counts that survive eviction, always
admitting. A prefetch or preload is no request: it leaves the counts alone, and the prefetched expert is judged by its
count from then on. Parameter ``gamma`` (default 0.9, the paper's value).
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from moesim.params import Param
from moesim.policies.base import PolicySpec, hooks, min_key_slot

# control words: experts per layer, service clock, current row, sequential?, step stamp
C_E, C_CLOCK, C_ROW, C_SEQ, C_STAMP = range(5)
GAMMA = Param(0.9, "number", "Decay of the gamma policies (MELINOE's γ of eq. 8).", bounds=(0.0, 1.0))


def decay_table(params: dict, rows: int) -> np.ndarray:
    """γ^d for every gap d = 0..rows the run can have (the lazy decay's table)."""
    return np.power(float(params["gamma"]), np.arange(rows + 1, dtype=np.float64))


class Counts(NamedTuple):
    """Decayed counts (this policy's whole state, and the γ admission's counts)."""

    count: np.ndarray     # float64 [objects]: the count at its last update
    last_row: np.ndarray  # int64 [objects]: the row of that update
    served: np.ndarray    # float64 [objects]: the service clock of its last request (-1: never)
    scores: np.ndarray    # float64 [objects]: scratch: decayed counts now
    decay: np.ndarray     # float64 [rows + 1]: γ^d for every gap d the trace can have
    ctl: np.ndarray       # int64 [5]: the control words C_*


def make_counts(ctx) -> Counts:
    n = ctx.num_objects
    ctl = np.array([ctx.num_experts, 0, 0, int(ctx.sequential), 0], np.int64)
    return Counts(np.zeros(n), np.zeros(n, np.int64), np.full(n, -1.0), np.zeros(n),
                  decay_table(ctx.params, ctx.num_rows), ctl)


@njit(cache=True, inline="always")
def clear_counts(c):
    c.count[:] = 0.0
    c.last_row[:] = 0
    c.served[:] = -1.0
    c.ctl[C_CLOCK] = 0


@njit(cache=True, inline="always")
def count_request(c, obj):
    """eq. 8 for one requested expert: decay its count to the current row, add 1, stamp the clock."""
    ctl = c.ctl
    row = ctl[C_ROW]
    c.count[obj] = c.count[obj] * c.decay[row - c.last_row[obj]] + 1.0
    c.last_row[obj] = row
    ctl[C_CLOCK] += 1
    c.served[obj] = ctl[C_CLOCK]


@njit(cache=True, inline="always")
def score(c, obj):
    """The decayed count now."""
    return c.count[obj] * c.decay[c.ctl[C_ROW] - c.last_row[obj]]


@njit(cache=True, inline="always")
def lowest_resident(c, lo, hi, obj_of, mark, stamp):
    """The slot of the lowest-ranked resident outside the protected set."""
    for slot in range(lo, hi):
        o = obj_of[slot]
        c.scores[o] = score(c, o)
    return min_key_slot(c.scores, c.served, lo, hi, obj_of, mark, stamp)


@njit(cache=True)
def reset(st):
    clear_counts(st)


@njit(cache=True)
def on_step(st, part, layer, row, ranked, t):
    st.ctl[C_ROW] = row


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    count_request(st, obj)


@njit(cache=True)
def on_miss(st, part, obj, t):
    count_request(st, obj)
    return True


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return lowest_resident(st, lo, hi, obj_of, mark, stamp)


SPEC = PolicySpec("gamma-admit", make_counts,
                  hooks(reset=reset, on_step=on_step, on_hit=on_hit, on_miss=on_miss, choose_victim=choose_victim),
                  params={"gamma": GAMMA})
