"""`moesim calibrate`: measure this machine and write the hardware file the simulator reads.

For one model's dims (cut and scaled as the replay will run them), on the replay's backend, it fits
the simulator's own formulas (``moesim.sim.costs``; the ``[compute]`` table, ``Compute``) to the
replay's own code, timed with garbage collection off after a warm-up:

1. **The copy path**, ``[link]`` = latency + size / bandwidth:
   - cpu: reads of whole experts (mean of 3 x ``repeats``) and of one 4 KiB page (median) at random
     places in expert files laid out as the replay writes them, each followed by dropping the pages;
   - cuda: host-to-device copies from pinned memory on a copy stream at five sizes up to one expert,
     timed with events, fitted by least squares (the pageable bandwidth is measured and reported).
2. **Compute**, by least squares over a grid of the replay's ``Compute`` calls: a layer (projections,
   attention over the KV cache, router) at T tokens and ctx KV tokens, ``layer_s + layer_token_s · T
   + layer_ctx_s · ctx``; one expert on T tokens, ``expert_s + expert_token_s · (T − 1)``. Experts are
   computed in turn from a pool of distinct weights: on a GPU twice its L2 cache, so that weights come
   from memory as in decoding; on a CPU 8 (its last-level cache may well hold the replay's slots).
3. **The executor's overhead**: the replay itself runs two all-hit logs (every step the same 1 or k
   experts per layer, resident after the first step); the per-layer and per-expert difference
   between replay and simulation is added to ``layer_s`` and ``expert_s``.
4. **The copy hand-off**: the replay runs an all-miss log (no cache, every expert copied when
   routed); the link latency becomes the one at which the simulated time per token equals the
   replayed one (found by bisection: the simulation is monotone in it).

``moe_launch_s`` and ``expert_launch_s`` stay 0: the replay's launches are inside the measured
layer and expert times. The ``[gpu]`` section only names the device.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim import MoesimError
from moesim.replay.compute import Compute as Work
from moesim.replay.run import no_gc
from moesim.sim.hardware import GPU, Compute, Hardware, Link
from moesim.sim.models import ModelSpec

PAGE = 4096
DISTINCT = 8  # the smallest pool of distinct experts computed in turn
TOKENS = (1, 2, 4, 8)  # expert and layer grids
KEYS_PER_TOKEN = (0, 256, 1024)
EXECUTOR_LAYERS = 2  # the executor's runs cut the model to this many layers (overheads are per layer)


@dataclass(frozen=True)
class Calibration:
    hardware: Hardware
    pageable_gbps: float | None = None  # cuda: host-to-device copies from pageable memory
    layer_overhead_s: float = 0.0       # the executor's own time per layer (in layer_s)
    expert_overhead_s: float = 0.0      # and per expert (in expert_s)
    measured_latency_us: float = 0.0    # the link latency the copy microbenchmark found (before step 4)


def _times(fn, repeats: int) -> np.ndarray:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return np.array(samples)


def _median(fn, repeats: int) -> float:
    return float(np.median(_times(fn, repeats)))


def calibrate(model: ModelSpec, backend: str = "cpu", repeats: int = 15, workdir: str | Path | None = None,
              seed: int = 0) -> Calibration:
    """Measure copies, compute and the executor for ``model`` on ``backend``; a Hardware with a [compute] table."""
    if repeats < 3:
        raise MoesimError(f"--repeats must be at least 3, got {repeats}")
    if backend == "cpu":
        with no_gc():
            link, pageable = _disk_link(model, repeats, workdir, seed), None
        device, memory_gb, name, pool = "cpu", 0.0, f"cpu-{os.uname().nodename}", DISTINCT

        def sync() -> None:
            pass
    elif backend == "cuda":
        from moesim.replay.cuda import require_cuda

        torch = require_cuda()
        props = torch.cuda.get_device_properties(0)
        with no_gc():
            link, pageable = _copy_link(model, repeats, seed, torch)
        device, memory_gb, name = props.name, props.total_memory / 1e9, f"cuda-{props.name.replace(' ', '-')}"
        expert_bytes = 2 * 3 * model.d_model * model.d_expert
        pool = int(min(max(DISTINCT, math.ceil(2 * getattr(props, "L2_cache_size", 0) / expert_bytes)),
                       0.25 * torch.cuda.mem_get_info()[0] // expert_bytes))
        sync = torch.cuda.synchronize
    else:
        raise MoesimError(f"unknown backend {backend!r} (choose from cpu, cuda)")
    compute = _compute_table(model, backend, repeats, seed, sync, max(pool, 1))
    gpu = GPU(f"{device} (roofline unused: see [compute])", 1.0, 1.0, hbm_gb=memory_gb)
    hw = Hardware(name, gpu, link, source=f"moesim calibrate --backend {backend}", compute=compute)
    hw, per_layer, per_expert = _executor_overhead(hw, model, backend, repeats, workdir, seed)
    measured = hw.link.latency_us
    hw = _handoff_latency(hw, model, backend, repeats, workdir, seed)
    return Calibration(hw, pageable, per_layer, per_expert, measured)


def _compute_table(model: ModelSpec, backend: str, repeats: int, seed: int, sync, pool: int) -> Compute:
    """Least-squares fits of the replay's layer and expert calls to the [compute] table's formulas."""
    work = Work(model, seed, backend, max_keys=max(KEYS_PER_TOKEN))
    torch = work.torch
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(work.expert_numel, generator=gen).to(work.device, work.dtype) for _ in range(pool)]

    def per_call(fn, calls: int) -> float:
        """Median over ``repeats`` of ``calls`` calls in a row (then the device drained), per call."""
        def run():
            for k in range(calls):
                fn(k)
            sync()
        with no_gc():
            run()  # warm up
            return _median(run, repeats) / calls

    rows, layer_times = [], []
    for t in TOKENS:
        for keys in KEYS_PER_TOKEN:
            x = work.row(0, t, t * keys)
            # each layer ends with the router's choice on the host: one synchronisation per layer on a GPU
            layer_times.append(per_call(lambda k: (work.layer(x), sync()), DISTINCT))
            rows.append([1.0, t, t * keys])
    layer_s, layer_token_s, layer_ctx_s = np.linalg.lstsq(np.array(rows), np.array(layer_times), rcond=None)[0]
    expert_times = []
    for t in TOKENS:
        x = work.tokens(t)
        out = work.scratch(x)
        expert_times.append(per_call(lambda k: work.expert(x, out, weights[k % pool], t), pool))
    expert_token_s, expert_s = np.polyfit(np.array(TOKENS) - 1.0, np.array(expert_times), 1)
    return Compute(model.name, layer_s=max(float(layer_s), 0.0), expert_s=max(float(expert_s), 0.0),
                   layer_token_s=max(float(layer_token_s), 0.0), layer_ctx_s=max(float(layer_ctx_s), 0.0),
                   expert_token_s=max(float(expert_token_s), 0.0))


def _executor_model(model: ModelSpec) -> ModelSpec:
    return dataclasses.replace(model, num_layers=min(EXECUTOR_LAYERS, model.num_layers))


def _replayed(hw: Hardware, model: ModelSpec, trace, capacity: int, backend: str, workdir, seed: int,
              skip: int) -> tuple[float, float]:
    """Median step time of the replay and of its simulation on ``hw``, leaving out the first ``skip`` steps."""
    from moesim.replay.run import replay

    r = replay(trace, model, hw, "lru", capacity, backend=backend, workdir=workdir, seed=seed)
    return float(np.median(r.step_times[skip:])), float(np.median(r.sim_step_times[skip:]))


def _trace(model: ModelSpec, experts: np.ndarray):
    from moesim.tracegen.schema import DECODE, TraceMeta
    from moesim.tracegen.trace import Trace

    n = experts.shape[0]
    meta = TraceMeta(num_layers=model.num_layers, num_experts=model.num_experts, top_k=experts.shape[2],
                     model=model.name)
    return Trace(meta, experts.astype(np.int16), np.zeros(1, np.int32), np.array([0, n], np.int64),
                 np.arange(n, dtype=np.int32), np.full(n, DECODE, np.int8))


def _executor_overhead(hw: Hardware, model: ModelSpec, backend: str, repeats: int, workdir, seed: int):
    """Replay all-hit logs with 1 and k experts per layer; the per-layer and per-expert residuals go
    into layer_s and expert_s."""
    small = _executor_model(model)
    steps = 1 + max(8, repeats)
    residual = {}
    for n in sorted({1, model.top_k}):
        experts = np.broadcast_to(np.arange(n), (steps, small.num_layers, n))
        real, simulated = _replayed(hw, small, _trace(small, experts), n, backend, workdir, seed, skip=1)
        residual[n] = (real - simulated) / small.num_layers
    k = model.top_k
    per_expert = (residual[k] - residual[1]) / (k - 1) if k > 1 else 0.0
    per_layer = residual[1] - per_expert
    c = hw.compute
    compute = dataclasses.replace(c, layer_s=max(c.layer_s + per_layer, 0.0), expert_s=max(c.expert_s + per_expert, 0.0))
    return dataclasses.replace(hw, compute=compute), per_layer, per_expert


def _handoff_latency(hw: Hardware, model: ModelSpec, backend: str, repeats: int, workdir, seed: int) -> Hardware:
    """Replay an all-miss log; the link latency at which the simulation matches it."""
    from moesim.sim.des import simulate_des
    from moesim.tracegen.synth import synth_trace

    small = _executor_model(model)
    trace = synth_trace(small.num_layers, small.num_experts, small.top_k, 1, max(8, repeats), seed=seed,
                        model=small.name)
    real, _ = _replayed(hw, small, trace, 0, backend, workdir, seed, skip=0)

    def simulated(latency_us: float) -> float:
        h = dataclasses.replace(hw, link=dataclasses.replace(hw.link, latency_us=latency_us))
        return float(np.median(simulate_des(trace, small, h, "lru", 0, dtype=_dtype(backend)).step_times))

    lo, hi = 0.0, max(hw.link.latency_us, 1.0)
    if simulated(lo) >= real:
        return dataclasses.replace(hw, link=dataclasses.replace(hw.link, latency_us=0.0))
    while simulated(hi) < real:
        hi *= 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if simulated(mid) < real else (lo, mid)
    return dataclasses.replace(hw, link=dataclasses.replace(hw.link, latency_us=hi))


def _dtype(backend: str) -> str:
    from moesim.replay.compute import DTYPE

    return DTYPE[backend]


def _disk_link(model: ModelSpec, repeats: int, workdir, seed: int) -> Link:
    """Reads of experts from files laid out as the CPU replay writes them, pages dropped after each."""
    from moesim.replay.cpu import ExpertFiles

    folder = Path(workdir) if workdir is not None else Path(tempfile.gettempdir())
    expert_bytes = 12 * model.d_model * model.d_expert
    # the expert files the replay writes (all layers, up to 4 GB), read at random (layer, expert):
    # sequential or repeated reads of a few experts are served by read-ahead and the host's caches
    layers = int(max(1, min(model.num_layers, 4e9 // (expert_bytes * model.num_experts))))
    shape = ModelSpec(model.name, "", "", layers, model.num_experts, 1, model.d_model, model.d_expert)
    tmp = Path(tempfile.mkdtemp(prefix="moesim-calibrate-", dir=folder))
    try:
        files = ExpertFiles(tmp, shape)
        files.write(seed)
        size = files.expert_bytes
        buf = np.empty(files.expert_floats, np.float32)
        fds = [os.open(files.path(layer), os.O_RDONLY) for layer in range(layers)]
        n = layers * model.num_experts
        order = np.random.default_rng(seed).permutation(np.tile(np.arange(n), 5 * repeats // n + 1))
        which = iter(order.tolist())

        def read(nbytes):
            def go():
                obj = next(which)
                fd, offset = fds[obj // model.num_experts], (obj % model.num_experts) * size
                os.preadv(fd, [memoryview(buf).cast("B")[:nbytes]], offset)
                os.posix_fadvise(fd, offset, size, os.POSIX_FADV_DONTNEED)
            return go

        try:
            # the mean, not the median: a disk's slow reads are part of what a decode step waits for
            full, page = float(_times(read(size), 3 * repeats).mean()), _median(read(PAGE), repeats)
        finally:
            for fd in fds:
                os.close(fd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    latency = min(page, full)
    bandwidth = (size - PAGE) / max(full - latency, 1e-9)
    return Link("disk reads", gbps=bandwidth / 1e9, efficiency=1.0, latency_us=latency * 1e6, engines=1)


def _copy_link(model: ModelSpec, repeats: int, seed: int, torch) -> tuple[Link, float]:
    """Host-to-device copies on a copy stream: the pinned line fitted over sizes, and pageable GB/s."""
    numel = 3 * model.d_model * model.d_expert
    gen = torch.Generator().manual_seed(seed)
    pinned = torch.randn((DISTINCT, numel), generator=gen).to(torch.bfloat16).pin_memory()
    pageable = torch.empty((DISTINCT, numel), dtype=torch.bfloat16)
    pageable.copy_(pinned)
    dst = torch.empty(numel, dtype=torch.bfloat16, device="cuda")
    stream = torch.cuda.Stream()

    def per_copy(src, n: int) -> float:
        """Seconds per copy of n elements, DISTINCT copies back to back on the copy stream (mean of repeats)."""
        samples = []
        for _ in range(repeats + 1):  # the first is a warm-up
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                start.record(stream)
                for k in range(DISTINCT):
                    dst[:n].copy_(src[k, :n], non_blocking=True)
                end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / DISTINCT)
        return float(np.mean(samples[1:]))

    sizes = np.array([PAGE // 2, numel // 8, numel // 4, numel // 2, numel])
    seconds = np.array([per_copy(pinned, int(n)) for n in sizes])
    slope, intercept = np.polyfit(2.0 * sizes, seconds, 1)
    if not slope > 0:
        raise MoesimError(f"host-to-device copies did not take longer with size ({seconds.tolist()} s for "
                          f"{(2 * sizes).tolist()} bytes): no bandwidth can be fitted; is the GPU busy?")
    pageable_gbps = 2.0 * numel / per_copy(pageable, numel) / 1e9
    link = Link(f"pinned host-to-device copies ({torch.cuda.get_device_name()})", gbps=1.0 / slope / 1e9,
                efficiency=1.0, latency_us=max(intercept, 0.0) * 1e6, engines=1)
    return link, pageable_gbps
