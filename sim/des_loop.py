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
   execution set X is known (an engine that overlaps its shared experts with the CPU's computes them
   now, ``shared_s[row]``) — ``exe[row, layer]``: the routed experts, or in a ``committed`` cell the
   experts predicted for it (CommitMoE: run what was prefetched; the true experts not in X are
   substitutions);
2. **residency** (``serve_hits``, ``load_misses``): resident members of X are hits; the others are
   loaded now — the policy picks victims exactly as in the hit-rate engine (step semantics: never a
   member of X) and each load is a transfer queued at the routing time (``moesim.sim.des_tiers``).
   X is first split into the ranks of its hits and of its misses without a branch on residency (at hit
   rates near one half no predictor learns it: the split made the loop a fifth faster), then each list is
   served in rank order; the prefetch lists its non-resident predictions the same way. Under a strategy that
   runs experts on the CPU beside a cache (``Inputs.late_to_cpu``), a hit whose copy is still in flight runs
   on the CPU when that hands it back sooner, decided once the layer's misses are queued there (``load_misses``;
   with no cache, a staged copy in flight in its rank's place);
   it is not counted a hit;
3. **prefetch** (``prefetch_next``): the experts predicted for the next cell (this row's next layer,
   or the next row's layer 0) that are not resident are loaded like misses, behind this cell's loads,
   never evicting a member of X or of the prediction;
4. **compute** (``run_kernels``): X's experts run in the order decided (hits, then loads, then residents whose
   copies were in flight and that the GPU runs) on
   ``exe_tokens`` tokens each, as one fused kernel once all their weights have arrived, or
   (``per_expert``) each as soon as its own weights have; a wait is stall.

After a row's last layer, the work done once per row (dense layers, output head) takes ``row_s[row]``.

The execution strategy (``moesim.sim.strategies``) places each layer (a layer placed ``ON_GPU`` is all
hits) and decides, before the run, what each executed expert does if it is not resident
(``Inputs.miss_action``); ``load_misses`` carries it out: ``A_LOAD`` copies it (``demand_load``),
``A_CPU`` runs it on the host CPU (``to_cpu``), ``A_CPU_FILL`` also copies it into the slot the policy
frees, in the background (``background_fill``), and ``A_LOWBIT`` copies its low-bit version
(``lowbit_fetch``). The CPU is one more FIFO resource: its experts run one after another from the
moment the activations reach the host (routing time + the hand-off), and the layer ends when the
GPU's kernels are done and the CPU's results are back.

Transfers cannot be cancelled: a wrong prefetch occupies its engine and its slot, and the right
expert's copy queues behind it (``fallback``). Capacity 0 is no expert cache: every executed expert
is copied for its layer and dropped, except a prefetched one, which waits in a staging buffer for
the cell it was fetched for (the double buffering of Speculating Experts §5.1). A preload
(``preload_batch``) loads a batch's predicted Top-C per layer before its first decode row. MoLE rows
copy each layer's lookup rows, all queued at the start of the row, and run no expert kernel.

A call runs the rows ``Progress.span`` names and leaves the clock and the stamp in ``Progress`` for the
next call: a batch run is one call, a served stream (``moesim.sim.serve``) one call per step as the
scheduler forms them, the clock ``t`` counting the run's rows (``clock_row``). Before its rows, a call
gives back the slots a partition lost since the last one (``fit_live``: the stream's KV cache grew).

The state is ``moesim.sim.des_state.State``. ``policy.reset``, ``policy.on_step``, ... are the policy's
hooks (``moesim.policies.base``): ``moesim.sim.engine.bind`` compiles the loop and ``HELPERS`` with a
policy's hook table as ``policy``. A miss the policy declines (``on_miss`` False) is a bypass, as is one
for which every resident is protected.
"""

from __future__ import annotations

from numba import uint64

from moesim.policies.base import UNBOUND as policy  # the hooks of the policy a loop is bound to (``bind``)
from moesim.sim.costs import T_CPU_LAYER_FIXED, T_EXPERT_LAUNCH, T_LOWBIT_COPY, T_MOE_LAUNCH, expert_kernel_s, fused_add
from moesim.sim.des_state import (C_ACCESSES, C_CPU, C_FILLS, C_HITS, C_LOADS, C_LOWBIT, C_LOWBIT_MASS,
                                  C_PF_LOADS, C_PF_USED, C_PREFILL_LOADS, C_RECLAIMED, C_SUBS, C_SUBS_MASS, COPY_BUSY,
                                  CPU_FREE, EV_CPU, EV_FILL, EV_HIT, EV_LOAD, EV_LOWBIT, EV_PREFETCH, EV_PRELOAD,
                                  R_COMPUTE, R_COPY, R_CPU, R_STALL, R_TIME)
from moesim.sim.des_tiers import cpu_run, queue_copy, through_dram, transfer
from moesim.sim.engine import empty
from moesim.sim.strategies.base import A_CPU, A_CPU_FILL, A_LOAD, ON_GPU
from moesim.tracegen.schema import DECODE

# compile-time constants of the loop's builds (``moesim.sim.run.bound_loop``): EXTRAS 0 leaves out what a plain
# cache never runs (prefetches, preloads, experts run on the CPU or fetched in low bits), RARE 0 what only a
# replay, a served stream or a MoLE model needs (the decision log, slots given back while the run goes on,
# lookup-row copies)
EXTRAS = 1
RARE = 1


def des_loop(s, st):
    inp, cache, tally, progress = s.inputs, s.cache, s.tally, s.progress
    n_layers = inp.experts.shape[1]
    stamp = progress.stamp[0]
    now = progress.now[0]
    if progress.span[0] == 0 and progress.offset[0] == 0:  # a run's first call
        policy.reset(st)
    stamp += 1  # nothing is protected while slots are given back
    if RARE:
        fit_live(s, st, progress.span[0], stamp)
    for row in range(progress.span[0], progress.span[1]):
        if row == inp.measure_from:  # what the warm-up rows counted is left out of the result
            for i in range(tally.counters.shape[0]):
                tally.warm_counters[i] = tally.counters[i]
            for layer in range(n_layers):
                tally.warm_hits[layer] = tally.layer_hits[layer]
                tally.warm_accesses[layer] = tally.layer_accesses[layer]
        if inp.group_start[row] and inp.reset_each_group and row > 0:
            empty(cache.slot_of, cache.obj_of, cache.used)
            policy.reset(st)
        begin, compute, stall = now, 0.0, 0.0  # the row's seconds computing and stalled
        copy_before = s.tiers.clocks[COPY_BUSY]
        if EXTRAS and inp.preload_at[row] >= 0:
            stamp += 1  # the whole preload is protected from itself
            preload_batch(s, st, row, now, stamp)
        if RARE and inp.mole:
            for layer in range(n_layers):
                s.tiers.lut_ready[layer] = queue_copy(s.tiers, now, inp.lut_s[row])
        for layer in range(n_layers):  # one cell: route, serve, prefetch for the next cell, compute
            now += inp.pre_s[row]
            route_at = now
            now += inp.shared_s[row]
            compute += inp.pre_s[row] + inp.shared_s[row]
            if RARE and inp.mole:
                start = max(now, s.tiers.lut_ready[layer])
                stall += start - now
                now = start
                continue
            stamp += 1
            part = layer if inp.per_layer else 0
            route(s, st, row, layer, part, stamp)
            if EXTRAS:
                s.kernels.cpu_ready[0] = -1.0
            n, pinned, n_missed, n_late, n_run, weights_at, fused = serve_hits(s, st, row, layer, part, route_at)
            if inp.kind[row] == DECODE:
                tally.counters[C_ACCESSES] += n
                tally.layer_accesses[layer] += n
            pinned, n_run, weights_at, fused = load_misses(s, st, row, layer, part, route_at, stamp, pinned, n_missed,
                                                           n_late, n_run, weights_at, fused)
            if EXTRAS:
                prefetch_next(s, st, row, layer, part, route_at, stamp, pinned)
            now, compute, stall = run_kernels(s, now, compute, stall, n_run, weights_at, fused)
        now += inp.row_s[row]
        tally.rows[row, R_COMPUTE] = compute + inp.row_s[row]
        tally.rows[row, R_STALL] = stall
        tally.rows[row, R_TIME] = now - begin
        tally.rows[row, R_COPY] = s.tiers.clocks[COPY_BUSY] - copy_before
    progress.now[0] = now
    progress.stamp[0] = stamp


def claim(s, st, part, obj, t, stamp):
    """``moesim.sim.engine.place`` ``obj`` in the slots ``part`` has now (``Cache.live``): (slot, evicted object).
    A function the loop calls, one per policy of the group (``moesim.sim.policy_groups``), not inlined: the loop
    places at four sites."""
    inp, cache = s.inputs, s.cache
    return policy.place(st, part, obj, t, inp.bounds[part], inp.bounds[part] + cache.live[part], cache.slot_of,
                        cache.obj_of, cache.used, cache.mark, stamp)


def fit_live(s, st, row, stamp):
    """Give back the slots a partition lost (``Cache.live`` lowered between calls: a served stream's KV cache
    grew): the policy's victims leave, nothing protected, and a resident of a slot given back moves into the
    victim's (a copy on the GPU, not timed; the policy is told: ``on_move``). Only a policy whose victim does not
    depend on the object being placed, nor its state on the capacity, is run this way (``resizable``)."""
    inp, cache = s.inputs, s.cache
    before = clock_row(s, row) * inp.experts.shape[1] * inp.experts.shape[2] - 1  # just before the row
    for part in range(cache.used.shape[0]):
        lo = inp.bounds[part]
        while cache.used[part] > cache.live[part]:
            top = lo + cache.used[part] - 1
            slot = policy.choose_victim(st, part, lo, top + 1, cache.obj_of, cache.slot_of, cache.mark, stamp, -1,
                                        before)
            victim = cache.obj_of[slot]
            cache.slot_of[victim] = -1
            policy.on_evict(st, part, slot, victim, before)
            if slot != top:
                moved = cache.obj_of[top]
                cache.obj_of[slot] = moved
                cache.slot_of[moved] = slot
                policy.on_move(st, part, top, slot, moved)
            cache.obj_of[top] = -1
            cache.used[part] -= 1
            s.tally.counters[C_RECLAIMED] += 1


def clock_row(s, row):
    """The run's number of array row ``row``: what the clock ``t`` and the log count in."""
    return row + s.progress.offset[0]


def route(s, st, row, layer, part, stamp):
    """The execution set X is marked with ``stamp`` (protected from eviction), a committed cell's
    substitutions are counted, and the policy is told of the request."""
    inp, mark = s.inputs, s.cache.mark
    x = inp.exe[row, layer]
    for j in range(x.shape[0]):
        if x[j] >= 0:
            mark[uint64(layer * inp.num_experts + x[j])] = stamp
    if EXTRAS and inp.committed[row, layer] and inp.kind[row] == DECODE:  # only a prefetcher commits
        for j in range(inp.experts.shape[2]):
            e = inp.experts[row, layer, j]
            if e >= 0 and mark[layer * inp.num_experts + e] != stamp:
                s.tally.counters[C_SUBS] += 1
                s.tally.counters[C_SUBS_MASS] += inp.weights[row, layer, j]
    at = clock_row(s, row)
    policy.on_step(st, part, layer, at, x, (at * inp.experts.shape[1] + layer) * inp.experts.shape[2])


def serve_hits(s, st, row, layer, part, route_at):
    """X's resident members, in rank order: hits, added to the layer's run (every member, in a layer placed
    on the GPU); the others' ranks are listed in ``Kernels.listed`` for ``load_misses``. Under a strategy that runs
    experts on the CPU beside a cache (``Inputs.late_to_cpu``), a resident whose copy is still in flight is listed
    after them, for ``load_misses`` to decide. Returns (|X|, residents of X, how many misses are listed, how many
    residents after them, and the run so far: its length, when its weights are all in, a fused kernel's duration so
    far)."""
    inp, tally = s.inputs, s.tally
    slot_of, by_prefetch, hit_ranks, missed = s.cache.slot_of, s.cache.by_prefetch, s.kernels.hit, s.kernels.listed
    x, tokens = inp.exe[row, layer], inp.exe_tokens[row, layer]
    base = (clock_row(s, row) * inp.experts.shape[1] + layer) * inp.experts.shape[2]
    no_cache = inp.bounds[-1] == 0
    if inp.placement[layer] == ON_GPU:
        return serve_placed(s, row, layer, route_at)
    n, pinned, n_missed, n_run, weights_at, fused = 0, 0, 0, 0, route_at, inp.times[T_MOE_LAUNCH]
    for j in range(x.shape[0]):  # without a branch on residency, which the predictor cannot learn
        if x[j] < 0:
            continue
        n += 1
        resident = not no_cache and slot_of[uint64(layer * inp.num_experts + x[j])] >= 0
        hit_ranks[uint64(pinned)] = j
        missed[uint64(n_missed)] = j
        pinned += resident
        n_missed += not resident
    used, n_late = 0, 0  # hits on prefetched experts; residents still in flight, listed after the misses
    for i in range(pinned):
        j = hit_ranks[i]
        obj = layer * inp.num_experts + x[uint64(j)]
        o = uint64(obj)  # as an index: unsigned (``moesim.policies.base``, "Unsigned indices")
        policy.on_hit(st, part, slot_of[o], obj, base + j)
        # no ``continue`` out of a block a build prunes: one made the lean loop 23% slower (docs/benchmarks.md)
        if EXTRAS and inp.late_to_cpu and s.cache.ready[o] > route_at:
            missed[uint64(n_missed + n_late)] = j  # decided after the misses (``load_misses``)
            n_late += 1
        else:
            if EXTRAS:  # only a prefetch or a preload sets it
                used += by_prefetch[o]
                by_prefetch[o] = 0
            if RARE:
                log(tally, row, layer, EV_HIT, obj, slot_of[o])
            n_run, weights_at, fused = add_kernel(s, n_run, weights_at, fused, s.cache.ready[o], tokens[uint64(j)])
    if EXTRAS:
        tally.counters[C_PF_USED] += used
    if inp.kind[row] == DECODE:
        tally.counters[C_HITS] += pinned - n_late
        tally.layer_hits[layer] += pinned - n_late
    return n, pinned, n_missed, n_late, n_run, weights_at, fused


def serve_placed(s, row, layer, route_at):
    """A layer placed whole on the GPU: every member of X is a hit, its weights there since before decoding."""
    inp, tally = s.inputs, s.tally
    x, tokens = inp.exe[row, layer], inp.exe_tokens[row, layer]
    decode = inp.kind[row] == DECODE
    n, n_run, weights_at, fused = 0, 0, route_at, inp.times[T_MOE_LAUNCH]
    for j in range(x.shape[0]):
        if x[j] < 0:
            continue
        n += 1
        if decode:
            tally.counters[C_HITS] += 1
            tally.layer_hits[layer] += 1
        if RARE:
            log(tally, row, layer, EV_HIT, layer * inp.num_experts + x[j], -1)
        n_run, weights_at, fused = add_kernel(s, n_run, weights_at, fused, 0.0, tokens[j])
    return n, 0, 0, 0, n_run, weights_at, fused


def load_misses(s, st, row, layer, part, route_at, stamp, pinned, n_missed, n_late, n_run, weights_at, fused):
    """X's members ``serve_hits`` listed, in rank order, each as its ``miss_action`` says (module docstring); with
    no cache, a copy staged by the prefetch is a hit. Then, once the misses are queued on the CPU, the ``n_late``
    residents listed after them, whose copies are still in flight at the routing time: each runs on the CPU where
    the CPU would hand it back before its copy lands and the GPU runs it (``to_cpu``'s times, the CPU's queue
    included, against the copy and ``by_tokens``), else it is a hit that waits for its copy; a prefetched copy
    counts as used only on the GPU. A staged copy still in flight is decided so in its rank's place, before the
    misses of later rank are queued (deferring it too cost the lean loop a fifth of its speed). One call site each
    for the CPU and for a hit: each inlined copy lengthens the loop's compile (a second pass over the late ones
    took a plan's first run from 9.1-9.4 s to 10.3-10.5 s). Returns the residents of X and the run."""
    inp, tally, cache = s.inputs, s.tally, s.cache
    x, tokens, action = inp.exe[row, layer], inp.exe_tokens[row, layer], inp.miss_action[row, layer]
    cell_id = clock_row(s, row) * inp.experts.shape[1] + layer
    base = cell_id * inp.experts.shape[2]
    no_cache = inp.bounds[-1] == 0
    for i in range(n_missed + n_late):  # one call site each for the CPU and a hit (each inlined copy costs compile)
        j = s.kernels.listed[i]
        obj = layer * inp.num_experts + x[uint64(j)]
        o = uint64(obj)  # as in ``serve_hits``
        staged = EXTRAS and no_cache and cache.staged[o] == cell_id  # only a prefetch stages
        late = EXTRAS and (i >= n_missed or (staged and inp.late_to_cpu and cache.ready[o] > route_at))
        gpu_hit = staged and not late
        if late:  # the CPU's hand-back behind what it has queued (``to_cpu``'s times) against the copy and the GPU
            back = max(route_at + inp.handoff_s[row], s.tiers.clocks[CPU_FREE]) + inp.cpu_by_tokens[tokens[j]] \
                + inp.handoff_s[row] + inp.times[T_CPU_LAYER_FIXED]
            gpu_hit = back >= cache.ready[o] + inp.by_tokens[tokens[j]]
        if gpu_hit:
            tally.counters[C_PF_USED] += 1 if no_cache else cache.by_prefetch[o]  # a hit, its copy used
            cache.by_prefetch[o] = 0
            if inp.kind[row] == DECODE:
                tally.counters[C_HITS] += 1
                tally.layer_hits[layer] += 1
            n_run, weights_at, fused = add_kernel(s, n_run, weights_at, fused, cache.ready[o], tokens[j])
            if RARE:
                log(tally, row, layer, EV_HIT, obj, -1 if no_cache else cache.slot_of[o])
        elif not late and not no_cache and cache.slot_of[o] >= 0:  # listed twice in X, and loaded for the first
            pass
        elif not late and (not EXTRAS or action[j] == A_LOAD):
            pinned, n_run, weights_at, fused = demand_load(s, st, row, layer, part, obj, base + j, route_at, stamp,
                                                           pinned, n_run, weights_at, fused, tokens[j])
        elif late or action[j] == A_CPU or action[j] == A_CPU_FILL:
            to_cpu(s, row, layer, obj, tokens[j], route_at)
            if not late and action[j] == A_CPU_FILL and not no_cache:
                pinned = background_fill(s, st, row, layer, part, obj, base + j, route_at, stamp, pinned)
            elif not late and cache.live[part] > 0:  # the policy sees every miss (ARC's ghosts, LeCaR's history); this one stays out
                policy.on_miss(st, part, obj, base + j)
        else:  # A_LOWBIT
            n_run, weights_at, fused = lowbit_fetch(s, row, layer, j, obj, tokens[j], route_at, n_run, weights_at,
                                                    fused)
    return pinned, n_run, weights_at, fused


def demand_load(s, st, row, layer, part, obj, t, route_at, stamp, pinned, n_run, weights_at, fused, tokens):
    """Copy a missed expert at the routing time into a slot the policy frees (or bypass: a scratch buffer)
    and add it to the layer's run; with no cache it streams through a buffer."""
    inp, cache, counters = s.inputs, s.cache, s.tally.counters
    capacity = cache.live[part]
    if capacity > 0 and policy.on_miss(st, part, obj, t) and (cache.used[part] < capacity or pinned < capacity) \
            and claim(s, st, part, obj, t, stamp)[0] >= 0:  # else a bypass: through a scratch buffer
        pinned += 1
        if EXTRAS:
            cache.by_prefetch[uint64(obj)] = 0  # a demand load (only a prefetch or a preload sets it)
    done = transfer(s.tiers, obj, route_at, inp.times, inp.dram_capacity, counters)
    cache.ready[uint64(obj)] = done
    counters[C_LOADS if inp.kind[row] == DECODE else C_PREFILL_LOADS] += 1
    if RARE:
        log(s.tally, row, layer, EV_LOAD, obj, -1 if capacity == 0 else cache.slot_of[obj])
    n_run, weights_at, fused = add_kernel(s, n_run, weights_at, fused, done, tokens)
    return pinned, n_run, weights_at, fused


def to_cpu(s, row, layer, obj, tokens, route_at):
    """Run one expert on the host CPU once the activations are there and the CPU is free; the layer's
    CPU results are back on the GPU after the last one (hand-off and sync)."""
    inp, tally = s.inputs, s.tally
    run = inp.cpu_by_tokens[tokens]
    at = route_at + inp.handoff_s[row]
    if inp.dram_capacity >= 0:  # mapped from the SSD: a page the cache lacks is read when the CPU's threads reach it
        at = through_dram(s.tiers, obj, max(at, s.tiers.clocks[CPU_FREE]), inp.times, inp.dram_capacity,
                          tally.counters)
    done = cpu_run(s.tiers, at, run)
    tally.rows[row, R_CPU] += run
    s.kernels.cpu_ready[0] = done + inp.handoff_s[row] + inp.times[T_CPU_LAYER_FIXED]
    if inp.kind[row] == DECODE:
        tally.counters[C_CPU] += 1
    if RARE:
        log(tally, row, layer, EV_CPU, obj, -1)


def background_fill(s, st, row, layer, part, obj, t, route_at, stamp, pinned):
    """``A_CPU_FILL``: copy a miss the CPU is computing into the slot the policy frees, for later tokens; the cell
    does not wait for it. Only onto a copy engine idle at the routing time: fills queued behind one another fall
    further behind where misses outrun the link, and a later hit would wait on one. The policy sees every miss;
    one not filled is a bypass (``on_miss``'s False). Returns the residents of X."""
    inp, cache, eng_free = s.inputs, s.cache, s.tiers.eng_free
    idle = False
    for e in range(eng_free.shape[0]):
        idle |= eng_free[e] <= route_at
    capacity = cache.live[part]
    if capacity <= 0 or not policy.on_miss(st, part, obj, t) or (cache.used[part] >= capacity and pinned >= capacity) \
            or not idle:  # a partition with no slots (a layer's 0, or given back) does not show the policy a miss
        return pinned
    if claim(s, st, part, obj, t, stamp)[0] < 0:
        return pinned
    cache.ready[obj] = transfer(s.tiers, obj, route_at, inp.times, inp.dram_capacity, s.tally.counters)
    cache.by_prefetch[obj] = 0
    s.tally.counters[C_FILLS] += 1
    if RARE:
        log(s.tally, row, layer, EV_FILL, obj, cache.slot_of[obj])
    return pinned + 1


def lowbit_fetch(s, row, layer, j, obj, tokens, route_at, n_run, weights_at, fused):
    """Copy the low-bit version of a miss into scratch (it stays in DRAM: no SSD) and add it to the run."""
    inp, counters = s.inputs, s.tally.counters
    done = queue_copy(s.tiers, route_at, inp.times[T_LOWBIT_COPY])
    counters[C_LOWBIT] += 1
    counters[C_LOWBIT_MASS] += inp.weights[row, layer, j]
    if RARE:
        log(s.tally, row, layer, EV_LOWBIT, obj, -1)
    return add_kernel(s, n_run, weights_at, fused, done, tokens)


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
    nbase = clock_row(s, nrow) * n_layers + nlayer
    issued = (clock_row(s, row) * n_layers + layer) * width + width - 1  # the clock after this cell's accesses
    pinned_next = pinned if npart == part else 0
    no_cache = inp.bounds[-1] == 0
    listed, n_listed = s.kernels.listed, 0
    for j in range(inp.pred.shape[2]):  # the prediction's members not resident, listed without a branch on it
        e = inp.pred[nrow, nlayer, j]
        if e < 0:
            continue
        o = uint64(nlayer * inp.num_experts + e)  # as in ``serve_hits``
        resident = not no_cache and cache.slot_of[o] >= 0
        if cache.mark[o] != stamp:
            cache.mark[o] = stamp
            pinned_next += resident
        listed[uint64(n_listed)] = j
        n_listed += not resident
    for i in range(n_listed):
        obj = nlayer * inp.num_experts + inp.pred[nrow, nlayer, uint64(listed[i])]
        o = uint64(obj)
        if no_cache:
            if cache.staged[o] == nbase:
                continue
            cache.staged[o] = nbase
        elif cache.slot_of[o] >= 0:  # listed twice, and loaded for the first
            continue
        else:
            capacity = cache.live[npart]
            if cache.used[npart] >= capacity and pinned_next >= capacity:
                continue
            policy.on_prefetch(st, npart, obj, issued)
            if claim(s, st, npart, obj, issued, stamp)[0] < 0:
                continue
            pinned_next += 1
            cache.by_prefetch[o] = 1
        cache.ready[o] = transfer(s.tiers, obj, route_at, inp.times, inp.dram_capacity, tally.counters)
        tally.counters[C_PF_LOADS] += 1
        if RARE:
            log(tally, row, layer, EV_PREFETCH, obj, -1 if inp.bounds[-1] == 0 else cache.slot_of[obj])


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
    before = clock_row(s, row) * n_layers * width - 1  # the clock just before the row's first access
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
            if e < 0 or inp.bounds[-1] == 0:
                continue
            obj = layer * inp.num_experts + e
            if cache.slot_of[obj] >= 0:
                continue
            capacity = cache.live[part]
            if cache.used[part] >= capacity and pinned >= capacity:
                continue
            policy.on_prefetch(st, part, obj, before)
            if claim(s, st, part, obj, before, stamp)[0] >= 0:
                pinned += 1
                cache.ready[obj] = transfer(s.tiers, obj, now, inp.times, inp.dram_capacity, s.tally.counters)
                cache.by_prefetch[obj] = 1
                s.tally.counters[C_PF_LOADS] += 1
                if RARE:
                    log(s.tally, row, layer, EV_PRELOAD, obj, cache.slot_of[obj])


def run_kernels(s, now, compute, stall, n_run, weights_at, fused):
    """The layer's experts on the compute stream: each kernel as its weights land (per-expert), or one
    fused kernel once all have; then the CPU's results, if it ran any. Returns the time the layer ends and the
    row's seconds computing and stalled so far."""
    if s.inputs.per_expert:
        for i in range(n_run):
            start = max(now, s.kernels.ready[i])
            run = expert_kernel_s(s.inputs.by_tokens, s.inputs.times[T_EXPERT_LAUNCH], s.kernels.tokens[i])
            stall += start - now
            compute += run
            now = start + run
    elif n_run > 0:
        start = max(now, weights_at)
        stall += start - now
        compute += fused
        now = start + fused
    if EXTRAS:  # only they run experts on the CPU
        back = s.kernels.cpu_ready[0]
        if back > now:  # the CPU's experts of the layer are not back yet
            stall += back - now
            now = back
    return now, compute, stall


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
    """Append to the decision log when one was asked for (it has rows). The full build's only: each call stands
    under ``if RARE``, so that the other builds leave out its arguments too (numba prunes the branch before it
    inlines the call)."""
    i = tally.n_log[0]
    if i < tally.log.shape[0]:
        tally.log[i, 0] = row
        tally.log[i, 1] = layer
        tally.log[i, 2] = event
        tally.log[i, 3] = obj
        tally.log[i, 4] = slot
        tally.n_log[0] = i + 1


HELPERS = (claim, fit_live, clock_row, route, serve_hits, serve_placed, load_misses, demand_load, to_cpu,
           background_fill, lowbit_fetch, prefetch_next, preload_batch, run_kernels, add_kernel, log)
