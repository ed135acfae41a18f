"""The compiled discrete-event loop: one compute stream, FIFO copy engines, an optional SSD.

Per request row (``moesim.sim.requests``) and layer 0..L-1, on the compute stream:
attention + router (+ shared experts) take ``pre_s[row]``; then the execution set X is known —
``exe[row, layer]``: the routed experts, or in a ``committed`` cell the experts predicted for it
(CommitMoE: run what was prefetched; the true experts not in X are substitutions). Resident
members of X are hits; the others are loaded now: the policy picks victims exactly as in the
hit-rate engine (step semantics: never a member of X), and each load is a transfer queued at this
moment on the copy engine that frees first. Then the prefetch for the next cell (this row's next
layer, or the next row's layer 0) is queued behind them: the predicted experts not resident are
loaded like misses, never evicting a member of X or of the prediction. Last, X's experts run, in
the order decided (hits, then loads), on ``exe_tokens`` tokens each (``moesim.sim.costs``): as one
fused kernel once all their weights have arrived, or (``per_expert``) each as soon as its own
weights have; a wait is stall. Transfers cannot be cancelled: a wrong prefetch occupies its
engine and its slot, and the right expert's copy queues behind it (``fallback``).

A transfer from the host link starts when its source is ready and its engine is free. With an SSD
tier (``dram_capacity >= 0``), an expert not in the DRAM cache is first read from the SSD (one
queue, in order) into DRAM, whose D slots are LRU; ``dram_capacity = -1`` keeps every expert in
DRAM. Capacity 0 is no expert cache: every executed expert is copied for its layer and dropped,
except a prefetched one, which waits in a staging buffer for the cell it was fetched for (the
double buffering of Speculating Experts §5.1). MoLE rows copy each layer's lookup rows, all queued
at the start of the row (the token id is all they need), and run no expert kernel.

Counters (float64, see ``C_*``) and per-row times land in ``args``'s work arrays. The names
``reset``, ``on_step``, ``on_hit``, ``on_miss``, ``on_prefetch``, ``choose_victim``, ``on_evict`` and
``on_insert`` are the policy's hooks (``moesim.policies.base``), bound by ``moesim.sim.engine.bind``
together with ``HELPERS``. A miss the policy declines (``on_miss`` False) is a bypass, as is one
for which every resident is protected.
"""

from __future__ import annotations

import numpy as np

from moesim.policies.base import list_push_head, list_remove, list_tail
from moesim.sim.costs import expert_kernel_s, fused_add
from moesim.sim.engine import empty, place

# counters
C_HITS, C_ACCESSES, C_LOADS, C_PREFILL_LOADS, C_PF_LOADS, C_PF_USED, C_SSD_READS, C_SUBS, C_SUBS_MASS, \
    C_DRAM_HITS, C_BYPASS = range(11)
N_COUNTERS = 11
# per-row accounting columns
R_TIME, R_COMPUTE, R_STALL, R_COPY = range(4)
# scalar times
T_MOE_LAUNCH, T_EXPERT_LAUNCH, T_COPY, T_SSD = range(4)


def scalar_times(cost) -> np.ndarray:
    """The ``times`` array (``T_*``) the loop and ``_transfer`` read, from a ``moesim.sim.costs.Costs``."""
    return np.array([cost.moe_launch_s, cost.expert_launch_s, cost.copy_s, cost.ssd_s])


# decision log events (row, layer, event, object, slot), in the order the engine made them: the
# replay executes them. A slot of -1 is no slot (no-cache streaming, a staged prefetch, a bypass).
EV_HIT, EV_LOAD, EV_PREFETCH, EV_PRELOAD = range(4)


def des_loop(args, st):
    (req, exe, exe_tokens, committed, wts, pred, kind, group_start, preload_at, preload, pre_s, lut_s, by_tokens,
     times, per_expert, capacity, num_experts, per_layer, reset_each_group, mole, dram_capacity, work) = args
    (slot_of, obj_of, used, mark, ready, by_prefetch, staged, eng_free, queues, dram_lists, in_dram,
     lut_ready, counters, rows_out, layer_hits, layer_accesses, log, n_log, run_ready, run_tokens) = work
    n_rows, n_layers, width = req.shape
    n_pred = pred.shape[2]
    no_cache = capacity == 0
    stamp = 0
    now = 0.0
    reset(st)
    for row in range(n_rows):
        if group_start[row] and reset_each_group and row > 0:
            empty(slot_of, obj_of, used)
            reset(st)
        begin = now
        copy_before = queues[1]
        decode = kind[row] == 1
        if preload_at[row] >= 0:
            g = preload_at[row]
            stamp += 1  # the whole preload is protected from itself
            for layer in range(n_layers):
                for j in range(preload.shape[2]):
                    if preload[g, layer, j] >= 0:
                        mark[layer * num_experts + preload[g, layer, j]] = stamp
            before = row * n_layers * width - 1  # the clock just before the row's first access
            pinned = 0  # protected residents of the partition: a full one with no other has no victim
            for layer in range(n_layers):
                part = layer if per_layer else 0
                if per_layer or layer == 0:
                    pinned = 0
                    for lay in range(layer, layer + 1 if per_layer else n_layers):
                        for j in range(preload.shape[2]):
                            e = preload[g, lay, j]
                            if e >= 0 and slot_of[lay * num_experts + e] >= 0:
                                pinned += 1
                for j in range(preload.shape[2]):
                    e = preload[g, layer, j]
                    if e < 0 or no_cache:
                        continue
                    obj = layer * num_experts + e
                    if slot_of[obj] >= 0:
                        continue
                    if used[part] >= capacity and pinned >= capacity:
                        continue
                    on_prefetch(st, part, obj, before)
                    if _place(st, part, obj, before, capacity, slot_of, obj_of, used, mark, stamp, by_prefetch) >= 0:
                        pinned += 1
                        ready[obj] = _transfer(obj, now, times, dram_capacity, eng_free, queues, dram_lists,
                                               in_dram, counters)
                        by_prefetch[obj] = 1
                        counters[C_PF_LOADS] += 1
                        _log(log, n_log, row, layer, EV_PRELOAD, obj, slot_of[obj])
        if mole:
            for layer in range(n_layers):
                lut_ready[layer] = _queue(now, lut_s[row], eng_free, queues)
        for layer in range(n_layers):
            part = layer if per_layer else 0
            base = (row * n_layers + layer) * width
            cell = row * n_layers + layer
            now += pre_s[row]
            rows_out[row, R_COMPUTE] += pre_s[row]
            route = now
            if mole:
                start = max(now, lut_ready[layer])
                rows_out[row, R_STALL] += start - now
                now = start
                continue
            use_pred = committed[row, layer]
            x = exe[row, layer]
            stamp += 1
            for j in range(x.shape[0]):
                if x[j] >= 0:
                    mark[layer * num_experts + x[j]] = stamp
            if use_pred and decode:
                for j in range(width):
                    e = req[row, layer, j]
                    if e >= 0 and mark[layer * num_experts + e] != stamp:
                        counters[C_SUBS] += 1
                        counters[C_SUBS_MASS] += wts[row, layer, j]
            on_step(st, part, layer, row, x, base)
            n = 0
            # the experts to run, in the order decided: per-expert kernels keep when each one's weights
            # land and its tokens; a fused kernel only the last landing and its duration so far
            n_run, weights_at, fused = 0, route, times[T_MOE_LAUNCH]
            pinned = 0
            for j in range(x.shape[0]):
                if x[j] < 0:
                    continue
                n += 1
                obj = layer * num_experts + x[j]
                if no_cache:
                    continue
                if slot_of[obj] >= 0:
                    pinned += 1
                    if decode:
                        counters[C_HITS] += 1
                        layer_hits[layer] += 1
                    on_hit(st, part, slot_of[obj], obj, base + j)
                    _log(log, n_log, row, layer, EV_HIT, obj, slot_of[obj])
                    if by_prefetch[obj]:
                        counters[C_PF_USED] += 1
                        by_prefetch[obj] = 0
                    n_run, weights_at, fused = _run(run_ready, run_tokens, n_run, weights_at, fused,
                                                    per_expert, by_tokens, ready[obj], exe_tokens[row, layer, j])
            if decode:
                counters[C_ACCESSES] += n
                layer_accesses[layer] += n
            for j in range(x.shape[0]):
                if x[j] < 0:
                    continue
                obj = layer * num_experts + x[j]
                if no_cache:
                    if staged[obj] == cell:
                        counters[C_PF_USED] += 1
                        if decode:
                            counters[C_HITS] += 1
                            layer_hits[layer] += 1
                        n_run, weights_at, fused = _run(run_ready, run_tokens, n_run, weights_at, fused,
                                                        per_expert, by_tokens, ready[obj], exe_tokens[row, layer, j])
                        _log(log, n_log, row, layer, EV_HIT, obj, -1)
                        continue
                elif slot_of[obj] >= 0:
                    continue
                else:
                    if not on_miss(st, part, obj, base + j) or (used[part] >= capacity and pinned >= capacity):
                        counters[C_BYPASS] += 1
                    elif _place(st, part, obj, base + j, capacity, slot_of, obj_of, used, mark, stamp,
                                by_prefetch) >= 0:
                        pinned += 1
                    else:
                        counters[C_BYPASS] += 1
                done = _transfer(obj, route, times, dram_capacity, eng_free, queues, dram_lists, in_dram, counters)
                ready[obj] = done
                counters[C_LOADS if decode else C_PREFILL_LOADS] += 1
                _log(log, n_log, row, layer, EV_LOAD, obj, -1 if no_cache else slot_of[obj])
                n_run, weights_at, fused = _run(run_ready, run_tokens, n_run, weights_at, fused,
                                                per_expert, by_tokens, done, exe_tokens[row, layer, j])
            # prefetch for the next cell, queued behind this cell's loads
            nrow, nlayer = (row, layer + 1) if layer + 1 < n_layers else (row + 1, 0)
            if n_pred > 0 and nrow < n_rows and (nrow == row or not group_start[nrow]) and kind[nrow] == 1:
                npart = nlayer if per_layer else 0
                nbase = nrow * n_layers + nlayer
                issued = base + width - 1  # the clock after this cell's accesses, before the next cell's
                pinned_next = pinned if npart == part else 0
                for j in range(n_pred):
                    e = pred[nrow, nlayer, j]
                    if e >= 0 and mark[nlayer * num_experts + e] != stamp:
                        obj = nlayer * num_experts + e
                        mark[obj] = stamp
                        if not no_cache and slot_of[obj] >= 0:
                            pinned_next += 1
                for j in range(n_pred):
                    e = pred[nrow, nlayer, j]
                    if e < 0:
                        continue
                    obj = nlayer * num_experts + e
                    if no_cache:
                        if staged[obj] == nbase:
                            continue
                        staged[obj] = nbase
                    elif slot_of[obj] >= 0:
                        continue
                    else:
                        if used[npart] >= capacity and pinned_next >= capacity:
                            continue
                        on_prefetch(st, npart, obj, issued)
                        if _place(st, npart, obj, issued, capacity, slot_of, obj_of, used, mark, stamp,
                                  by_prefetch) < 0:
                            continue
                        pinned_next += 1
                        by_prefetch[obj] = 1
                    ready[obj] = _transfer(obj, route, times, dram_capacity, eng_free, queues, dram_lists,
                                           in_dram, counters)
                    counters[C_PF_LOADS] += 1
                    _log(log, n_log, row, layer, EV_PREFETCH, obj, -1 if no_cache else slot_of[obj])
            if per_expert:  # each expert's kernel as soon as its weights are in
                for i in range(n_run):
                    start = max(now, run_ready[i])
                    run = expert_kernel_s(by_tokens, times[T_EXPERT_LAUNCH], run_tokens[i])
                    rows_out[row, R_STALL] += start - now
                    rows_out[row, R_COMPUTE] += run
                    now = start + run
            elif n_run > 0:  # one fused kernel once all of them are in
                start = max(now, weights_at)
                rows_out[row, R_STALL] += start - now
                rows_out[row, R_COMPUTE] += fused
                now = start + fused
        rows_out[row, R_TIME] = now - begin
        rows_out[row, R_COPY] = queues[1] - copy_before


def _place(st, part, obj, t, capacity, slot_of, obj_of, used, mark, stamp, by_prefetch):
    """``place``, and an evicted expert no longer counts as prefetched (-1: left uncached)."""
    slot, victim = place(st, part, obj, t, capacity, slot_of, obj_of, used, mark, stamp)
    if victim >= 0:
        by_prefetch[victim] = 0
    return slot


def _run(run_ready, run_tokens, n_run, weights_at, fused, per_expert, by_tokens, at, tokens):
    """Add an expert whose weights land at ``at`` and which computes ``tokens`` tokens to the layer's run."""
    if per_expert:
        run_ready[n_run] = at
        run_tokens[n_run] = tokens
    else:
        weights_at = max(weights_at, at)
        fused = fused_add(fused, by_tokens, tokens)
    return n_run + 1, weights_at, fused


def _log(log, n_log, row, layer, event, obj, slot):
    """Append to the decision log when one was asked for (``log`` has rows)."""
    i = n_log[0]
    if i < log.shape[0]:
        log[i, 0] = row
        log[i, 1] = layer
        log[i, 2] = event
        log[i, 3] = obj
        log[i, 4] = slot
        n_log[0] = i + 1


def _queue(at, duration, eng_free, queues):
    """Queue a copy of ``duration`` at time ``at`` on the engine that frees first; when it is done."""
    best = 0
    for e in range(1, eng_free.shape[0]):
        if eng_free[e] < eng_free[best]:
            best = e
    start = max(at, eng_free[best])
    eng_free[best] = start + duration
    queues[1] += duration
    return eng_free[best]


def _transfer(obj, at, times, dram_capacity, eng_free, queues, dram_lists, in_dram, counters):
    """Bring expert ``obj`` to the GPU, from DRAM or through it from the SSD; when it arrives."""
    source_ready = at
    if dram_capacity >= 0:
        if in_dram[obj]:
            counters[C_DRAM_HITS] += 1
            list_remove(dram_lists, 0, obj)
            list_push_head(dram_lists, 0, 0, obj)
        else:
            queues[0] = max(at, queues[0]) + times[T_SSD]
            source_ready = queues[0]
            counters[C_SSD_READS] += 1
            if dram_capacity > 0:
                if queues[2] >= dram_capacity:
                    gone = list_tail(dram_lists, 0, 0)
                    list_remove(dram_lists, 0, gone)
                    in_dram[gone] = False
                else:
                    queues[2] += 1
                list_push_head(dram_lists, 0, 0, obj)
                in_dram[obj] = True
    return _queue(source_ready, times[T_COPY], eng_free, queues)


HELPERS = (place, _place, _run, _log, _queue, _transfer)
