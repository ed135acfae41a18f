"""An independent reference for the engines: DESIGN.md's semantics and the papers' definitions in
plain, slow Python (lists, dicts, exact fractions), sharing no code with moesim.

``hitrate`` plays a trace as the hit-rate engine does and returns hits per layer and the evictions
as (clock, object). ``des_decisions`` plays the discrete-event engine's request rows, with its
preloads, next-cell prefetches and bypasses, and returns its decision log (row, layer, event,
object, slot). Objects are ``layer * E + expert``; slots are numbered ``partition * C + i`` and a
new object takes the lowest free slot or its victim's. Clocks: an access at (row, layer, rank j)
is ``(row * L + layer) * W + j``; a prefetch carries the last clock of the cell that issues it, a
preload the clock just before its row. A policy here is one object per partition with
``request(obj, t, hit)`` for every served request, ``admit(obj, t)`` for a miss, ``prefetch(obj)``
for a fill, ``victim(candidates, obj, t)`` over the unprotected residents in slot order (None: do
not cache ``obj``), ``evicted(obj)``, ``loaded(obj, t, fill)`` and ``step(objs, residents, row)``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from fractions import Fraction

import numpy as np

from moesim.sim.des_state import EV_HIT, EV_LOAD, EV_PREFETCH, EV_PRELOAD

# the decision log's events, in the engine's public vocabulary (the log they are compared with)
HIT, LOAD, PREFETCH, PRELOAD = EV_HIT, EV_LOAD, EV_PREFETCH, EV_PRELOAD


class Policy:
    def __init__(self, capacity, **_):
        self.c = capacity

    def step(self, objs, residents, row): pass
    def request(self, obj, t, hit): pass
    def admit(self, obj, t): return True
    def prefetch(self, obj): pass
    def evicted(self, obj): pass
    def loaded(self, obj, t, fill): pass


class LRU(Policy):
    """Least recently used; under step semantics a step's hits are served first, then its misses."""
    def __init__(self, capacity, **_):
        super().__init__(capacity)
        self.order = []  # least recent first
    def request(self, obj, t, hit):
        if hit:
            self.order.remove(obj)
            self.order.append(obj)
    def evicted(self, obj): self.order.remove(obj)
    def loaded(self, obj, t, fill): self.order.append(obj)
    def victim(self, cands, obj, t): return next(o for o in self.order if o in cands)


class FIFO(LRU):
    def request(self, obj, t, hit): pass


class LIFO(FIFO):
    def victim(self, cands, obj, t): return next(o for o in reversed(self.order) if o in cands)


class LFU(Policy):
    """Fewest accesses since loaded (a fill starts at 0), ties to the least recently served."""
    def __init__(self, capacity, **_):
        super().__init__(capacity)
        self.count, self.last, self.clock = {}, {}, 0
    def request(self, obj, t, hit):
        if hit:
            self.count[obj] += 1
            self.clock += 1
            self.last[obj] = self.clock
    def loaded(self, obj, t, fill):
        self.clock += 1
        self.count[obj], self.last[obj] = (0 if fill else 1), self.clock
    def victim(self, cands, obj, t): return min(cands, key=lambda o: (self.count[o], self.last[o]))


class ARC(Policy):
    """Megiddo & Modha's ARC (cases I-IV, REPLACE), walking past protected members; a fill is no
    request: no adaptation, into T1, and its first request keeps it in T1."""
    def __init__(self, capacity, **_):
        super().__init__(capacity)
        self.t1, self.t2, self.b1, self.b2 = [], [], [], []  # LRU end first
        self.p, self.case, self.ghost, self.fresh = 0.0, None, None, set()
    def request(self, obj, t, hit):
        if hit:
            (self.t1 if obj in self.t1 else self.t2).remove(obj)
            (self.t1 if obj in self.fresh else self.t2).append(obj)
            self.fresh.discard(obj)
    def admit(self, obj, t):
        self.case = None
        if obj in self.b1:
            self.p = min(self.p + max(len(self.b2) / len(self.b1), 1.0), self.c)
            self.b1.remove(obj)
            self.case = "B1"
        elif obj in self.b2:
            self.p = max(self.p - max(len(self.b1) / len(self.b2), 1.0), 0.0)
            self.b2.remove(obj)
            self.case = "B2"
        return True
    def prefetch(self, obj):
        for ghosts in (self.b1, self.b2):
            if obj in ghosts:
                ghosts.remove(obj)
        self.case = None
    def victim(self, cands, obj, t):
        old1 = next((o for o in self.t1 if o in cands), None)
        if self.case is None:  # case IV
            if len(self.t1) + len(self.b1) >= self.c:
                if len(self.t1) < self.c:
                    self.b1.pop(0)
                else:
                    self.ghost = None
                    return old1
            elif len(self.t1) + len(self.t2) + len(self.b1) + len(self.b2) >= 2 * self.c:
                self.b2.pop(0)
        old2 = next((o for o in self.t2 if o in cands), None)
        if old1 is not None and (len(self.t1) > self.p or (len(self.t1) == self.p and self.case == "B2")) \
                or old2 is None:
            self.ghost = self.b1
            return old1
        self.ghost = self.b2
        return old2
    def evicted(self, obj):
        (self.t1 if obj in self.t1 else self.t2).remove(obj)
        self.fresh.discard(obj)
        if self.ghost is not None:
            self.ghost.append(obj)
    def loaded(self, obj, t, fill):
        (self.t1 if self.case is None else self.t2).append(obj)
        self.case = None
        if fill:
            self.fresh.add(obj)


class LeCaR(Policy):
    """Vietri et al.'s LeCaR: evict LRU's victim with probability w_LRU, else LFU's (fewest accesses
    since loaded, then least recent), and file its id in that expert's history (C ids, oldest out);
    a miss on an id in a history multiplies the wrong expert's weight by e^(-0.45 d^t) (d = 0.005^(1/C),
    t accesses since that eviction) and normalises, w_LFU being 1 - w_LRU. Draws: SplitMix64 of the
    seed, partition p's stream started p * 2^40 draws in, one draw per eviction."""
    MASK = (1 << 64) - 1
    def __init__(self, capacity, part=0, seed=0, **_):
        super().__init__(capacity)
        self.recency, self.count, self.last, self.clock = [], {}, {}, 0  # recency: LRU end first
        self.touches = 0  # every request and load: of two fills at one clock the later is the more recent
        self.histories, self.evicted_at, self.w = ([], []), {}, 0.5  # H_LRU, H_LFU: oldest first
        self.position, self.history = (seed + part * (1 << 40) * 0x9E3779B97F4A7C15) & self.MASK, None
    def draw(self):
        self.position = (self.position + 0x9E3779B97F4A7C15) & self.MASK
        z = self.position
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.MASK
        return ((z ^ (z >> 31)) >> 11) / 2 ** 53
    def request(self, obj, t, hit):
        self.clock += 1
        self.recency.remove(obj)
        self.recency.append(obj)
        self.count[obj] += 1
        self.touches += 1
        self.last[obj] = (self.clock, self.touches)
    def admit(self, obj, t):
        self.clock += 1
        for wrong, history in enumerate(self.histories):
            if obj in history:
                penalty = math.exp(-0.45 * (0.005 ** (1.0 / self.c)) ** (self.clock - self.evicted_at[obj]))
                lru, lfu = self.w * (penalty if wrong == 0 else 1.0), (1.0 - self.w) * (penalty if wrong else 1.0)
                self.w = lru / (lru + lfu)
                history.remove(obj)
        return True
    def prefetch(self, obj):
        for history in self.histories:
            if obj in history:
                history.remove(obj)
    def victim(self, cands, obj, t):
        if self.draw() < self.w:
            self.history = self.histories[0]
            return next(o for o in self.recency if o in cands)
        self.history = self.histories[1]
        return min(cands, key=lambda o: (self.count[o], self.last[o]))
    def evicted(self, obj):
        self.recency.remove(obj)
        if len(self.history) >= self.c:
            self.history.pop(0)
        self.history.append(obj)
        self.evicted_at[obj] = self.clock
    def loaded(self, obj, t, fill):
        self.recency.append(obj)
        self.touches += 1
        self.count[obj], self.last[obj] = 0 if fill else 1, (self.clock, self.touches)


class Belady(Policy):
    """MIN: evict the resident whose next use is furthest (never again: the first in slot order);
    with a reset per sequence a use in a later sequence is no use."""
    def __init__(self, capacity, uses, seq_end, **_):
        super().__init__(capacity)
        self.uses, self.seq_end = uses, seq_end
        self.row = 0
    def step(self, objs, residents, row): self.row = row
    def next_use(self, obj, t):
        times = self.uses.get(obj, [])
        i = bisect_right(times, t)
        return times[i] if i < len(times) and times[i] < self.seq_end[self.row] else float("inf")
    def victim(self, cands, obj, t):
        return max(cands, key=lambda o: (self.next_use(o, t), -cands.index(o)))


class Gamma(Policy):
    """MELINOE Definition C.1: Count ← γ·Count + r every token (exact fractions), cache = Top-C(Count),
    ties to the later served; counts start at 0 with the cache empty; under step semantics the
    step's hits stay and the misses and the other residents compete for the remaining C − |hits|
    places. ``admit_all``: gamma-admit, which keeps every miss and evicts the lowest."""
    def __init__(self, capacity, gamma=0.9, sequential=False, admit_all=False, **_):
        super().__init__(capacity)
        self.gamma, self.sequential, self.admit_all = Fraction(gamma), sequential, admit_all
        self.count, self.served, self.clock, self.row, self.kept = {}, {}, 0, 0, set()
    def key(self, o): return self.count.get(o, 0), self.served.get(o, -1)
    def decay_to(self, row):
        for _ in range(row - self.row):
            self.count = {o: self.gamma * c for o, c in self.count.items()}
        self.row = row
    def count_request(self, obj):
        self.count[obj] = self.count.get(obj, 0) + 1
        self.clock += 1
        self.served[obj] = self.clock
    def step(self, objs, residents, row):
        self.decay_to(row)
        if self.sequential or self.admit_all:
            return
        hits = [o for o in objs if o in residents]
        misses = [o for o in objs if o not in residents]
        for o in hits + misses:
            self.count_request(o)
        others = [o for o in residents if o not in objs]
        ranked = sorted(misses + others, key=self.key, reverse=True)
        self.kept = set(ranked[:self.c - len(hits)])
    def request(self, obj, t, hit):
        if hit and (self.sequential or self.admit_all):
            self.count_request(obj)
    def admit(self, obj, t):
        if self.admit_all or self.sequential:
            self.count_request(obj)
            if self.admit_all:
                return True
            return sum(self.key(o) > self.key(obj) for o in self.residents) < self.c
        return obj in self.kept
    def victim(self, cands, obj, t): return min(cands, key=self.key)


class Admitted(Policy):
    """A policy behind an admission (libCacheSim's admissioner): both see every request, step, fill, load and
    eviction; a miss is kept iff both admit it (both are asked); the policy picks the victim. ``gate``: MELINOE's
    Top-C admission, ``Gamma`` without ``admit_all``, whose own victim is never asked."""
    def __init__(self, capacity, policy, gate):
        super().__init__(capacity)
        self.policy, self.gate = policy, gate
    @property
    def residents(self): return self.policy.residents
    @residents.setter
    def residents(self, value): self.policy.residents = self.gate.residents = value
    def step(self, objs, residents, row):
        self.gate.step(objs, residents, row)
        self.policy.step(objs, residents, row)
    def request(self, obj, t, hit):
        self.gate.request(obj, t, hit)
        self.policy.request(obj, t, hit)
    def admit(self, obj, t):
        admitted = self.gate.admit(obj, t)
        return self.policy.admit(obj, t) and admitted
    def prefetch(self, obj):
        self.gate.prefetch(obj)
        self.policy.prefetch(obj)
    def evicted(self, obj):
        self.gate.evicted(obj)
        self.policy.evicted(obj)
    def loaded(self, obj, t, fill):
        self.gate.loaded(obj, t, fill)
        self.policy.loaded(obj, t, fill)
    def victim(self, cands, obj, t): return self.policy.victim(cands, obj, t)


class Static(Policy):
    """Pin the C most popular experts (ties to the lower id); others only take free slots."""
    def __init__(self, capacity, pinned, **_):
        super().__init__(capacity)
        self.pinned = pinned
    def victim(self, cands, obj, t):
        if obj not in self.pinned:
            return None
        return next((o for o in cands if o not in self.pinned), cands[0])


class Cache:
    """Slots per partition (``capacity``: every partition's, or a list of each one's) and one policy
    per partition."""

    def __init__(self, name, experts, seq_offsets, num_experts, capacity, per_layer, sequential, reset, params):
        n_rows, n_layers, width = experts.shape
        self.e, self.per_layer, self.width = num_experts, per_layer, width
        self.parts = n_layers if per_layer else 1
        self.caps = list(capacity) if isinstance(capacity, (list, tuple)) else [capacity] * self.parts
        self.lo = [sum(self.caps[:p]) for p in range(self.parts)]
        uses, seq_end = {}, [float("inf")] * n_rows
        for row in range(n_rows):
            for layer in range(n_layers):
                for j in range(width):
                    if experts[row, layer, j] >= 0:
                        uses.setdefault(layer * num_experts + int(experts[row, layer, j]), []).append(
                            (row * n_layers + layer) * width + j)
        if reset:
            for s in range(len(seq_offsets) - 1):
                for row in range(seq_offsets[s], seq_offsets[s + 1]):
                    seq_end[row] = seq_offsets[s + 1] * n_layers * width
        counts = {}
        for row in range(n_rows):
            for layer in range(n_layers):
                for e in experts[row, layer]:
                    if e >= 0:
                        counts[layer * num_experts + int(e)] = counts.get(layer * num_experts + int(e), 0) + 1
        pinned = set()
        for part in range(self.parts):
            objs = [o for o in range(n_layers * num_experts) if not per_layer or o // num_experts == part]
            pinned |= set(sorted(objs, key=lambda o: (-counts.get(o, 0), o))[:self.caps[part]])
        kinds = {"lru": LRU, "fifo": FIFO, "lifo": LIFO, "lfu": LFU, "arc": ARC, "lecar": LeCaR, "belady": Belady,
                 "gamma": Gamma, "gamma-admit": Gamma, "static": Static}
        extra = dict(uses=uses, seq_end=seq_end, pinned=pinned, sequential=sequential,
                     **{k: v for k, v in params.items() if k in ("gamma", "seed")})
        name, _, admission = name.partition("+")  # "lru+gamma": LRU behind the γ admission

        def make(c, p):
            policy = kinds[name](c, part=p, admit_all=name == "gamma-admit", **extra)
            return Admitted(c, policy, Gamma(c, **extra)) if admission == "gamma" else policy
        self.make = lambda: [make(c, p) for p, c in enumerate(self.caps)]
        self.clear()

    def clear(self):
        self.slots = [None] * sum(self.caps)
        self.policies = self.make()

    def part(self, obj):
        return obj // self.e if self.per_layer else 0

    def residents(self, part):
        return [o for o in self.slots[self.lo[part]:self.lo[part] + self.caps[part]] if o is not None]

    def slot(self, obj):
        return self.slots.index(obj) if obj in self.slots else -1

    def load(self, obj, t, protected, fill=False):
        """Place ``obj`` (a miss the policy admitted, or a fill); returns (slot, victim) or None when
        it stays uncached (a full partition whose residents are all protected, or the policy's choice)."""
        part = self.part(obj)
        pol, lo, c = self.policies[part], self.lo[part], self.caps[part]
        free = [s for s in range(lo, lo + c) if self.slots[s] is None]
        cands = [o for o in self.slots[lo:lo + c] if o is not None and o not in protected]
        if not free and not cands:
            return None
        if fill:
            pol.prefetch(obj)
        pol.residents = self.residents(part)
        victim = None if free else pol.victim(cands, obj, t)
        if not free and victim is None:
            return None
        slot = free[0] if free else self.slots.index(victim)
        if victim is not None:
            self.slots[slot] = None
            pol.evicted(victim)
        self.slots[slot] = obj
        pol.loaded(obj, t, fill)
        return slot, victim

    def serve(self, objs, row, t0, sequential, on_hit, on_miss):
        """One request set at clock ``t0`` (+ rank): hits, then misses under step semantics."""
        pol = self.policies[self.part(objs[0])] if objs else None
        if pol is None:
            return
        pol.residents = self.residents(self.part(objs[0]))
        pol.step(objs, pol.residents, row)
        order = [(j, o) for j, o in enumerate(objs)]
        if not sequential:
            order = [x for x in order if self.slot(x[1]) >= 0] + [x for x in order if self.slot(x[1]) < 0]
        for j, obj in order:
            if self.slot(obj) >= 0:
                pol.request(obj, t0 + j, True)
                on_hit(obj)
                continue
            pol.residents = self.residents(self.part(obj))
            placed = self.load(obj, t0 + j, set() if sequential else set(objs)) if pol.admit(obj, t0 + j) else None
            on_miss(obj, t0 + j, placed)


def hitrate(experts, seq_offsets, num_experts, policy, capacity, per_layer=True, sequential=False, reset=False,
            **params):
    """Hits per layer and evictions [(clock, object)] of ``policy`` on ``experts`` [rows, L, k]."""
    cache = Cache(policy, experts, seq_offsets, num_experts, capacity, per_layer, sequential, reset, params)
    return play(cache, experts, seq_offsets, num_experts, sequential, reset)


def play(cache, experts, seq_offsets, num_experts, sequential, reset):
    """``hitrate`` on a ``Cache`` made for this trace, which holds the final state afterwards."""
    n_rows, n_layers, k = experts.shape
    hits, evictions = [0] * n_layers, []
    for s in range(len(seq_offsets) - 1):
        if reset and s > 0:
            cache.clear()
        for row in range(seq_offsets[s], seq_offsets[s + 1]):
            for layer in range(n_layers):
                objs = [layer * num_experts + int(e) for e in experts[row, layer]]

                def hit(obj, layer=layer):
                    hits[layer] += 1

                def miss(obj, t, placed):
                    if placed is not None and placed[1] is not None:
                        evictions.append((t, placed[1]))

                cache.serve(objs, row, (row * n_layers + layer) * k, sequential, hit, miss)
    return hits, evictions


def des_decisions(req, pred, preload, preload_at, group_offsets, kind, num_experts, policy, capacity,
                  per_layer=True, reset=False, commit=False, **params):
    """The discrete-event engine's decision log for request rows ``req`` [R, L, W] (kind 1: decode),
    next-cell predictions ``pred`` [R, L, P] and preload sets ``preload`` [G, L, C] issued at rows
    ``preload_at`` (-1: none)."""
    n_rows, n_layers, width = req.shape
    group_start = [False] * n_rows
    for g in group_offsets[:-1]:
        if g < n_rows:
            group_start[g] = True
    # a decode cell with a prediction runs it under commit (not a group's first layer 0: nothing
    # was prefetched for it); the cache serves, and Belady foresees, the sets that run
    runs = [[pred[row, layer] if commit and kind[row] == 1 and pred.shape[2] > 0 and pred[row, layer, 0] >= 0
             and (layer > 0 or not group_start[row]) else req[row, layer] for layer in range(n_layers)]
            for row in range(n_rows)]
    served = np.full(req.shape, -1, np.int64)
    for row in range(n_rows):
        for layer in range(n_layers):
            served[row, layer, :len(runs[row][layer])] = runs[row][layer]
    cache = Cache(policy, served, group_offsets, num_experts, capacity, per_layer, False, reset, params)
    log = []
    for row in range(n_rows):
        if group_start[row] and reset and row > 0:
            cache.clear()
        if preload_at[row] >= 0:
            sets = [[layer * num_experts + int(e) for e in preload[preload_at[row], layer] if e >= 0]
                    for layer in range(n_layers)]
            protected = {o for s in sets for o in s}
            for pol in cache.policies:
                pol.step([], [], row)
            before = row * n_layers * width - 1  # the clock just before the row
            for layer, objs in enumerate(sets):
                for obj in objs:
                    placed = None if cache.slot(obj) >= 0 else cache.load(obj, before, protected, True)
                    if placed is not None:
                        log.append((row, layer, PRELOAD, obj, placed[0]))
        for layer in range(n_layers):
            base = (row * n_layers + layer) * width
            objs = [layer * num_experts + int(e) for e in served[row, layer] if e >= 0]
            cell = []
            cache.serve(objs, row, base, False, lambda obj: cell.append((HIT, obj, cache.slot(obj))),
                        lambda obj, t, placed: cell.append((LOAD, obj, -1 if placed is None else placed[0])))
            log += [(row, layer, *event) for event in cell]
            nrow, nlayer = (row, layer + 1) if layer + 1 < n_layers else (row + 1, 0)
            if pred.shape[2] > 0 and nrow < n_rows and (nrow == row or not group_start[nrow]) and kind[nrow] == 1:
                nxt = [nlayer * num_experts + int(e) for e in pred[nrow, nlayer] if e >= 0]
                for obj in nxt:
                    placed = None if cache.slot(obj) >= 0 else cache.load(obj, base + width - 1, set(objs) | set(nxt),
                                                                           True)
                    if placed is not None:
                        log.append((row, layer, PREFETCH, obj, placed[0]))
    return log
