"""The compiled hit-rate loop: walks a trace's dense arrays and asks a policy's hooks what to do.

Semantics (DESIGN.md): rows are decode/prefill steps, layers run 0..L-1 inside a step, and at
(row, layer) the request set R holds the k routed experts. An object is (layer, expert), numbered
``layer * E + expert``. Scope ``per-layer`` gives every layer its own C slots (partition = layer);
``global`` gives one pool of C slots (partition 0). Semantics ``step`` serves R at once: the hits are
counted and touched first, then the missing experts are loaded in rank order and a victim is never
a member of R. ``sequential`` serves R's experts one by one in rank order, a textbook cache.

Time ``t`` given to the hooks is the flat access position ``(row * L + layer) * k + j``: unique per
access, increasing, and the index Belady's next-use array is built on.

A policy is a module in moesim.policies with seven njit hooks (see ``moesim.policies.base``);
``compile_engine`` binds them into this loop as compile-time constants, so every call is static
and inlinable, and the result is cached on disk like any ``cache=True`` function. The engine owns
residency (which object sits in which slot) and the counters; the policy owns its ordering state.
A victim hook may return -1 to leave the missing object uncached (a bypass, used by the static pin).
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import types

import numpy as np
from numba import njit

HOOKS = ("reset", "on_step", "on_hit", "on_miss", "choose_victim", "on_evict", "on_insert")


def compile_engine(module_name: str, **hooks):
    """The compiled ``simulate(args, st) -> hits per layer`` of a policy whose hooks are given.

    Passing the hooks as arguments of one shared compiled function would defeat numba's disk cache,
    so the loop's code is bound to the policy's hooks as globals instead. The cache entry is named
    after the policy and a digest of the files its hooks come from, so editing any recompiles.
    """
    if set(hooks) != set(HOOKS):
        raise TypeError(f"{module_name}: hooks must be exactly {', '.join(HOOKS)}")
    digest = hashlib.sha1()
    owner = sys.modules[module_name].__file__
    for path in sorted({__file__, owner} | {inspect.getfile(h.py_func) for h in hooks.values()}):
        with open(path, "rb") as f:
            digest.update(f.read())
    namespace = dict(globals(), **hooks, __name__=module_name)
    name = f"simulate_{module_name.rsplit('.', 1)[-1]}_{digest.hexdigest()[:12]}"
    fn = types.FunctionType(_loop.__code__, namespace, name)
    fn.__qualname__ = name
    return njit(cache=True)(fn)


def _loop(args, st):
    """Simulate; return per-layer hit counts (int64[L]). ``args`` is built by ``engine_args``."""
    experts, seq_offsets, capacity, num_experts, per_layer, sequential, reset_each_seq = args
    n_rows, n_layers, k = experts.shape
    n_parts = n_layers if per_layer else 1
    slot_of = np.full(n_layers * num_experts, -1, np.int64)
    obj_of = np.full(n_parts * capacity, -1, np.int64)
    used = np.zeros(n_parts, np.int64)
    mark = np.zeros(n_layers * num_experts, np.int64)
    stamp = 0
    hits = np.zeros(n_layers, np.int64)
    reset(st)
    for s in range(seq_offsets.shape[0] - 1):
        if reset_each_seq and s > 0:
            for slot in range(obj_of.shape[0]):
                if obj_of[slot] >= 0:
                    slot_of[obj_of[slot]] = -1
                    obj_of[slot] = -1
            used[:] = 0
            reset(st)
        for row in range(seq_offsets[s], seq_offsets[s + 1]):
            for layer in range(n_layers):
                part = layer if per_layer else 0
                lo = part * capacity
                base = (row * n_layers + layer) * k
                ranked = experts[row, layer]
                on_step(st, part, layer, row, ranked, base)
                if not sequential:
                    stamp += 1
                    for j in range(k):
                        mark[layer * num_experts + ranked[j]] = stamp
                    for j in range(k):
                        obj = layer * num_experts + ranked[j]
                        if slot_of[obj] >= 0:
                            hits[layer] += 1
                            on_hit(st, part, slot_of[obj], obj, base + j)
                for j in range(k):
                    obj = layer * num_experts + ranked[j]
                    t = base + j
                    if sequential:
                        stamp += 1
                        mark[obj] = stamp
                        if slot_of[obj] >= 0:
                            hits[layer] += 1
                            on_hit(st, part, slot_of[obj], obj, t)
                            continue
                    elif slot_of[obj] >= 0:
                        continue
                    on_miss(st, part, obj, t)
                    if used[part] < capacity:
                        slot = lo + used[part]
                        used[part] += 1
                    else:
                        slot = choose_victim(st, part, lo, lo + capacity, obj_of, slot_of, mark, stamp, obj, t)
                        if slot < 0:
                            continue
                        victim = obj_of[slot]
                        slot_of[victim] = -1
                        on_evict(st, part, slot, victim, t)
                    obj_of[slot] = obj
                    slot_of[obj] = slot
                    on_insert(st, part, slot, obj, t)
    return hits


def engine_args(experts: np.ndarray, seq_offsets: np.ndarray, capacity: int, num_experts: int,
                per_layer: bool, sequential: bool, reset_each_seq: bool) -> tuple:
    """The tuple :func:`run` unpacks, with the dtypes its compiled signature expects."""
    return (np.ascontiguousarray(experts, dtype=np.int16), np.ascontiguousarray(seq_offsets, dtype=np.int64),
            np.int64(capacity), np.int64(num_experts), bool(per_layer), bool(sequential), bool(reset_each_seq))
