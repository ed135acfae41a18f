"""`moesim replay`: the simulator's decisions executed with real reads and real compute.

The discrete-event simulator runs first with ``decisions=True``; its log (per step and layer: the
hits, the loads into which slot, the prefetches and preloads, in the order it made them) is what
the replay executes, so residency is decided by the very policy and prefetcher code the simulator
ran. The replay keeps its own table of what each buffer holds and counts a hit only where the
expert really sits: its hit rate equals the simulator's or the run stops with an error. Time per
output token is the wall time of each decode step, up to the end of its last expert's compute.

A backend (``cpu``: ``moesim.replay.cpu``; ``cuda``: ``moesim.replay.cuda``) holds the experts on
its slow tier, the buffers on its fast tier, and a copy stream; ``moesim.replay.compute`` is the
compute stream's work on either. The executor runs the kernel kind the simulation named: ``fused``
waits for every copy of a layer's experts and then runs them back to back, ``per-expert`` runs each
as soon as its own copy has landed, in the simulator's order. The ``virtual`` backend
(``moesim.replay.virtual``) gives every copy and kernel the simulator's own duration: its time per
token must equal the simulator's exactly, which checks that the executor runs the simulator's schedule.

Models too large for this machine are cut to their first ``layers`` layers and their widths
scaled by ``scale`` (both recorded in the result); the check happens before anything is written.
The virtual backend needs neither.
"""

from __future__ import annotations

import dataclasses
import gc
import numbers
import signal
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError, argument, named, unwind, whole
from moesim.frames import Tabular
from moesim.replay.compute import DTYPE, ComputeStream, row_shape
from moesim.replay.scratch import work_folder
from moesim.replay.virtual import VirtualBackend
from moesim.sim.config import RUN_SETTINGS, Config
from moesim.sim.des import DesResult, simulate_des
from moesim.sim.des_state import EV_CPU, EV_HIT, EV_LOAD, EV_LOWBIT, EV_PREFETCH, EV_PRELOAD
from moesim.sim.strategies import CACHED, ON_GPU, STRATEGIES, get_strategy
from moesim.sim.machine import Hardware
from moesim.sim.weights import weights_of
from moesim.tracegen.models import ModelSpec
from moesim.tracegen.schema import DECODE
from moesim.tracegen.trace import Trace

BACKENDS = ("cpu", "cuda", "virtual")
# the settings a replay takes: every setting of the simulated run whose decisions it executes (the virtual backend
# reads each as ``sim run`` does); a real backend runs on this machine in its own format, and refuses those given
# that would only change the simulated side (``check_given``)
REPLAY_SETTINGS = RUN_SETTINGS["replay"]
FORMATS = ("dtype", "other_dtype")  # a real backend computes every weight in its ``DTYPE``
PRESETS = ("link", "ssd")  # simulated parts swapped in; a real backend runs on this machine's
MACHINE = ("cpu", "vram", "ram", "threads", "tensor_split")  # ... and its calibrated hardware file describes this one


@dataclass
class ReplayResult(Tabular):
    model: str             # as replayed: cut and scaled
    hardware: str          # the machine the simulator described
    policy: str
    capacity: int
    backend: str
    kernel: str
    strategy: str
    cpu_layers: int | None  # the layers whose experts a placing strategy (cpu-experts) keeps on the CPU; else None
    dtype: str             # the experts' format: the simulated run's (virtual), the backend's own (cpu, cuda)
    layers: int
    scale: float
    tpot_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    tokens_per_s: float
    copy_s: float          # the copy stream's busy time per decode step
    hit_rate: float
    hits: int
    accesses: int
    loads: int
    prefetch_loads: int
    decode_steps: int
    sim_tpot_s: float
    sim_hit_rate: float
    step_times: np.ndarray = field(repr=False)      # measured, every decode step
    sim_step_times: np.ndarray = field(repr=False)  # simulated, the same steps

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("step_times", "sim_step_times")}


def shrink(trace: Trace, model: ModelSpec, layers: int | None, scale: float) -> tuple[Trace, ModelSpec]:
    """The first ``layers`` layers of the trace and model, with widths times ``scale`` (the model is then
    named ``<name>@x<scale>``, so a calibration of the scaled model is not mistaken for the full one)."""
    if model.kind == "mole":
        raise MoesimError(f"{model.name}: replay executes routed experts; MoLE lookup tables are simulated only "
                          "('moesim sim run')")
    n = trace.meta.num_layers if layers is None else layers
    argument(layers, "layers", f"a whole number 1..{trace.meta.num_layers}", whole(n) and 1 <= n <= trace.meta.num_layers)
    argument(scale, "scale", "a number in (0, 1]", isinstance(scale, numbers.Real) and not isinstance(scale, bool)
             and 0 < scale <= 1)

    def width(v: int) -> int:
        return max(8, int(round(v * scale))) if v else v

    name = model.name if scale == 1 else f"{model.name}@x{scale:g}"
    small = dataclasses.replace(model, name=name, num_layers=n, d_model=width(model.d_model), d_expert=width(model.d_expert),
                                q_dim=width(model.q_dim), kv_dim=width(model.kv_dim), d_shared=width(model.d_shared))
    meta = trace.meta.replace(num_layers=n, expert_bytes=trace.meta.expert_bytes if scale == 1 else None)
    cut = dataclasses.replace(trace, meta=meta, experts=np.ascontiguousarray(trace.experts[:, :n]),
                              weights=None if trace.weights is None else trace.weights[:, :n],
                              probs=None if trace.probs is None else trace.probs[:, :n],
                              spec=None if trace.spec is None else trace.spec[:, :n])
    return cut, small


def check_given(given, backend: str) -> None:
    """Refuse the settings ``given`` (typed on the command line, or passed to the API as keywords; a configuration
    file holds every setting, and those it holds are not refused) that ``backend`` does not read: a real backend runs
    on this machine, as the hardware file calibrated on it describes it, in its own format (``DTYPE``)."""
    if backend == "virtual" or backend not in BACKENDS:
        return

    def unread_of(names) -> tuple[str, str]:
        unread = [n for n in names if n in given]
        return ", ".join(map(named, unread)), "it" if len(unread) == 1 else "them"

    for names, why in ((FORMATS, f"computes every weight in its own format, {DTYPE[backend]}"),
                       (PRESETS, "runs on this machine (link and ssd swap simulated presets)"),
                       (MACHINE, "runs on this machine, as the hardware file calibrated on it describes it (its "
                                 "CPU and memory; torch computes with every core)")):
        typed, it = unread_of(names)
        if typed:
            raise MoesimError(f"{typed}: {named('backend', backend)} {why}, so nothing reads {it} (the virtual "
                              f"backend does)")


def check_backend(config: Config, backend: str) -> None:
    """Refuse what ``backend`` does not execute: the SSD tier and some strategies off the virtual clock."""
    if backend not in BACKENDS:
        raise MoesimError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    strategy = config.execution.strategy
    if backend != "virtual" and config.cache.dram_capacity is not None:
        raise MoesimError(f"{named('backend', backend)} replays two tiers (slow tier -> fast buffers); the SSD tier "
                          f"({named('dram_capacity')}) is replayed on {named('backend', 'virtual')} only")
    if config.cache.dram_capacity is not None and get_strategy(strategy).cpu:
        raise MoesimError(f"strategy {strategy} computes experts on the CPU, whose reads from the SSD tier "
                          f"({named('dram_capacity')}) are simulated ('moesim sim run'), not replayed")
    if backend != "virtual" and backend not in get_strategy(strategy).replay:
        executes = [name for name, m in STRATEGIES.items() if backend in m.replay]
        raise MoesimError(f"{named('backend', backend)} executes strategies {', '.join(executes)}; "
                          f"{strategy} is replayed on {named('backend', 'virtual')} only (its CPU and GPU work overlap)")


def in_backend_format(config: Config, backend: str) -> Config:
    """A real backend's run of ``config``: every weight in the backend's own format (``DTYPE``; a configuration file's
    other format unread too)."""
    return config.replace(dtype=DTYPE[backend], other_dtype=None)


def check_fits(model: ModelSpec, n_buffers: int, backend: str, folder: Path, placed_layers: int = 0) -> None:
    """Refuse up front a model whose experts or buffers (and the experts of ``placed_layers`` layers placed
    whole) would not fit on ``backend``."""
    if backend == "cpu":
        from moesim.replay.cpu import check_fits as problem_of

        problem = problem_of(model, n_buffers, folder, placed_layers)
    elif backend == "cuda":
        from moesim.replay.cuda import check_fits as problem_of

        problem = problem_of(model, n_buffers)
    else:
        raise MoesimError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if problem is not None:
        raise MoesimError(f"{model.name}: {problem}; cut it with {named('layers')} N and/or {named('scale')} S "
                          "(widths x S), which the result records")


def open_backend(backend: str, model: ModelSpec, n_buffers: int, folder: Path, seed: int, placed_layers: int = 0):
    if backend == "cpu":
        from moesim.replay.cpu import CpuBackend

        return CpuBackend(model, n_buffers, folder, seed, placed_layers)
    from moesim.replay.cuda import CudaBackend

    return CudaBackend(model, n_buffers, seed)


def replay(trace: Trace, config: Config, hardware: Hardware, backend: str = "cpu", layers: int | None = None,
           scale: float = 1.0, workdir: str | Path | None = None, seed: int = 0,
           model: ModelSpec | None = None) -> ReplayResult:
    """Simulate ``config`` on ``hardware``, then execute the simulator's decisions on ``backend`` (for real,
    or on the virtual clock). The model is ``model`` or the configuration's, cut to ``layers`` and
    scaled by ``scale``; a real backend runs the experts in its own dtype (``DTYPE``)."""
    real = backend != "virtual"
    model = model if model is not None else config.model.spec(trace.meta)
    check_backend(config, backend)
    dram_capacity = config.cache.dram_capacity
    trace, model = shrink(trace, model, layers, scale)
    if real:
        config = in_backend_format(config, backend)
    sim = simulate_des(trace, config, model, hardware, decisions=True)
    n_slots = int(sim.config.cache.slots(model.num_layers).sum())
    placed_layers = model.num_layers if (sim.placement != CACHED).any() else 0
    folder = work_folder(workdir)
    if real:
        check_fits(model, n_slots, backend, folder, placed_layers)
    layout = Buffers.for_log(sim, n_slots)
    expert_format = weights_of(trace, model, sim.config.model.dtype, sim.config.model.other_dtype).expert_format
    if not real:  # a machine without a GPU has no link: one copy engine, as the simulator's state has
        engines = hardware.link.engines if hardware.link is not None else 1
        machine = VirtualBackend(sim, model.num_layers * trace.meta.num_experts, engines, dram_capacity)
        times, counts, busy = _execute(sim, machine, machine, layout, trace.meta.num_experts)
        return _result(sim, backend, model, scale, expert_format, times, counts, busy)
    req = sim.requests
    seqs, keys = row_shape(req.tokens, req.ctx, req.outputs)  # as ComputeStream.row will see each row
    row_keys = int(np.max(seqs * keys, initial=0))
    previous = signal.signal(signal.SIGTERM, unwind)  # a kill unwinds, so the files are removed (the API's callers)
    try:
        machine = open_backend(backend, model, layout.total, folder, seed, placed_layers)
        try:
            compute = ComputeStream(model, seed, backend, row_keys)
            warm_up(machine, compute, int(req.tokens.max(initial=1)))
            with no_gc():
                times, counts, busy = _execute(sim, machine, compute, layout, trace.meta.num_experts)
        finally:
            machine.close()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return _result(sim, backend, model, scale, expert_format, times, counts, busy)


def _result(sim: DesResult, backend: str, model: ModelSpec, scale: float, expert_format: str, times: np.ndarray,
            counts: tuple, copy_busy_s: float) -> ReplayResult:
    hits, accesses, loads, prefetches = counts
    if (hits, accesses) != (sim.hits, sim.accesses):
        raise MoesimError(f"replay hits {hits}/{accesses} differ from the simulator's {sim.hits}/{sim.accesses}")
    tokens = float(sim.decode_tokens)
    execution = sim.config.execution
    places = get_strategy(execution.strategy).places
    return ReplayResult(sim.model, sim.hardware, sim.policy, sim.capacity, backend, sim.kernel, execution.strategy,
                        execution.params.get(places) if places else None, expert_format, model.num_layers, scale,
                        float(times.mean()),
                        float(np.percentile(times, 50)), float(np.percentile(times, 99)), tokens / float(times.sum()),
                        copy_busy_s / max(sim.decode_steps, 1), hits / accesses if accesses else float("nan"),
                        hits, accesses, loads, prefetches, int(times.size), sim.tpot_s, sim.hit_rate, times,
                        sim.step_times)


@dataclass(frozen=True)
class Buffers:
    """Where copies land, as buffer numbers: the cache's slots, then one scratch buffer per expert of a
    step's layer (loads the cache does not keep: no-cache streaming, bypasses), then the staging
    buffers of no-cache prefetches (two cells' worth: the cell being run and the next)."""

    slots: int
    scratch: int
    staging: int

    @classmethod
    def for_log(cls, sim: DesResult, n_slots: int) -> "Buffers":
        log = sim.decisions
        staged = log[(log[:, 2] == EV_PREFETCH) & (log[:, 4] < 0)]
        per_cell = np.unique(staged[:, :2], axis=0, return_counts=True)[1] if len(staged) else [0]
        return cls(n_slots, sim.requests.experts.shape[2], 2 * int(np.max(per_cell)))

    @property
    def total(self) -> int:
        return self.slots + self.scratch + self.staging


@contextmanager
def no_gc():
    """No garbage collection pause inside a timed region (collected once before it)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def warm_up(machine, compute, tokens: int, rounds: int = 3) -> None:
    """Run each kind of work a few times before the clock starts: the first calls pay for library
    initialisation (cuBLAS handles, kernel selection, CPU thread pools) and for clocks ramping up,
    which would otherwise land on the first configuration replayed."""
    for _ in range(rounds):
        for n in {1, tokens}:
            x = compute.row(0, n, 64 * n)
            x = compute.layer(x)
            machine.ready(machine.load(0, 0))
            out = compute.scratch(x)
            compute.expert(x, out, machine.weights(0), n)
            machine.release(0)
            compute.combine(x, out)
        machine.finish_step()


def _execute(sim: DesResult, machine, compute, layout: Buffers, num_experts: int) -> tuple[np.ndarray, tuple, float]:
    """Run the decision log on ``machine`` with ``compute``: returns the measured decode steps' times (the machine's
    clock), (hits, accesses, loads, prefetches) of the measured steps and the copy stream's busy time from the first
    measured row on. As in the simulation, the first ``warmup`` batches run and are not measured. Every hit is
    checked against the replay's own table of what each buffer holds."""
    req, log = sim.requests, sim.decisions
    first = int(req.group_offsets[sim.config.workload.warmup])  # the first measured row (the simulator checked it)
    exe, exe_tokens = sim.executed
    placed = sim.placement
    per_expert = sim.kernel == "per-expert"
    held = np.full(layout.slots, -1, np.int64)
    copying: dict = {}  # buffer -> the copy into it that compute has not waited for yet
    free_staging = list(range(layout.slots + layout.scratch, layout.total))
    staged_next: dict = {}  # object -> staging buffer, prefetched without a slot for the next cell
    hits = accesses = loads = prefetches = 0
    times = []
    n_layers = req.experts.shape[1]
    i = 0

    def copy(obj: int, buf: int, lowbit: bool = False) -> None:
        copying[buf] = (machine.load_lowbit if lowbit else machine.load)(obj, buf)

    def wait(buf) -> None:
        if buf in copying:
            machine.ready(copying.pop(buf))

    for row in range(req.num_rows):
        if row == first:
            mark = machine.copy_mark()
        measured = row >= first  # what the simulator counts from its first measured row on
        decode = req.kind[row] == DECODE and measured  # counted and timed
        x = compute.row(row, req.tokens[row], req.ctx[row], req.outputs[row])
        start = machine.clock()
        while i < len(log) and log[i, 0] == row and log[i, 2] == EV_PRELOAD:
            obj, slot = int(log[i, 3]), int(log[i, 4])
            copy(obj, slot)
            held[slot] = obj
            prefetches += measured
            i += 1
        for layer in range(n_layers):
            x = compute.layer(x)
            machine.routed()
            staged, staged_next = staged_next, {}
            tokens_of = {layer * num_experts + int(e): int(t) for e, t in zip(exe[row, layer], exe_tokens[row, layer])
                         if e >= 0}
            run = []  # (buffer or None, tokens, weights) of the GPU's experts, in the simulator's order
            on_cpu = []  # (object, tokens) of the experts the host CPU computes
            while i < len(log) and log[i, 0] == row and log[i, 1] == layer:
                event, obj, slot = int(log[i, 2]), int(log[i, 3]), int(log[i, 4])
                i += 1
                if event == EV_HIT and placed[layer] == ON_GPU:  # loaded before decoding, never moved
                    hits += decode
                    accesses += decode
                    run.append((None, tokens_of[obj], machine.resident(obj)))
                    continue
                if event == EV_HIT:
                    if slot >= 0:
                        buf = slot if held[slot] == obj else -1
                    else:
                        buf = staged.get(obj, -1)
                    if buf < 0:
                        where = f"slot {slot}" if slot >= 0 else "staging"
                        raise MoesimError(f"replay: step {row} layer {layer}: expert {obj % num_experts} is not in "
                                          f"{where} as the simulator says")
                    hits += decode
                    accesses += decode
                    run.append((buf, tokens_of[obj], machine.weights(buf)))
                    continue
                if event == EV_CPU:
                    accesses += decode
                    on_cpu.append((obj, tokens_of[obj]))
                    continue
                if slot >= 0:
                    buf = slot
                    held[slot] = obj
                elif event in (EV_LOAD, EV_LOWBIT):
                    buf = layout.slots + len(run)
                else:
                    buf = staged_next[obj] = free_staging.pop()
                copy(obj, buf, event == EV_LOWBIT)
                if event in (EV_LOAD, EV_LOWBIT):
                    loads += decode
                    accesses += decode
                    run.append((buf, tokens_of[obj], machine.weights(buf)))
                else:  # a prefetch, a preload's kin, or a background fill: no compute waits on it here
                    prefetches += measured and event == EV_PREFETCH  # (the simulator counts fills apart)
            if run or on_cpu:
                out = compute.scratch(x)
                if per_expert:
                    for buf, tokens, weights in run:
                        wait(buf)
                        compute.expert(x, out, weights, tokens)
                else:
                    for buf, _, _ in run:
                        wait(buf)
                    compute.fused(x, out, [(weights, tokens) for _, tokens, weights in run])
                for obj, tokens in on_cpu:
                    compute.cpu(x, out, machine.host(obj), tokens)
                for buf, _, _ in run:
                    if buf is not None:
                        machine.release(buf)
                x = compute.combine(x, out)
            free_staging.extend(staged.values())
        compute.finish(x)
        machine.finish_step()
        if decode:
            times.append(machine.clock() - start)
    return np.array(times), (hits, accesses, loads, prefetches), machine.copy_busy_since(mark)
