"""`moesim replay`: the simulator's decisions executed with real reads and real compute.

The discrete-event simulator runs first with ``decisions=True``; its log (per step and layer: the
hits, the loads into which slot, the prefetches and preloads, in the order it made them) is what
the replay executes, so residency is decided by the very policy and prefetcher code the simulator
ran. The replay keeps its own slot table and counts a hit only where the expert really sits in its
slot: its hit rate equals the simulator's or the run stops with an error. Time per output token is
the wall time of each decode step.

Models too large for this machine are cut to their first ``layers`` layers and their widths
scaled by ``scale`` (both recorded in the result); the check happens before anything is written.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from moesim import MoesimError
from moesim.sim.des import DesResult, simulate_des
from moesim.sim.des_loop import EV_HIT, EV_LOAD, EV_PREFETCH, EV_PRELOAD
from moesim.sim.hardware import Hardware
from moesim.sim.models import ModelSpec
from moesim.tracegen.schema import DECODE
from moesim.tracegen.trace import Trace

BACKENDS = ("cpu",)
GIL_SWITCH_S = 1e-4


@dataclass
class ReplayResult:
    policy: str
    capacity: int
    backend: str
    layers: int
    scale: float
    tpot_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    tokens_per_s: float
    read_s: float          # reader busy time per decode step
    hit_rate: float
    hits: int
    accesses: int
    loads: int
    prefetch_loads: int
    decode_steps: int
    sim_tpot_s: float
    sim_hit_rate: float
    step_times: np.ndarray = field(repr=False)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "step_times"}


def shrink(trace: Trace, model: ModelSpec, layers: int | None, scale: float) -> tuple[Trace, ModelSpec]:
    """The first ``layers`` layers of the trace and model, with widths times ``scale`` (the model is then
    named ``<name>@x<scale>``, so a calibration of the scaled model is not mistaken for the full one)."""
    n = trace.meta.num_layers if layers is None else layers
    if not 1 <= n <= trace.meta.num_layers:
        raise MoesimError(f"--layers must be 1..{trace.meta.num_layers}, got {layers}")
    if not 0 < scale <= 1:
        raise MoesimError(f"--scale must be in (0, 1], got {scale}")

    def width(v: int) -> int:
        return max(8, int(round(v * scale))) if v else v

    name = model.name if scale == 1 else f"{model.name}@x{scale:g}"
    small = dataclasses.replace(model, name=name, num_layers=n, d_model=width(model.d_model), d_expert=width(model.d_expert),
                                q_dim=width(model.q_dim), kv_dim=width(model.kv_dim), d_shared=width(model.d_shared))
    meta = trace.meta.replace(num_layers=n, expert_bytes=None)
    cut = dataclasses.replace(trace, meta=meta, experts=np.ascontiguousarray(trace.experts[:, :n]),
                              weights=None if trace.weights is None else trace.weights[:, :n],
                              probs=None if trace.probs is None else trace.probs[:, :n],
                              spec=None if trace.spec is None else trace.spec[:, :n])
    return cut, small


def check_fits(model: ModelSpec, slots: int, folder: Path) -> None:
    """Refuse up front a model whose expert files or slot buffers would not fit."""
    expert = 4 * 3 * model.d_model * model.d_expert
    on_disk = expert * model.num_experts * model.num_layers
    in_ram = expert * (slots + model.num_experts)
    free_disk = shutil.disk_usage(folder).free
    free_ram = _available_ram()
    advice = "; cut it with --layers N and/or --scale S (widths x S), which the result records"
    if on_disk > 0.8 * free_disk:
        raise MoesimError(f"{model.name}: its experts take {on_disk / 1e9:.1f} GB on disk, {folder} has "
                          f"{free_disk / 1e9:.1f} GB free{advice}")
    if in_ram > 0.5 * free_ram:
        raise MoesimError(f"{model.name}: {slots} slot buffers need {in_ram / 1e9:.1f} GB of RAM, "
                          f"{free_ram / 1e9:.1f} GB is available{advice}")


def _available_ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def replay(trace: Trace, model: ModelSpec, hardware: Hardware, policy: str = "lru", capacity: int = 4,
           scope: str = "per-layer", prefetch: str = "none", mode: str = "fallback", batch: int = 1,
           backend: str = "cpu", layers: int | None = None, scale: float = 1.0, workdir: str | Path | None = None,
           seed: int = 0, **params) -> ReplayResult:
    """Simulate, then execute the simulator's decisions for real on ``backend``."""
    if backend not in BACKENDS:
        raise MoesimError(f"unknown backend {backend!r}; this build replays on: {', '.join(BACKENDS)}")
    trace, model = shrink(trace, model, layers, scale)
    if capacity < trace.meta.top_k:
        raise MoesimError(f"replay keeps at least top_k = {trace.meta.top_k} slots per layer; got capacity {capacity}")
    n_slots = capacity * (model.num_layers if scope == "per-layer" else 1)
    folder = Path(workdir) if workdir is not None else Path(tempfile.gettempdir())
    check_fits(model, n_slots, folder)
    sim = simulate_des(trace, model, hardware, policy, capacity, scope, prefetch, mode, batch, dtype="fp32",
                       decisions=True, **params)
    from moesim.replay.cpu import Compute, ExpertFiles, Reader

    tmp = Path(tempfile.mkdtemp(prefix="moesim-replay-", dir=folder))
    previous = signal.signal(signal.SIGTERM, _terminate)  # a kill unwinds, so the files are removed
    # the reader needs the GIL back after each read: at Python's default 5 ms switch interval the compute
    # thread's Python code would hold every read's completion up by milliseconds
    switch = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_S)
    try:
        files = ExpertFiles(tmp, model)
        files.write(seed)
        reader = Reader(files)
        try:
            times, counts = _execute(sim, files, reader, Compute(model, seed), n_slots, scope == "per-layer",
                                     capacity, trace.meta.num_experts)
        finally:
            reader.close()
        read_per_step = reader.busy_s / max(sim.decode_steps, 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
        sys.setswitchinterval(switch)
    hits, accesses, loads, prefetches = counts
    if (hits, accesses) != (sim.hits, sim.accesses):
        raise MoesimError(f"replay hits {hits}/{accesses} differ from the simulator's {sim.hits}/{sim.accesses}")
    tokens = float(sim.decode_tokens)
    return ReplayResult(policy, capacity, backend, model.num_layers, scale, float(times.mean()),
                        float(np.percentile(times, 50)), float(np.percentile(times, 99)),
                        tokens / float(times.sum()), read_per_step, hits / accesses if accesses else float("nan"),
                        hits, accesses, loads, prefetches, int(times.size), sim.tpot_s, sim.hit_rate, times)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def _execute(sim: DesResult, files, reader, compute, n_slots: int, per_layer: bool, capacity: int,
             num_experts: int) -> tuple[np.ndarray, tuple]:
    """Run the decision log: returns decode-step wall times and (hits, accesses, loads, prefetches)."""
    req = sim.requests
    log = sim.decisions
    floats = files.expert_floats
    # written once before the clock starts, so no read pays for faulting its buffer's pages in (the
    # RAM counterpart of the pinned buffers a GPU replay copies into)
    slots = np.empty((max(n_slots, 1), floats), np.float32)
    slots.fill(0.0)
    scratch = np.zeros((req.experts.shape[2], floats), np.float32)  # bypassed loads of one step
    scratch.fill(0.0)
    held = np.full(max(n_slots, 1), -1, np.int64)
    pending: dict = {}  # object -> the read it waits for
    hits = accesses = loads = prefetches = 0
    times = []
    n_layers = req.experts.shape[1]
    i = 0
    for row in range(req.num_rows):
        decode = req.kind[row] == DECODE
        x = compute.tokens(req.tokens[row])
        start = time.perf_counter()
        while i < len(log) and log[i, 0] == row and log[i, 2] == EV_PRELOAD:
            obj, slot = int(log[i, 3]), int(log[i, 4])
            pending[obj] = reader.submit(obj // num_experts, obj % num_experts, slots[slot])
            held[slot] = obj
            prefetches += 1
            i += 1
        for layer in range(n_layers):
            x = compute.layer(x)
            run = []
            while i < len(log) and log[i, 0] == row and log[i, 1] == layer:
                event, obj, slot = int(log[i, 2]), int(log[i, 3]), int(log[i, 4])
                i += 1
                if event == EV_HIT:
                    if slot < 0 or held[slot] != obj:
                        raise MoesimError(f"replay: step {row} layer {layer}: expert {obj % num_experts} is not "
                                          f"in slot {slot} as the simulator says")
                    hits += decode
                    accesses += decode
                    run.append((obj, slots[slot]))
                    continue
                target = slots[slot] if slot >= 0 else scratch[len(run) % scratch.shape[0]]
                pending[obj] = reader.submit(obj // num_experts, obj % num_experts, target)
                if slot >= 0:
                    held[slot] = obj
                if event == EV_LOAD:
                    loads += decode
                    accesses += decode
                    run.append((obj, target))
                elif event == EV_PREFETCH:
                    prefetches += 1
            out = 0
            for obj, weights in run:
                done = pending.pop(obj, None)
                if done is not None:
                    reader.wait(done)
                out = out + compute.expert(x, weights)
            if run:
                x = x + out * 0.01
        if decode:
            times.append(time.perf_counter() - start)
    return np.array(times), (hits, accesses, loads, prefetches)
