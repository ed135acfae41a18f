"""`moesim calibrate`: measure this machine and write the hardware file the simulator reads.

For one model's dims (cut and scaled as the replay will run them), on the replay's backend:

- the copy path, as ``[link]`` (latency + size / bandwidth):
  - cpu: reads of whole experts (mean of 3 x ``repeats``) and of one 4 KiB page (median) at random
    places in expert files laid out as the replay writes them, each followed by dropping the pages;
    the page read is the latency, the line from it to the whole expert the bandwidth, so one
    expert's simulated copy takes the measured mean;
  - cuda: back-to-back host-to-device copies on a copy stream at five sizes up to one expert,
    timed with events and fitted by least squares; from pinned memory, as the replay copies (the
    pageable bandwidth is measured too and reported, ``Calibration.pageable_gbps``);
- the expert FFN on 1 and on 8 tokens (``expert_s``, and the per-token slope ``expert_token_s``);
- one layer's attention projections and router on one token, up to the router's choice being on
  the host (``layer_s``).

They are the very functions the replay runs (``moesim.replay.compute`` and the backend), so the
simulator times what the replay executes. The ``[gpu]`` section only names the device: the
``[compute]`` table replaces the roofline for this model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim import MoesimError
from moesim.replay.compute import Compute as Work
from moesim.sim.hardware import GPU, Compute, Hardware, Link
from moesim.sim.models import ModelSpec

PAGE = 4096
DISTINCT = 8  # experts computed in turn: one expert computed again and again would sit in the CPU's caches


@dataclass(frozen=True)
class Calibration:
    hardware: Hardware
    pageable_gbps: float | None = None  # cuda: host-to-device copies from pageable memory


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
    """Measure copies and compute for ``model`` on ``backend``; a Hardware with a [compute] table."""
    if repeats < 3:
        raise MoesimError(f"--repeats must be at least 3, got {repeats}")
    if backend == "cpu":
        link, pageable = _disk_link(model, repeats, workdir, seed), None
        device, memory_gb, name = "cpu", 0.0, f"cpu-{os.uname().nodename}"

        def sync() -> None:
            pass
    elif backend == "cuda":
        from moesim.replay.cuda import require_cuda

        torch = require_cuda()
        props = torch.cuda.get_device_properties(0)
        link, pageable = _copy_link(model, repeats, seed, torch)
        device, memory_gb, name = props.name, props.total_memory / 1e9, f"cuda-{props.name.replace(' ', '-')}"
        sync = torch.cuda.synchronize
    else:
        raise MoesimError(f"unknown backend {backend!r} (choose from cpu, cuda)")
    work = Work(model, seed, backend)
    torch = work.torch
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(work.expert_numel, generator=gen).to(work.device, work.dtype) for _ in range(DISTINCT)]

    def per_call(fn) -> float:
        """Median over ``repeats`` of DISTINCT calls in a row (then the device drained), per call."""
        def calls():
            for k in range(DISTINCT):
                fn(k)
            sync()
        calls()  # warm up
        return _median(calls, repeats) / DISTINCT

    x1, x8 = work.tokens(1), work.tokens(8)
    expert_1 = per_call(lambda k: work.expert(x1, weights[k]))
    expert_8 = per_call(lambda k: work.expert(x8, weights[k]))
    # each layer ends with the router's choice on the host: one synchronisation per layer on a GPU
    layer = per_call(lambda k: (work.layer(x1), sync()))
    compute = Compute(model.name, layer_s=layer, expert_s=expert_1,
                      expert_token_s=max(expert_8 - expert_1, 0.0) / 7, moe_launch_s=0.0)
    gpu = GPU(f"{device} (roofline unused: see [compute])", 1.0, 1.0, hbm_gb=memory_gb)
    return Calibration(Hardware(name, gpu, link, source=f"moesim calibrate --backend {backend}", compute=compute),
                       pageable)


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
    pageable_gbps = 2.0 * numel / per_copy(pageable, numel) / 1e9
    link = Link(f"pinned host-to-device copies ({torch.cuda.get_device_name()})", gbps=1.0 / slope / 1e9,
                efficiency=1.0, latency_us=max(intercept, 0.0) * 1e6, engines=1)
    return link, pageable_gbps
