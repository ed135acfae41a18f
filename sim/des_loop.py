"""The compiled discrete-event loop: one compute stream, FIFO copy engines, an optional SSD.

It is a timeline in a fixed order, not an event queue: request rows in order, layers 0..L-1 in
order, and in each cell the same sequence of decisions. That is exact here because every
resource is FIFO and every decision is made at a known moment in that order: the compute stream
is one in-order stream (a cell's work cannot start before the previous cell's ends), a copy is
queued when the engine decides it (at the cell's routing time) and copies never overtake one
another on an engine, and a kernel's start is ``max(now, its weights' arrival)`` — a wait on a time
already computed. No event can change an earlier decision, so processing them in (row, layer)
order gives the same times a priority queue would, without one.

Per request row (``moesim.sim.requests``) and layer (a cell), on the compute stream:

1. **routing** (``route``): attention + router (+ shared experts) take ``pre_s[row]``; then the
   execution set X is known — ``exe[row, layer]``: the routed experts, or in a ``committed`` cell the
   experts predicted for it (CommitMoE: run what was prefetched; the true experts not in X are
   substitutions);
2. **residency** (``serve_hits``, ``load_misses``): resident members of X are hits; the others are
   loaded now — the policy picks victims exactly as in the hit-rate engine (step semantics: never a
   member of X) and each load is a transfer queued at the routing time (``moesim.sim.des_tiers``);
3. **prefetch** (``prefetch_next``): the experts predicted for the next cell (this row's next layer,
   or the next row's layer 0) that are not resident are loaded like misses, behind this cell's loads,
   never evicting a member of X or of the prediction;
4. **compute** (``run_kernels``): X's experts run in the order decided (hits, then loads) on
   ``exe_tokens`` tokens each, as one fused kernel once all their weights have arrived, or
   (``per_expert``) each as soon as its own weights have; a wait is stall.

Transfers cannot be cancelled: a wrong prefetch occupies its engine and its slot, and the right
expert's copy queues behind it (``fallback``). Capacity 0 is no expert cache: every executed expert
is copied for its layer and dropped, except a prefetched one, which waits in a staging buffer for
the cell it was fetched for (the double buffering of Speculating Experts §5.1). A preload
(``preload_batch``) loads a batch's predicted Top-C per layer before its first decode row. MoLE rows
copy each layer's lookup rows, all queued at the start of the row, and run no expert kernel.

The state is ``moesim.sim.des_state.State``. The names ``reset``, ``on_step``, ``on_hit``, ``on_miss``,
``on_prefetch``, ``choose_victim``, ``on_evict`` and ``on_insert`` are the policy's hooks
(``moesim.policies.base``), bound by ``moesim.sim.engine.bind`` together with ``HELPERS``. A miss the
policy declines (``on_miss`` False) is a bypass, as is one for which every resident is protected.
"""

from __future__ import annotations

from moesim.sim.costs import T_EXPERT_LAUNCH, T_MOE_LAUNCH, expert_kernel_s, fused_add
from moesim.sim.des_state import (C_ACCESSES, C_BYPASS, C_HITS, C_LOADS, C_PF_LOADS, C_PF_USED, C_PREFILL_LOADS,
                                  C_SUBS, C_SUBS_MASS, COPY_BUSY, EV_HIT, EV_LOAD, EV_PREFETCH, EV_PRELOAD,
                                  R_COMPUTE, R_COPY, R_STALL, R_TIME)
from moesim.sim.des_tiers import queue_copy, transfer
from moesim.sim.engine import empty, place
from moesim.tracegen.schema import DECODE


def des_loop(s, st):
    inp, cache, tally = s.inputs, s.cache, s.tally
    n_rows, n_layers = inp.experts.shape[0], inp.experts.shape[1]
    stamp = 0
    now = 0.0
    reset(st)
    for row in range(n_rows):
        if inp.group_start[row] and inp.reset_each_group and row > 0:
            empty(cache.slot_of, cache.obj_of, cache.used)
            reset(st)
        begin = now
        copy_before = s.tiers.clocks[COPY_BUSY]
        if inp.preload_at[row] >= 0:
            stamp += 1  # the whole preload is protected from itself
            preload_batch(s, st, row, now, stamp)
        if inp.mole:
            for layer in range(n_layers):
                s.tiers.lut_ready[layer] = queue_copy(s.tiers, now, inp.lut_s[row])
        for layer in range(n_layers):  # one cell: route, serve, prefetch for the next cell, compute
            now += inp.pre_s[row]
            tally.rows[row, R_COMPUTE] += inp.pre_s[row]
            route_at = now
            if inp.mole:
                start = max(now, s.tiers.lut_ready[layer])
                tally.rows[row, R_STALL] += start - now
                now = start
                continue
            stamp += 1
            part = layer if inp.per_layer else 0
            route(s, st, row, layer, part, stamp)
            n, pinned, n_run, weights_at, fused = serve_hits(s, st, row, layer, part, route_at)
            if inp.kind[row] == DECODE:
                tally.counters[C_ACCESSES] += n
                tally.layer_accesses[layer] += n
            pinned, n_run, weights_at, fused = load_misses(s, st, row, layer, part, route_at, stamp, pinned, n_run,
                                                           weights_at, fused)
            prefetch_next(s, st, row, layer, part, route_at, stamp, pinned)
            now = run_kernels(s, row, now, n_run, weights_at, fused)
        tally.rows[row, R_TIME] = now - begin
        tally.rows[row, R_COPY] = s.tiers.clocks[COPY_BUSY] - copy_before


def route(s, st, row, layer, part, stamp):
    """The execution set X is marked with ``stamp`` (protected from eviction), a committed cell's
    substitutions are counted, and the policy is told of the request."""
    inp, mark = s.inputs, s.cache.mark
    x = inp.exe[row, layer]
    for j in range(x.shape[0]):
        if x[j] >= 0:
            mark[layer * inp.num_experts + x[j]] = stamp
    if inp.committed[row, layer] and inp.kind[row] == DECODE:
        for j in range(inp.experts.shape[2]):
            e = inp.experts[row, layer, j]
            if e >= 0 and mark[layer * inp.num_experts + e] != stamp:
                s.tally.counters[C_SUBS] += 1
                s.tally.counters[C_SUBS_MASS] += inp.weights[row, layer, j]
    on_step(st, part, layer, row, x, (row * inp.experts.shape[1] + layer) * inp.experts.shape[2])


def serve_hits(s, st, row, layer, part, route_at):
    """X's resident members, in rank order: hits, added to the layer's run. Returns (|X|, residents of X,
    and the run so far: its length, when its weights are all in, a fused kernel's duration so far)."""
    inp, tally = s.inputs, s.tally
    slot_of, by_prefetch, counters = s.cache.slot_of, s.cache.by_prefetch, tally.counters
    x, tokens = inp.exe[row, layer], inp.exe_tokens[row, layer]
    base = (row * inp.experts.shape[1] + layer) * inp.experts.shape[2]
    decode = inp.kind[row] == DECODE
    no_cache = inp.capacity == 0
    n, pinned, n_run, weights_at, fused = 0, 0, 0, route_at, inp.times[T_MOE_LAUNCH]
    for j in range(x.shape[0]):
        if x[j] < 0:
            continue
        n += 1
        obj = layer * inp.num_experts + x[j]
        if no_cache or slot_of[obj] < 0:
            continue
        pinned += 1
        if decode:
            counters[C_HITS] += 1
            tally.layer_hits[layer] += 1
        on_hit(st, part, slot_of[obj], obj, base + j)
        log(tally, row, layer, EV_HIT, obj, slot_of[obj])
        if by_prefetch[obj]:
            counters[C_PF_USED] += 1
            by_prefetch[obj] = 0
        n_run, weights_at, fused = add_kernel(s, n_run, weights_at, fused, s.cache.ready[obj], tokens[j])
    return n, pinned, n_run, weights_at, fused


def load_misses(s, st, row, layer, part, route_at, stamp, pinned, n_run, weights_at, fused):
    """X's other members, in rank order: each is copied at the routing time and kept in a slot the
    policy frees (or bypassed); with no cache, a copy staged by the prefetch is a hit."""
    inp, tally = s.inputs, s.tally
    slot_of, ready, counters = s.cache.slot_of, s.cache.ready, tally.counters
    x, tokens = inp.exe[row, layer], inp.exe_tokens[row, layer]
    base = (row * inp.experts.shape[1] + layer) * inp.experts.shape[2]
    cell_id = row * inp.experts.shape[1] + layer
    capacity = inp.capacity
    decode = inp.kind[row] == DECODE
    for j in range(x.shape[0]):
        if x[j] < 0:
            continue
        obj = layer * inp.num_experts + x[j]
        if capacity == 0:
            if s.cache.staged[obj] == cell_id:
                counters[C_PF_USED] += 1
                if decode:
                    counters[C_HITS] += 1
                    tally.layer_hits[layer] += 1
                n_run, weights_at, fused = add_kernel(s, n_run, weights_at, fused, ready[obj], tokens[j])
                log(tally, row, layer, EV_HIT, obj, -1)
                continue
        elif slot_of[obj] >= 0:
            continue
        elif not on_miss(st, part, obj, base + j) or (s.cache.used[part] >= capacity and pinned >= capacity):
            counters[C_BYPASS] += 1
        elif place(st, part, obj, base + j, capacity, slot_of, s.cache.obj_of, s.cache.used, s.cache.mark,
                   stamp)[0] >= 0:
            pinned += 1
            s.cache.by_prefetch[obj] = 0  # a demand load
        else:
            counters[C_BYPASS] += 1
        done = transfer(s.tiers, obj, route_at, inp.times, inp.dram_capacity, counters)
        ready[obj] = done
        counters[C_LOADS if decode else C_PREFILL_LOADS] += 1
        log(tally, row, layer, EV_LOAD, obj, -1 if capacity == 0 else slot_of[obj])
        n_run, weights_at, fused = add_kernel(s, n_run, weights_at, fused, done, tokens[j])
    return pinned, n_run, weights_at, fused


def prefetch_next(s, st, row, layer, part, route_at, stamp, pinned):
    """Queue the next cell's predicted experts behind this cell's loads (same batch, decode rows only).
    They are marked with this cell's ``stamp``, so neither X nor the prediction is evicted for them."""
    inp, cache, tally = s.inputs, s.cache, s.tally
    n_layers, width = inp.experts.shape[1], inp.experts.shape[2]
    nrow, nlayer = (row, layer + 1) if layer + 1 < n_layers else (row + 1, 0)
    if inp.pred.shape[2] == 0 or nrow >= inp.experts.shape[0] or (nrow != row and inp.group_start[nrow]) \
            or inp.kind[nrow] != DECODE:
        return
    npart = nlayer if inp.per_layer else 0
    nbase = nrow * n_layers + nlayer
    issued = (row * n_layers + layer) * width + width - 1  # the clock after this cell's accesses
    pinned_next = pinned if npart == part else 0
    for j in range(inp.pred.shape[2]):
        e = inp.pred[nrow, nlayer, j]
        if e >= 0 and cache.mark[nlayer * inp.num_experts + e] != stamp:
            obj = nlayer * inp.num_experts + e
            cache.mark[obj] = stamp
            if inp.capacity > 0 and cache.slot_of[obj] >= 0:
                pinned_next += 1
    for j in range(inp.pred.shape[2]):
        e = inp.pred[nrow, nlayer, j]
        if e < 0:
            continue
        obj = nlayer * inp.num_experts + e
        if inp.capacity == 0:
            if cache.staged[obj] == nbase:
                continue
            cache.staged[obj] = nbase
        elif cache.slot_of[obj] >= 0:
            continue
        else:
            if cache.used[npart] >= inp.capacity and pinned_next >= inp.capacity:
                continue
            on_prefetch(st, npart, obj, issued)
            if place(st, npart, obj, issued, inp.capacity, cache.slot_of, cache.obj_of, cache.used, cache.mark,
                     stamp)[0] < 0:
                continue
            pinned_next += 1
            cache.by_prefetch[obj] = 1
        cache.ready[obj] = transfer(s.tiers, obj, route_at, inp.times, inp.dram_capacity, tally.counters)
        tally.counters[C_PF_LOADS] += 1
        log(tally, row, layer, EV_PREFETCH, obj, -1 if inp.capacity == 0 else cache.slot_of[obj])


def preload_batch(s, st, row, now, stamp):
    """Before a batch's first decode row: load each layer's preload set, protected (``stamp``) from itself.
    A partition full of protected residents takes no more."""
    inp, cache = s.inputs, s.cache
    g = inp.preload_at[row]
    n_layers, width = inp.experts.shape[1], inp.experts.shape[2]
    for layer in range(n_layers):
        for j in range(inp.preload.shape[2]):
            if inp.preload[g, layer, j] >= 0:
                cache.mark[layer * inp.num_experts + inp.preload[g, layer, j]] = stamp
    before = row * n_layers * width - 1  # the clock just before the row's first access
    pinned = 0
    for layer in range(n_layers):
        part = layer if inp.per_layer else 0
        if inp.per_layer or layer == 0:
            pinned = 0
            for lay in range(layer, layer + 1 if inp.per_layer else n_layers):
                for j in range(inp.preload.shape[2]):
                    e = inp.preload[g, lay, j]
                    if e >= 0 and cache.slot_of[lay * inp.num_experts + e] >= 0:
                        pinned += 1
        for j in range(inp.preload.shape[2]):
            e = inp.preload[g, layer, j]
            if e < 0 or inp.capacity == 0:
                continue
            obj = layer * inp.num_experts + e
            if cache.slot_of[obj] >= 0:
                continue
            if cache.used[part] >= inp.capacity and pinned >= inp.capacity:
                continue
            on_prefetch(st, part, obj, before)
            if place(st, part, obj, before, inp.capacity, cache.slot_of, cache.obj_of, cache.used, cache.mark,
                     stamp)[0] >= 0:
                pinned += 1
                cache.ready[obj] = transfer(s.tiers, obj, now, inp.times, inp.dram_capacity, s.tally.counters)
                cache.by_prefetch[obj] = 1
                s.tally.counters[C_PF_LOADS] += 1
                log(s.tally, row, layer, EV_PRELOAD, obj, cache.slot_of[obj])


def run_kernels(s, row, now, n_run, weights_at, fused):
    """The layer's experts on the compute stream: each kernel as its weights land (per-expert), or one
    fused kernel once all have. Returns the time the layer ends."""
    tally = s.tally
    if s.inputs.per_expert:
        for i in range(n_run):
            start = max(now, s.kernels.ready[i])
            run = expert_kernel_s(s.inputs.by_tokens, s.inputs.times[T_EXPERT_LAUNCH], s.kernels.tokens[i])
            tally.rows[row, R_STALL] += start - now
            tally.rows[row, R_COMPUTE] += run
            now = start + run
    elif n_run > 0:
        start = max(now, weights_at)
        tally.rows[row, R_STALL] += start - now
        tally.rows[row, R_COMPUTE] += fused
        now = start + fused
    return now


def add_kernel(s, n_run, weights_at, fused, at, tokens):
    """Add an expert whose weights land at ``at`` and which computes ``tokens`` tokens to the layer's run:
    a per-expert run keeps each; a fused one only the last landing and its duration so far."""
    if s.inputs.per_expert:
        s.kernels.ready[n_run] = at
        s.kernels.tokens[n_run] = tokens
    else:
        weights_at = max(weights_at, at)
        fused = fused_add(fused, s.inputs.by_tokens, tokens)
    return n_run + 1, weights_at, fused


def log(tally, row, layer, event, obj, slot):
    """Append to the decision log when one was asked for (it has rows)."""
    i = tally.n_log[0]
    if i < tally.log.shape[0]:
        tally.log[i, 0] = row
        tally.log[i, 1] = layer
        tally.log[i, 2] = event
        tally.log[i, 3] = obj
        tally.log[i, 4] = slot
        tally.n_log[0] = i + 1


HELPERS = (place, route, serve_hits, load_misses, prefetch_next, preload_batch, run_kernels, add_kernel, log)
