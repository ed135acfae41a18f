"""gamma-admit: the γ-cache's decayed counts with every miss admitted — evict the lowest count.

Counts follow eq. 8 of MELINOE's Definition C.1 exactly as ``gamma`` keeps them (lazy decay per
token, ties to the expert served more recently), but a missed expert is always cached, in the
place of the resident with the lowest decayed count outside the request set, instead of being
kept only when it reaches the Top-C. It is the cache a decayed-frequency eviction policy gives,
and it differs from Definition C.1 whenever a miss's count is below every resident's: there the
definition serves the expert without keeping it. Counts are updated as experts are served (hits
first, then misses), so under ``sequential`` semantics an expert later in R is not yet counted when
an earlier one misses. γ = 0 is exactly LRU; γ = 1 is LFU with counts that survive eviction,
always admitting. A prefetch or preload is no request (prefetch rule, as in ``gamma``).
"""

from numba import njit

from moesim.policies.base import PolicySpec, hooks
from moesim.policies import gamma
from moesim.policies.gamma import C_ROW, Counts, clear_counts, count_request, lowest_resident, make_counts


def make_state(ctx) -> Counts:
    return make_counts(ctx)


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


SPEC = PolicySpec("gamma-admit", make_state,
                  hooks(reset=reset, on_step=on_step, on_hit=on_hit, on_miss=on_miss, choose_victim=choose_victim),
                  params={"gamma": gamma.GAMMA})
