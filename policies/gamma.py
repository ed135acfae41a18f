"""gamma: MELINOE's γ-cache (Definition C.1, eq. 8–9) — the cache is the Top-C of decayed request counts.

At every token t and layer ℓ, Count ← γ·Count + r, where r is the 0/1 vector of the experts
requested, and the cache holds Top-C(Count). A requested expert whose count does not reach the
Top-C is served from the slow tier and not kept (a bypass). As the paper notes (Remark C.2), the
Top-C changes only by admitting requested experts, so the cache is updated lazily: a miss either
takes the place of the resident with the lowest count or is bypassed.

Choices the definition leaves open, and where this differs:

- **Initialisation.** Counts start at 0 and the cache empty (the paper's fill phase, not its
  uniform Count¹ of mass C, whose Top-C would be C experts cached without ever being loaded): an
  expert's first request is a cold miss, and experts never requested are never resident.
- **Ties** in the decayed count go to the expert served more recently (a clock that ticks per
  served request: under ``step`` semantics a step's hits in rank order, then its misses). Hence
  γ = 0 is exactly LRU and γ = 1 perfect LFU (counts that survive eviction) with bypass, the two
  limits Remark C.2 states; a small γ > 0 differs from LRU only in ordering the experts of one
  token by their earlier requests rather than by service order.
- **Step semantics.** The k requests of a token arrive together (the count update is eq. 8 as
  written) and the members of R that hit stay for the step (DESIGN.md: a victim is never in R);
  the cache after the step is those hits plus the Top-(C − hits) of the missed members and the
  other residents. That is Top-C(Count) except when a hit and a miss of the same step tie exactly
  in count at the boundary. ``sequential`` serves R one expert at a time: each request updates its
  count and is admitted if it outranks the lowest resident.
- **Batches** (the discrete-event engine) count the union of the batch's requests once per step.
- **Global scope** keeps the count per (layer, expert), decayed once per token; the pool is the Top-C.
- **Decay** is lazy: an expert last counted at token τ has count c·γ^(t−τ), with γ^d tabulated.

Its admission (``ADMISSION``: which misses the Top-C keeps) also serves in front of any other policy
(``admission = "gamma"``, ``moesim.policies.admission``); composed with ``gamma-admit``'s eviction of the lowest
decayed count it gives this cache hit for hit (tests/test_reference.py), at the cost of counting every request twice,
which the policy's own victim, read from the admission's counts, saves.

Prefetch rule: a prefetch or preload is no request, so it leaves the counts alone; the prefetched
expert takes the place of the lowest-count resident outside the protected set and is judged by its
count from then on. Parameter ``gamma`` (default 0.9, the paper's value).
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from moesim.policies import gamma_admit
from moesim.policies.admission import AdmissionSpec
from moesim.policies.base import (DECAYED_COUNT, Lists, PolicySpec, Stack, hooks, list_head, list_next, list_of,
                                  list_push_head, list_remove, list_size, lists_clear, make_lists)
from moesim.policies.gamma_admit import (C_E, C_ROW, C_SEQ, C_STAMP, Counts, clear_counts, count_request, decay_table,
                                         lowest_resident, make_counts, score)


# Definition C.1's cache under sequential semantics is the Top-C of an order that does not depend on C


class State(NamedTuple):
    counts: Counts
    residents: Lists      # per partition (order unused)
    admitted: np.ndarray  # int64 [objects]: the step stamp at which it was admitted
    requested: np.ndarray  # int64 [objects]: the step stamp at which it was requested
    slots: np.ndarray     # int64 [partitions]


def make_state(ctx) -> State:
    return State(make_counts(ctx), make_lists(ctx.num_objects, ctx.num_parts, 1),
                 np.full(ctx.num_objects, -1, np.int64), np.full(ctx.num_objects, -1, np.int64), ctx.slots)


@njit(cache=True, inline="always")
def outranks(c, a, b):
    """Whether expert a ranks above b by the scores in ``c.scores``: a higher count, or an equal one
    served more recently."""
    scores, served = c.scores, c.served
    return scores[a] > scores[b] or (scores[a] == scores[b] and served[a] > served[b])


@njit(cache=True)
def reset(st):
    clear_counts(st.counts)
    lists_clear(st.residents)


@njit(cache=True)
def on_step(st, part, layer, row, ranked, t):
    """Under ``step`` semantics: count R (hits first, as they are served), then decide which misses
    the Top-C admits: a miss is kept iff fewer than C − |hits| of the other misses and of the
    residents outside R outrank it."""
    c, residents, admitted, requested = st.counts, st.residents, st.admitted, st.requested
    ctl, scores = c.ctl, c.scores
    ctl[C_ROW] = row
    if ctl[C_SEQ]:
        return
    ctl[C_STAMP] += 1
    now = ctl[C_STAMP]
    hits = misses = 0
    for hit_pass in (True, False):
        for j in range(ranked.shape[0]):
            obj = layer * ctl[C_E] + ranked[j]
            if ranked[j] >= 0 and (list_of(residents, obj) >= 0) == hit_pass:
                count_request(c, obj)
                requested[obj] = now
                scores[obj] = c.count[obj]
                if hit_pass:
                    hits += 1
                else:
                    misses += 1
    room = st.slots[part] - hits
    everyone = misses + list_size(residents, part, 0) - hits <= room  # all of them fit: no ranking
    o = list_head(residents, part, 0)
    while o >= 0 and not everyone:
        scores[o] = score(c, o)
        o = list_next(residents, o)
    for j in range(ranked.shape[0]):
        e = layer * ctl[C_E] + ranked[j]
        if ranked[j] < 0 or list_of(residents, e) >= 0:
            continue
        above = 0
        for i in range(ranked.shape[0]):
            o = layer * ctl[C_E] + ranked[i]
            if not everyone and ranked[i] >= 0 and o != e and list_of(residents, o) < 0 and outranks(c, o, e):
                above += 1
        o = list_head(residents, part, 0)
        while o >= 0 and above < room and not everyone:
            if requested[o] != now and outranks(c, o, e):
                above += 1
            o = list_next(residents, o)
        if above < room:
            admitted[e] = now


@njit(cache=True)
def on_hit(st, part, slot, obj, t):
    if st.counts.ctl[C_SEQ]:
        count_request(st.counts, obj)


@njit(cache=True)
def on_miss(st, part, obj, t):
    """Under ``sequential`` semantics: count the request; the cache keeps it iff it outranks some
    resident (or there is room)."""
    c, residents = st.counts, st.residents
    if not c.ctl[C_SEQ]:
        return st.admitted[obj] == c.ctl[C_STAMP]
    count_request(c, obj)
    if list_size(residents, part, 0) < st.slots[part]:
        return True
    c.scores[obj] = c.count[obj]
    o = list_head(residents, part, 0)
    while o >= 0:
        c.scores[o] = score(c, o)
        if outranks(c, obj, o):
            return True
        o = list_next(residents, o)
    return False


@njit(cache=True)
def on_evict(st, part, slot, obj, t):
    list_remove(st.residents, part, obj)


@njit(cache=True)
def on_insert(st, part, slot, obj, t):
    list_push_head(st.residents, part, 0, obj)


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    return lowest_resident(st.counts, lo, hi, obj_of, mark, stamp)


ADMISSION = AdmissionSpec("gamma", make_state, dict(reset=reset, on_step=on_step, on_hit=on_hit, on_miss=on_miss,
                                                     on_evict=on_evict, on_insert=on_insert),
                          params={"gamma": gamma_admit.GAMMA})
SPEC = PolicySpec("gamma", make_state, hooks(choose_victim=choose_victim, **ADMISSION.hooks), params=ADMISSION.params,
                  bypasses=True, stack=Stack(DECAYED_COUNT, ("sequential",), decay=decay_table))
