"""The compiled hit-rate loop: walks a trace's dense arrays and asks a policy's hooks what to do.

Semantics (DESIGN.md): rows are decode/prefill steps, layers run 0..L-1 inside a step, and at
(row, layer) the request set R holds the k routed experts. An object is (layer, expert), numbered
``layer * E + expert``. Scope ``per-layer`` gives every layer its own slots, C or the layer's entry of a
list (partition = layer); ``global`` gives one pool of C slots (partition 0). Semantics ``step`` serves R at once: the hits are
counted and touched first, then the missing experts are loaded in rank order and a victim is never
a member of R. ``sequential`` serves R's experts one by one in rank order, a textbook cache.

Time ``t`` given to the hooks is the flat access position ``(row * L + layer) * k + j``: unique per
access, increasing, and the index Belady's next-use array is built on.

A policy is a module in moesim.policies with its njit hooks (the contract: ``moesim.policies.base``).
A loop calls them as ``policy.<hook>``; ``bind`` compiles a loop (this one, the discrete-event loop of
``moesim.sim.des_loop``, the lanes of ``moesim.sim.lanes`` and ``moesim.sim.across``) with a policy's
hook table as ``policy``, so every call is static and inlinable, and the result is cached on disk like
any ``cache=True`` function. The engine owns residency (which object sits in which slot) and the
counters; the policy owns its ordering state. A policy leaves a missing object uncached (a bypass) by
returning False from ``on_miss`` (the γ-cache's Top-C) or -1 from ``choose_victim`` (the static pin).
"""

from __future__ import annotations

import hashlib
import sys
import time
import types
from pathlib import Path

import numpy as np
from numba import njit, uint64

from moesim.policies.base import UNBOUND as policy  # the hooks of the policy a loop is bound to (``bind``)
from moesim.sim import copy_propagation, inline_copy

inline_copy.install()  # before anything here is compiled
_BOUND: dict = {}
COMPILE_NOTE = "first run only, cached on disk"  # what a status line says of a compilation


def source_files(functions) -> list[Path]:
    """Every source file whose code a compiled call of ``functions`` may inline: their own files and,
    transitively, those of every Python or numba function their code names as a global, or as an
    attribute of a module it names (``policy.on_hit``)."""
    seen, files, todo = set(), set(), list(functions)
    while todo:
        fn = todo.pop()
        fn = getattr(fn, "py_func", fn)  # a numba dispatcher: its Python function
        code = getattr(fn, "__code__", None)
        if not isinstance(fn, types.FunctionType) or fn in seen:
            continue
        seen.add(fn)
        files.add(Path(code.co_filename))
        codes = [code]
        while codes:  # names used by nested code (comprehensions, inner functions) count too
            c = codes.pop()
            codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
            named = [fn.__globals__[n] for n in c.co_names if n in fn.__globals__]
            todo.extend(named)
            todo.extend(getattr(m, n) for m in named if isinstance(m, types.ModuleType) for n in c.co_names
                        if hasattr(m, n))
    return sorted(files)


def bind(loop, name: str, table: dict, helpers: tuple = (), constants: dict | None = None,
         pipeline: type = copy_propagation.Pipeline) -> object:
    """``loop`` (a plain function) compiled with a policy's hooks inlined: ``table`` (hook name -> njit
    function; a policy's ``hooks``, or a ``FastPath``'s ``hooks``) is what ``policy`` means in its code,
    ``name`` the policy's. ``constants`` (name: int) are globals of the hooks, of the inlined helpers
    defined beside them, and of the loop, fixed at compile time (``moesim.sim.across``'s lane count and
    slot width): one compilation per set. Numba prunes a branch on such a constant before it inlines what
    the branch calls, so a helper's code for wider slots is not compiled where the width leaves it out.

    ``helpers`` are plain functions that the loop calls and that call hooks; they are bound the same way
    and inlined.

    Passing the hooks as arguments of one shared compiled function would defeat numba's disk cache,
    so the loop's code is rebuilt with the hook table as its global ``policy`` instead. The hooks are
    inlined and the loop runs without reference counting (``_nrt=False``; it allocates nothing): called
    hooks took a state tuple by value and counted references on every access, several times the cost of
    the policy itself. It releases the GIL, so runs of several capacities share a process's cores. It is called
    from Python or from another loop, never through a function pointer, so numba builds no C-callable wrapper for
    it (``no_cfunc_wrapper``: about 0.15 s of a discrete-event loop's compile).
    Numba's cache checks only the loop's own file, so the cache entry is named after the loop, the
    policy and a digest of every file whose code is inlined (``source_files``), of the pipeline's name and of the
    files that define it and its bases (``pipeline``): editing a helper or a pass anywhere recompiles. (The
    inliner's copy, ``moesim.sim.inline_copy``, is left out: it changes how numba copies the IR, not the code.)
    One compilation per (``name``: a policy's or a group's, loop, constants) and process.

    ``pipeline`` is numba's compiler pipeline for the loop: ``moesim.sim.copy_propagation``'s, or one derived from
    it (the discrete-event loop's, ``moesim.sim.field_loads``); the digest covers the files it is defined in.
    """
    constants = constants or {}
    key = (name, loop.__module__, loop.__name__, tuple(sorted(constants.items())), pipeline)
    if key not in _BOUND:
        digest = hashlib.sha1()
        digest.update(f"{pipeline.__module__}.{pipeline.__qualname__}".encode())
        pipeline_files = {Path(sys.modules[c.__module__].__file__) for c in pipeline.__mro__
                          if c.__module__.startswith("moesim.")}
        for path in [*source_files([loop, *helpers, *table.values()]), *sorted(pipeline_files)]:
            digest.update(path.read_bytes())
        ident = name.replace("-", "_")
        bound = types.ModuleType(f"moesim.bound.{ident}")
        rebuilt: dict = {}  # a hook module's globals with the constants, its own inlined helpers rebuilt in them
        for hook_name, hook in table.items():
            hook = getattr(hook, "py_func", hook)
            if constants:
                if hook.__module__ not in rebuilt:
                    rebuilt[hook.__module__] = _with_constants(hook.__globals__, hook.__module__, constants)
                hook = types.FunctionType(hook.__code__, rebuilt[hook.__module__], hook.__name__)
            setattr(bound, hook_name, njit(inline="always")(hook))
        namespace = dict(loop.__globals__, policy=bound, **constants, __name__=loop.__module__)
        for helper in helpers:
            namespace[helper.__name__] = njit(inline="always")(types.FunctionType(helper.__code__, namespace,
                                                                                  helper.__name__))
        fixed = "".join(f"_{k.lower()}{v}" for k, v in sorted(constants.items()))
        fn_name = f"{loop.__name__.strip('_')}_{ident}{fixed}_{digest.hexdigest()[:12]}"
        fn = types.FunctionType(loop.__code__, namespace, fn_name)
        fn.__qualname__ = fn_name
        _BOUND[key] = njit(cache=True, _nrt=False, nogil=True, no_cfunc_wrapper=True,
                           pipeline_class=pipeline)(fn)
    return _BOUND[key]


def _with_constants(module_globals: dict, module: str, constants: dict) -> dict:
    """A copy of a module's globals with ``constants`` in place, in which each of the module's own
    ``inline="always"`` njit functions is rebuilt, so that they read the constants too."""
    namespace = dict(module_globals, **constants)
    for name, value in module_globals.items():
        fn = getattr(value, "py_func", None)
        if isinstance(fn, types.FunctionType) and fn.__module__ == module and \
                value.targetoptions.get("inline") == "always":
            namespace[name] = njit(inline="always")(types.FunctionType(fn.__code__, namespace, fn.__name__))
    return namespace


def warm_then_time(run, experts: np.ndarray, seq_offsets: np.ndarray):
    """``run(experts, seq_offsets)`` first on the trace's first row, which compiles what it runs (or loads
    it from numba's disk cache), then on the whole trace, timed: (its result, seconds), or None where
    ``run`` gives None (its state does not fit this trace)."""
    if run(experts[:1], np.array([0, 1], np.int64)) is None:
        return None
    start = time.perf_counter()
    out = run(experts, seq_offsets)
    return None if out is None else (out, time.perf_counter() - start)


def on_disk(compiled) -> bool:
    """Whether numba's disk cache holds a compilation of ``compiled`` (a bound loop) for this
    interpreter: its index file exists. False when that cannot be told."""
    try:
        return Path(compiled._cache._cache_file._index_path).exists()
    except AttributeError:
        return False


@njit(cache=True, inline="always")
def empty(slot_of, obj_of, used):
    """Evict everything (a per-sequence reset): no object in any slot, no slot used."""
    for slot in range(obj_of.shape[0]):
        if obj_of[slot] >= 0:
            slot_of[obj_of[slot]] = -1
            obj_of[slot] = -1
    used[:] = 0


def place(st, part, obj, t, lo, hi, slot_of, obj_of, used, mark, stamp):
    """Give ``obj`` a slot of ``part`` (slots ``lo..hi - 1``, filled from ``lo``): a free one, else the
    policy's victim, which is evicted.

    Returns (slot, evicted object); slot -1 leaves ``obj`` uncached, object -1 means none was evicted.
    A helper of every loop (``bind(..., helpers=(place,))``): it calls the policy's hooks.
    """
    victim = -1
    if used[part] < hi - lo:
        slot = lo + used[part]
        used[part] += 1
    else:
        slot = policy.choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t)
        if slot < 0:
            return -1, -1
        victim = obj_of[uint64(slot)]
        slot_of[uint64(victim)] = -1
        policy.on_evict(st, part, slot, victim, t)
    obj_of[uint64(slot)] = obj
    slot_of[uint64(obj)] = slot
    policy.on_insert(st, part, slot, obj, t)
    return slot, victim


def hitrate_loop(args, st):
    """Simulate, counting hits per layer into ``args``'s hits array (built by ``engine_args``)."""
    experts, seq_offsets, bounds, num_experts, per_layer, sequential, reset_each_seq, work = args
    slot_of, obj_of, used, mark, evictions, n_evictions, hits = work
    n_rows, n_layers, k = experts.shape
    # marks stamp the members of R under step semantics; under sequential R is the one expert being
    # served, which is missing when a victim is chosen, so nothing is marked and no mark equals -1
    stamp = 0 if not sequential else -1
    policy.reset(st)
    for s in range(seq_offsets.shape[0] - 1):
        if reset_each_seq and s > 0:
            empty(slot_of, obj_of, used)
            policy.reset(st)
        for row in range(seq_offsets[s], seq_offsets[s + 1]):
            for layer in range(n_layers):
                part = layer if per_layer else 0
                base = (row * n_layers + layer) * k
                ranked = experts[row, layer]
                policy.on_step(st, part, layer, row, ranked, base)
                if not sequential:
                    stamp += 1
                    for j in range(k):
                        mark[uint64(layer * num_experts + ranked[j])] = stamp
                    for j in range(k):
                        obj = layer * num_experts + ranked[j]
                        o = uint64(obj)  # as an index: unsigned (``moesim.policies.base``, "Unsigned indices")
                        if slot_of[o] >= 0:
                            hits[layer] += 1
                            policy.on_hit(st, part, slot_of[o], obj, base + j)
                for j in range(k):
                    obj = layer * num_experts + ranked[j]
                    o = uint64(obj)
                    t = base + j
                    if sequential:
                        if slot_of[o] >= 0:
                            hits[layer] += 1
                            policy.on_hit(st, part, slot_of[o], obj, t)
                            continue
                    elif slot_of[o] >= 0:
                        continue
                    if not policy.on_miss(st, part, obj, t):
                        continue
                    slot, victim = place(st, part, obj, t, bounds[part], bounds[part + 1], slot_of, obj_of, used, mark,
                                         stamp)
                    if victim >= 0 and n_evictions[0] < evictions.shape[0]:
                        evictions[n_evictions[0], 0] = t
                        evictions[n_evictions[0], 1] = victim
                        n_evictions[0] += 1


def part_bounds(slots: np.ndarray) -> np.ndarray:
    """int64 [P + 1]: partition p owns slots ``bounds[p]..bounds[p + 1] - 1`` of the ``slots[p]`` it has."""
    return np.concatenate([[0], np.cumsum(slots)]).astype(np.int64)


def engine_args(experts: np.ndarray, seq_offsets: np.ndarray, slots: np.ndarray, num_experts: int,
                per_layer: bool, sequential: bool, reset_each_seq: bool, log_evictions: int = 0) -> tuple:
    """The tuple the compiled loop unpacks, with the dtypes its signature expects; ``slots`` are each
    partition's.

    It carries the loop's working arrays too (slot of each object, object in each slot, slots used
    per partition, request-set marks, the first ``log_evictions`` evictions as (t, object) and their
    count, hits per layer), so the loop allocates nothing.
    """
    n_layers = experts.shape[1]
    n_objects, n_parts = n_layers * num_experts, n_layers if per_layer else 1
    bounds = part_bounds(slots)
    work = (np.full(n_objects, -1, np.int64), np.full(bounds[-1], -1, np.int64),
            np.zeros(n_parts, np.int64), np.zeros(n_objects, np.int64), np.zeros((log_evictions, 2), np.int64),
            np.zeros(1, np.int64), np.zeros(n_layers, np.int64))
    return (np.ascontiguousarray(experts, dtype=np.int16), np.ascontiguousarray(seq_offsets, dtype=np.int64),
            bounds, np.int64(num_experts), bool(per_layer), bool(sequential), bool(reset_each_seq),
            work)


def engine_evictions(args: tuple) -> np.ndarray:
    """The evictions the run logged: int64 [n, 2] of (access position t, evicted object)."""
    return args[-1][4][:args[-1][5][0]]


def engine_hits(args: tuple) -> np.ndarray:
    """Hits per layer counted by the run that was given ``args``."""
    return args[-1][-1]
