"""Miss-ratio curves: a policy's exact hits at every capacity of a trace, per layer.

``curve(trace, cache)`` gives one ``HitRate`` per capacity, from the smallest a run takes (1, or
top-k under step semantics) to every expert (E per layer, L*E in one pool), each equal to
``moesim.sim.hits.count_hits`` at that capacity.

**One pass where the policy is a stack algorithm** (Mattson, Gecsei, Slutz & Traiger, 1970): one
whose cache of C holds the first C objects of an order that does not depend on C, so that it holds
what a cache of C-1 holds (inclusion). An access then hits at C exactly when its stack distance, its
object's place in the order just before it, is below C; one pass finds every distance and hits(C) is
the number of distances below C: every capacity for about the price of one. A policy that is one
declares it (its ``stack``: the order it keeps and under which semantics, ``moesim.policies.base.Stack``),
and the order says how an access moves its object up. Under ``sequential`` semantics (a textbook
cache) three policies here are, and Belady under ``step`` semantics too:

- LRU, ordered by recency, most recently used first. The distance is the number of distinct objects
  of the partition used since the object's own last use: with a cache per layer, the policy's own
  pass (``Stack.histogram``: each expert's rank kept up to date in vector registers,
  ``moesim.policies.lru_ranks``); in one pool, found by scanning the
  order while it holds at most ``SCAN_LIMIT`` objects, else with a Fenwick tree over the pool's
  access positions holding one mark per object at its last use.
- Belady (MIN: evict the resident used again furthest ahead; the missed object is always loaded),
  ordered by next use, with OPT's stack update: the object used goes to the top, and the objects above its old
  place are merged downwards, each place keeping whichever of the carried object and its occupant
  is used again sooner (the carried one moves on to the next place). An object with no later use
  (in its sequence, with a reset) is used "never"; which of two such is kept does not change a hit.

  Under ``step`` semantics Belady is one too: while a cell is served, its request set R ranks above
  everything (used "now"), the rest by next use, an order that does not depend on C. From C = k on, a
  full cache holds at most k - 1 members of R besides the one requested, so its lowest-ranked
  object, the one this order evicts, is the non-member used again furthest ahead: the engine's
  victim. The engine serves R's hits before its misses, but the non-members' next uses do not
  change within a cell, so the misses evict the same objects in either order, and a member is never
  evicted before it is served, so it hits exactly when it was resident as the cell began.
- the γ-cache (MELINOE's Definition C.1, ``moesim.policies.gamma``), ordered by decayed count, ties
  to the expert served more recently, over the experts requested so far: the counts survive
  eviction and the clock ticks per request, so the order does not depend on C, and the cache is its
  Top-C. A request raises its expert's count and makes it the most recently served, so the expert
  moves up to the first place whose occupant it outranks; the places between shift down one. Scores
  are the policy's own floats (count · γ^rows, γ^d tabulated by the policy's ``Stack.decay``), so
  every comparison is the one the policy makes.

**One run per capacity elsewhere**, on threads (the compiled engine and the lanes of
``moesim.sim.lanes`` and ``moesim.sim.across``, which FIFO, LFU and ARC per layer under sequential
semantics take, release the GIL), since no other policy is a stack algorithm as moesim defines it:

- LRU under ``step`` semantics serves a step's hits before its misses (DESIGN.md), so the order
  among R's members depends on which of them hit, which depends on C, and inclusion fails: on
  rows (3,1,5) (1,0,2) (3,0,5) (2,4,1) (0,3,1) of 6 experts, expert 3 of the last row hits with
  4 slots and misses with 5;
- LFU counts accesses since the expert was loaded (in-cache, as libCacheSim's), forgotten on
  eviction, so an expert's priority depends on C; FIFO and LIFO order by load time, which depends
  on C (Belady's anomaly); ARC, LeCaR and random adapt to their own hits;
- the γ-cache under step semantics: a step's hits are served before its misses, and the service
  clock breaks ties in count, so two experts with the same history rank in an order that depends
  on which of them hit. Experts 0 and 1 of rows (5,0,1) (6,4,2) (5,0,1) (3,6,2) (0,1,5) of 7 experts
  (γ = 0.9, top-3) are always requested together; expert 1 of the last row hits with 3 slots and
  misses with 4.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
from numba import njit

from moesim.errors import MoesimError
from moesim.policies import get_policy
from moesim.policies.base import DECAYED_COUNT, NEXT_USE, RECENCY, Stack
from moesim.policies.belady import NEVER, next_uses
from moesim.sim.config import CacheConfig, run_params
from moesim.sim.engine import warm_then_time
from moesim.sim.hits import HitRate, check_capacity, count_hits
from moesim.tracegen.trace import Trace

MAX_RUNS = 64  # default capacities of a curve that takes one run each
SCAN_LIMIT = 256  # objects per partition up to which a scan of the recency order beats the tree
LRU, OPT, GAMMA = range(3)  # how an access moves its object up the order (``order_distances``)
RULES = {RECENCY: LRU, NEXT_USE: OPT, DECAYED_COUNT: GAMMA}  # the rule of each order


def stack_of(policy: str, semantics: str) -> Stack | None:
    """The policy's ``stack`` where it is a stack algorithm under ``semantics`` (its curve is one pass)."""
    stack = get_policy(policy).stack
    return stack if stack is not None and semantics in stack.semantics else None


def capacities(trace: Trace, cache: CacheConfig) -> range:
    """Every capacity a hit-rate run takes: 1 (top-k under step semantics) to every expert there is."""
    m = trace.meta
    low = m.top_k if cache.semantics == "step" else 1
    return range(low, (m.num_experts if cache.scope == "per-layer" else m.num_layers * m.num_experts) + 1)


def curve(trace: Trace, cache: CacheConfig, sizes=None, threads: int | None = None) -> list[HitRate]:
    """``cache.policy``'s exact hits at each of ``sizes``, ``cache.capacity`` and ``split`` ignored (every
    layer has the size); one pass for a stack algorithm (``stack_of``), else one run per size on
    ``threads``. ``sizes`` ``"all"``: every capacity; by default every capacity too, but for runs per size
    ``MAX_RUNS`` of them spread evenly from the smallest to the largest when there are more (a global
    pool; a layer of 128 or 256 experts)."""
    stack = stack_of(cache.composed, cache.semantics)
    one_pass = stack is not None
    if isinstance(sizes, str) and sizes == "all":
        sizes = capacities(trace, cache)
    elif sizes is None:
        every = capacities(trace, cache)
        sizes = every if one_pass or len(every) <= MAX_RUNS else \
            np.unique(np.linspace(every.start, every.stop - 1, MAX_RUNS).round().astype(int)).tolist()
    sizes = list(sizes)
    if not sizes:
        raise MoesimError("no capacities to simulate")
    at = [replace(cache, capacity=c, split="uniform") for c in sizes]
    for each in at:
        check_capacity(trace.meta, each)
    if one_pass:
        return _stack_curve(trace, cache, stack, sizes)
    first = count_hits(trace, at[0])  # compiles (or loads) the engine once
    with ThreadPoolExecutor(threads or os.cpu_count()) as pool:
        rest = list(pool.map(lambda each: count_hits(trace, each), at[1:]))
    return [first, *rest]


def _stack_curve(trace: Trace, cache: CacheConfig, stack: Stack, sizes: list[int]) -> list[HitRate]:
    """The one pass of stack distances, compiled first on the trace's first row (``warm_then_time``)."""
    m = trace.meta
    per_layer = cache.scope == "per-layer"
    objects = m.num_experts if per_layer else m.num_layers * m.num_experts
    experts, offsets = np.ascontiguousarray(trace.experts, np.int16), trace.seq_offsets.astype(np.int64)

    def distances(rows, seq_offsets):
        hist = np.zeros((m.num_layers, objects + 1), np.int64)  # [layer, distance]; ``objects``: first use
        decay = np.zeros(0)
        if stack.decay is not None:
            decay = stack.decay(run_params(get_policy(cache.composed), cache.params), rows.shape[0])
        if stack.histogram is not None and per_layer:
            return stack.histogram(rows, seq_offsets, m.num_experts, cache.reset)
        if stack.order == RECENCY and objects > SCAN_LIMIT:
            tree_distances(rows, seq_offsets, np.int64(m.num_experts), per_layer, cache.reset, hist)
        else:
            order_distances(RULES[stack.order], rows, seq_offsets, np.int64(m.num_experts), per_layer,
                            cache.semantics == "step", cache.reset, decay, hist)
        return hist

    hist, seconds = warm_then_time(distances, experts, offsets)
    below = np.cumsum(hist, axis=1)  # below[layer, d]: accesses at distance <= d
    accesses = [trace.num_rows * m.top_k] * m.num_layers
    return [HitRate(cache.composed, c, cache.scope, cache.semantics, sum(accesses), int(below[:, c - 1].sum()),
                    [int(h) for h in below[:, c - 1]], accesses, seconds) for c in sizes]


@njit(cache=True, nogil=True)
def order_distances(rule, experts, seq_offsets, num_experts, per_layer, step, reset, decay, hist):
    """Count each access's place in its partition's order into ``hist[layer, d]`` (first uses at the
    last column), keeping the order as an array, best first; ``rule`` (``LRU``, ``OPT``, ``GAMMA``)
    says how an access moves its object up (``move_lru``, ``move_opt``, ``move_gamma``). ``decay``
    is γ^d for the γ-cache (unused otherwise). ``step`` (OPT only): a cell's request set ranks above
    every other object while the cell is served, its next uses held at -1 ("now") until the cell ends.
    Cheap while an order is short (a layer's experts)."""
    n_rows, n_layers, k = experts.shape
    size = hist.shape[1] - 1
    following = next_uses(experts, num_experts)[0] if rule == OPT else np.zeros(0, np.int64)
    order = np.zeros((n_layers if per_layer else 1, size), np.int64)
    used = np.zeros(order.shape[0], np.int64)
    nxt = np.zeros(n_layers * num_experts, np.int64)  # OPT: each object's next use
    count = np.zeros(n_layers * num_experts)  # γ: decayed count at its last update, and that row
    last = np.zeros(n_layers * num_experts, np.int64)
    for s in range(seq_offsets.shape[0] - 1):
        if reset and s > 0:
            used[:] = 0
            count[:] = 0.0
        end = seq_offsets[s + 1] * n_layers * k if reset else NEVER
        for row in range(seq_offsets[s], seq_offsets[s + 1]):
            for layer in range(n_layers):
                part = layer if per_layer else 0
                stack, n = order[part], used[part]
                held = k if step and rule == OPT else 0
                for j in range(held):
                    nxt[layer * num_experts + experts[row, layer, j]] = -1
                for j in range(k):
                    obj = layer * num_experts + experts[row, layer, j]
                    if rule == LRU:
                        d = move_lru(stack, n, obj)
                    elif rule == OPT:
                        if not held:
                            nxt[obj] = _next_use(following, (row * n_layers + layer) * k + j, end)
                        d = move_opt(stack, n, obj, nxt)
                    else:
                        d = move_gamma(stack, n, obj, row, count, last, decay)
                    if d == n:  # a first use: the order grew by one
                        hist[layer, size] += 1
                        n += 1
                    else:
                        hist[layer, d] += 1
                used[part] = n
                for j in range(held):
                    nxt[layer * num_experts + experts[row, layer, j]] = _next_use(following,
                                                                                  (row * n_layers + layer) * k + j, end)


@njit(cache=True, inline="always")
def move_lru(stack, n, obj):
    """LRU: obj goes to the front; the objects before its old place (``n``: none, a first use) shift
    down one, in the same scan that finds it. Returns the old place."""
    carried, d = obj, 0
    while d < n:
        was = stack[d]
        stack[d] = carried
        if was == obj:
            return d
        carried = was
        d += 1
    stack[n] = carried
    return n


@njit(cache=True, inline="always")
def move_opt(stack, n, obj, nxt):
    """OPT's stack update: obj goes to the top and the objects above its old place merge downwards,
    each place keeping whichever of the carried object and its occupant is used again sooner."""
    carried, d = obj, 0
    while d < n:
        here = stack[d]
        if here == obj:
            break
        if d == 0 or nxt[carried] < nxt[here]:  # the top is obj's; below, the sooner stays
            stack[d] = carried
            carried = here
        d += 1
    stack[d] = carried
    return d


@njit(cache=True, inline="always")
def _next_use(following, pos, end):
    """The next use after position ``pos``; ``NEVER`` past the cache's life (``end``)."""
    return following[pos] if following[pos] < end else NEVER


@njit(cache=True, inline="always")
def move_gamma(stack, n, obj, row, count, last, decay):
    """The γ-cache: obj's count rises (eq. 8, the policy's arithmetic) and, served last, it wins ties,
    so it moves up to the first place whose occupant it outranks; the places between shift down."""
    d = 0
    while d < n and stack[d] != obj:
        d += 1
    count[obj] = count[obj] * decay[row - last[obj]] + 1.0
    last[obj] = row
    up = 0
    while up < d and count[stack[up]] * decay[row - last[stack[up]]] > count[obj]:
        up += 1
    place = d
    while place > up:
        stack[place] = stack[place - 1]
        place -= 1
    stack[up] = obj
    return d


@njit(cache=True, nogil=True)
def tree_distances(experts, seq_offsets, num_experts, per_layer, reset, hist):
    """LRU's distances of ``order_distances`` for long orders (a global pool), in O(log n) per access.

    A partition's accesses get positions in trace order; ``tree[part]`` is a Fenwick tree over them
    with a mark at every object's last use, so the distance of an access at ``pos`` to an object last
    used at ``last`` is the marks strictly between them.
    """
    n_rows, n_layers, k = experts.shape
    span = n_rows * k if per_layer else n_rows * n_layers * k
    tree = np.zeros((n_layers if per_layer else 1, span + 1), np.int32)
    last = np.full(n_layers * num_experts, -1, np.int64)
    first_use = hist.shape[1] - 1
    for s in range(seq_offsets.shape[0] - 1):
        if reset and s > 0:
            for obj in range(last.shape[0]):
                if last[obj] >= 0:
                    _add(tree[obj // num_experts if per_layer else 0], last[obj], -1)
                    last[obj] = -1
        for row in range(seq_offsets[s], seq_offsets[s + 1]):
            for layer in range(n_layers):
                fen = tree[layer if per_layer else 0]
                for j in range(k):
                    obj = layer * num_experts + experts[row, layer, j]
                    pos = row * k + j if per_layer else (row * n_layers + layer) * k + j
                    if last[obj] < 0:
                        hist[layer, first_use] += 1
                    else:
                        hist[layer, _prefix(fen, pos - 1) - _prefix(fen, last[obj])] += 1
                        _add(fen, last[obj], -1)
                    _add(fen, pos, 1)
                    last[obj] = pos


@njit(cache=True, inline="always")
def _add(fen, pos, delta):
    i = pos + 1
    while i < fen.shape[0]:
        fen[i] += delta
        i += i & -i


@njit(cache=True, inline="always")
def _prefix(fen, pos):
    """Marks at positions 0..pos."""
    total = 0
    i = pos + 1
    while i > 0:
        total += fen[i]
        i -= i & -i
    return total


def hits_table(rows: list[HitRate]) -> np.ndarray:
    """A curve's hits as int64 [layer, capacity] (columns the curve lacks are 0)."""
    out = np.zeros((len(rows[0].per_layer_hits), max(r.capacity for r in rows) + 1), np.int64)
    for r in rows:
        out[:, r.capacity] = r.per_layer_hits
    return out
