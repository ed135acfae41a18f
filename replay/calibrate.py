"""`moesim calibrate`: measure this machine and write the hardware file the simulator reads.

For one model's dims (cut and scaled as the replay will run them), on the replay's backend, it fits
the simulator's own formulas (``moesim.sim.costs``; the ``[compute]`` table, ``MeasuredCompute``) to the
replay's own code, timed with garbage collection off after a warm-up:

1. **The copy path**, ``[link]`` = latency + size / bandwidth:
   - cpu: reads of whole experts (mean of 3 x ``repeats``) and of one 4 KiB page (median) at random
     places in expert files laid out as the replay writes them, each followed by dropping the pages;
   - cuda: host-to-device copies from pinned memory on a copy stream at six sizes up to one expert or 32 MiB,
     timed with events, fitted by least squares (the pageable bandwidth is measured and reported).
2. **Compute**, by least squares over a grid of the replay's ``ComputeStream`` calls: a layer (projections,
   attention over the KV cache, router) at T tokens and ctx KV tokens, ``layer_s + layer_token_s · T
   + layer_ctx_s · ctx``; one expert on T tokens, ``expert_s + expert_token_s · (T − 1)``; a row's
   once-only work after its last MoE layer (dense layers, output head), ``row_s + row_token_s · T``. Experts are
   computed in turn from a pool of distinct weights twice the size of the last-level cache (a GPU's
   L2, a CPU's L3), so that their weights come from memory as a decoding step's do: the simulator
   has one expert time, and a model's experts (the cache's slots) exceed any cache by far.
3. **The executor's overhead**: the replay itself runs two all-hit logs (1 or k experts per layer
   and step, taken in turn from a set of resident experts as large as that pool, each a hit once
   the set is loaded); the per-layer and per-expert difference between replay and simulation is
   added to ``layer_s`` and ``expert_s``, which so become the replay's own (the difference may be
   negative: the kernels timed alone slower than the executor's calls, this host's bandwidth moving
   between them). A term the replays put below zero by more than noise is refused
   (``moesim.replay.calibrate_cpu.nonnegative_s``).
4. **Copies as the executor sees them**: the replay runs an all-miss log (no cache, every expert
   copied when routed) three times, before step 3's replays (refused where one run's mean step is more than
   ``MOST_SPREAD`` times another's); the copy time per expert becomes the one at which the simulated time per token
   equals the median replayed one (by bisection: the simulation is monotone in it). A slower replay adds latency
   per copy (hand-off to the copy stream and back); a faster one scales the microbenchmark's latency and transfer
   time down alike. A copy faster than 1/``FASTEST_COPY`` of the microbenchmark's says the executor's overhead was
   fitted too large, and the calibration is refused.

5. **The host CPU**, ``[cpu]`` (``moesim.replay.calibrate_cpu``): the CPU model's rates fitted to the
   replay's expert kernel in fp32 and bf16 at every thread count, as ``--engine llama.cpp`` fits
   llama.cpp's (per-thread unpack and product rates, the fixed cost per expert, the DRAM share),
   every core computing; and (CPU backend) the executor's cost per CPU layer from a replay with
   every layer's experts on the CPU.

``moe_launch_s`` and ``expert_launch_s`` stay 0: the replay's launches are inside the measured
layer and expert times. The ``[gpu]`` section only names the device.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError, named
from moesim.replay.calibrate_cpu import fit_cpu_layer, host_cpu, mean_se, nonnegative_s
from moesim.replay.compute import DTYPE, ComputeStream, available_bytes, require_torch
from moesim.replay.run import no_gc, replay
from moesim.replay.scratch import scratch, work_folder
from moesim.sim.config import Config
from moesim.sim.strategies import STRATEGIES
from moesim.sim.costs import link_copy_s
from moesim.sim.des import simulate_des
from moesim.sim.machine import GPU, Hardware, Link, MeasuredCompute
from moesim.tracegen.models import ModelSpec

PAGE = 4096
DISTINCT = 8  # the smallest pool of distinct experts computed in turn
FASTEST_COPY = 4  # a copy the all-miss replays fit may be this many times faster than the link's microbenchmark
MOST_SPREAD = 3  # the three all-miss replays' mean steps may differ by this factor
LINK_SPAN = 32 << 20  # host-to-device copies are timed up to one expert or this many bytes, whichever is larger
TOKENS = (1, 2, 4, 8)  # expert and layer grids
KEYS_PER_TOKEN = (0, 256, 1024)
EXECUTOR_LAYERS = 2  # the executor's runs cut the model to this many layers (overheads are per layer)


@dataclass(frozen=True)
class Calibration:
    hardware: Hardware
    pageable_gbps: float | None = None  # cuda: host-to-device copies from pageable memory
    layer_overhead_s: float = 0.0       # the executor's own time per layer (in layer_s)
    expert_overhead_s: float = 0.0      # and per expert (in expert_s)
    microbenchmark: Link | None = None  # the link the copy microbenchmark found (before step 4)


def _times(fn, repeats: int) -> np.ndarray:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return np.array(samples)


def _median(fn, repeats: int) -> float:
    return float(np.median(_times(fn, repeats)))


def host_memory_gb() -> float:
    """This host's RAM, GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30


def device_memory_gb(backend: str) -> float:
    """The memory of the calibrated machine's simulated GPU, GiB: the CUDA device's, or on the cpu backend host RAM,
    where the compute stream's buffers (this backend's "GPU") live."""
    if backend == "cpu":
        return host_memory_gb()
    from moesim.replay.cuda import require_cuda

    return require_cuda().cuda.get_device_properties(0).total_memory / 2 ** 30


def calibrate(model: ModelSpec, backend: str = "cpu", repeats: int = 15, workdir: str | Path | None = None,
              seed: int = 0) -> Calibration:
    """Measure copies, compute and the executor for ``model`` on ``backend``; a Hardware with a [compute] table."""
    if repeats < 3:
        raise MoesimError(f"{named('repeats')} must be at least 3, got {repeats}")
    if backend == "cpu":
        require_torch()  # before the expert files are written
        with no_gc():
            link, pageable = _disk_link(model, repeats, workdir, seed), None
        memory_gb = device_memory_gb(backend)
        device, name, cache = "cpu", f"cpu-{os.uname().nodename}", last_level_cache()
        free = available_bytes(None, "cpu")

        def sync() -> None:
            pass
    elif backend == "cuda":
        from moesim.replay.cuda import require_cuda

        torch = require_cuda()
        props = torch.cuda.get_device_properties(0)
        with no_gc():
            link, pageable = _copy_link(model, repeats, seed, torch)
        device, memory_gb, name = props.name, device_memory_gb(backend), f"cuda-{props.name.replace(' ', '-')}"
        cache, free = getattr(props, "L2_cache_size", 0), torch.cuda.mem_get_info()[0]
        sync = torch.cuda.synchronize
    else:
        raise MoesimError(f"calibration measures a machine: backend cpu or cuda, not {backend!r}"
                          + (" (virtual replays the simulator's own times)" if backend == "virtual" else ""))
    expert_bytes = model.expert_bytes(DTYPE[backend])
    pool = int(max(DISTINCT, min(math.ceil(2 * cache / expert_bytes), 0.25 * free // expert_bytes)))
    compute = _compute_table(model, backend, repeats, seed, sync, pool)
    gpu = GPU(f"{device} (roofline unused: see [compute])", 1.0, 1.0, hbm_gb=memory_gb)
    hw = Hardware(name, gpu, link, source=f"moesim calibrate --backend {backend}", compute=compute)
    # three all-miss replays (no cache: every routed expert copied), first: a machine that changes speed under them
    # (an H200's first replay in a process, while cuDNN built attention plans: docs/replay.md) is refused
    small, all_miss = _executor_log(model, repeats, seed)
    real = _steady([_replayed(hw, small, all_miss, 0, backend, workdir, seed, skip=0)[0].mean() for _ in range(3)])
    hw, per_layer, per_expert = _executor_overhead(hw, model, backend, repeats, workdir, seed, pool)
    measured = hw.link
    hw = _copy_fit(hw, small, all_miss, backend, real)
    host_free = available_bytes(None, "cpu")
    with no_gc():
        hw = dataclasses.replace(hw, cpu=host_cpu(model, repeats, seed, last_level_cache(), host_free))
    if backend == "cpu":
        hw = _cpu_layer_fit(hw, model, repeats, workdir, seed)
    return Calibration(hw, pageable, per_layer, per_expert, measured)


def _compute_table(model: ModelSpec, backend: str, repeats: int, seed: int, sync, pool: int) -> MeasuredCompute:
    """Least-squares fits of the replay's layer and expert calls to the [compute] table's formulas."""
    work = ComputeStream(model, seed, backend, row_keys=max(TOKENS) * max(KEYS_PER_TOKEN))
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
            x = work.row(0, t, t * keys, seqs=t)  # t decoding sequences
            # each layer ends with the router's choice on the host: one synchronisation per layer on a GPU
            layer_times.append(per_call(lambda k: (work.layer(x), sync()), DISTINCT))
            rows.append([1.0, t, t * keys])
    layer_s, layer_token_s, layer_ctx_s = np.linalg.lstsq(np.array(rows), np.array(layer_times), rcond=None)[0]
    expert_times = []
    for t in TOKENS:
        x = work.tokens(t)
        out = work.scratch(x)
        expert_times.append(per_call(lambda k: work.expert(x, out, weights[k % pool], t), pool))
    expert_s, expert_token_s = through_first(np.array(TOKENS) - 1.0, np.array(expert_times))
    work.row(0, 1, 0)  # the dense layers at no context (their attention is in the layer grid's terms)
    row_times = [per_call(lambda k: (work.finish(work.tokens(t)), sync()), DISTINCT) for t in TOKENS]
    row_s, row_token_s = through_first(np.array(TOKENS, np.float64), np.array(row_times))
    # no layer or expert is free (a hardware file takes no 0); a slope below 0 is kept at 0 (a GPU's kernel may be
    # flat in tokens; on a busy CPU the fit may dip below)
    for value, what in ((layer_s, "a layer's fixed time"), (expert_s, "an expert's fixed time")):
        if value <= 0:
            raise MoesimError(f"{what} came out at {value * 1e6:.3g} us from the microbenchmarks' fit: zero or "
                              "negative, the parts timed alone were slower than the fit allows (was the machine busy "
                              "while they ran?); calibrate again on an idle machine")
    return MeasuredCompute(model.name, layer_s=float(layer_s), expert_s=float(expert_s),
                   layer_token_s=max(float(layer_token_s), 0.0), layer_ctx_s=max(float(layer_ctx_s), 0.0),
                   expert_token_s=max(float(expert_token_s), 0.0), row_s=max(float(row_s), 0.0),
                   row_token_s=max(float(row_token_s), 0.0))


def through_first(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The line through the first point, one token's time (a decoding step's, exact), nearest the others in least
    squares: its value at x = 0 and its slope. (Times are a roofline's max, not a line: an unanchored fit over the
    grid would miss the one-token time by the curve's bend.)"""
    dx, dy = x - x[0], y - y[0]
    slope = float(dx @ dy / (dx @ dx))
    return float(y[0] - slope * x[0]), slope


def last_level_cache() -> int:
    """The whole machine's last-level cache in bytes (every slice and socket: ``llc_bytes``, as every core computes);
    32 MiB when sysfs does not say."""
    from moesim.sim.local_machine import llc_bytes, read_text

    return llc_bytes(read_text, os.cpu_count() or 1) or 32 << 20


def _executor_model(model: ModelSpec) -> ModelSpec:
    return dataclasses.replace(model, num_layers=min(EXECUTOR_LAYERS, model.num_layers))


def _executor_log(model: ModelSpec, repeats: int, seed: int):
    """The executor's model and a synthetic trace of it (the all-miss and all-CPU replays')."""
    from moesim.tracegen.synth import synth_trace

    small = _executor_model(model)
    return small, synth_trace(small.num_layers, small.num_experts, small.top_k, 1, max(16, 2 * repeats), seed=seed,
                              model=small.name)


def _replayed(hw: Hardware, model: ModelSpec, trace, capacity: int, backend: str, workdir, seed: int,
              skip: int) -> tuple[np.ndarray, np.ndarray]:
    """The step times of the replay and of its simulation on ``hw``, leaving out the first ``skip`` steps."""
    r = replay(trace, Config.build(policy="lru", capacity=capacity), hw, backend, workdir=workdir, seed=seed,
               model=model)
    return np.asarray(r.step_times[skip:], np.float64), np.asarray(r.sim_step_times[skip:], np.float64)


def all_hit_log(small: ModelSpec, n: int, resident: int, timed: int):
    """A trace of ``small`` routing ``n`` experts a layer a step, taken in turn from ``resident`` ones, and the steps
    until those are loaded (``fill``): replayed with ``resident`` slots a layer, every access after is a hit; then
    ``timed`` steps."""
    fill = math.ceil(resident / n)
    steps = np.arange(fill + timed)
    turn = (steps[:, None] * n + np.arange(n)[None, :]) % resident
    return _trace(small, np.broadcast_to(turn[:, None, :], (steps.size, small.num_layers, n))), fill


def _trace(model: ModelSpec, experts: np.ndarray):
    from moesim.tracegen.schema import DECODE, TraceMeta
    from moesim.tracegen.trace import Trace

    n = experts.shape[0]
    meta = TraceMeta(num_layers=model.num_layers, num_experts=model.num_experts, top_k=experts.shape[2],
                     model=model.name)
    return Trace(meta, experts.astype(np.int16), np.zeros(1, np.int32), np.array([0, n], np.int64),
                 np.arange(n, dtype=np.int32), np.full(n, DECODE, np.int8))


def _executor_overhead(hw: Hardware, model: ModelSpec, backend: str, repeats: int, workdir, seed: int, pool: int):
    """Replay all-hit logs with 1 and k experts per layer, taken in turn from ``pool`` resident
    experts (as many as fit a layer); the per-layer and per-expert residuals go into layer_s and expert_s."""
    small = _executor_model(model)
    resident = int(min(model.num_experts, max(model.top_k, math.ceil(pool / small.num_layers))))
    residual = {}  # per layer: (mean, standard error)
    for n in sorted({1, model.top_k}):
        trace, fill = all_hit_log(small, n, resident, max(8, repeats))
        real, simulated = _replayed(hw, small, trace, resident, backend, workdir, seed, skip=fill)
        residual[n] = mean_se((real - simulated) / small.num_layers)
        if n == 1:
            modelled = float(np.mean(simulated)) / small.num_layers  # a layer's simulated time, the row's share in
    k = model.top_k
    (one, one_se), (all_k, k_se) = residual[1], residual[k]
    c = hw.compute
    per_expert = (all_k - one) / (k - 1) if k > 1 else 0.0
    expert_s = nonnegative_s(c.expert_s + per_expert, math.hypot(one_se, k_se) / max(k - 1, 1),
                             "an expert's time in the replay", c.expert_s) or c.expert_s
    # the layer's residual, one - per_expert = (k·one - all_k) / (k - 1): its standard error
    layer_se = math.hypot(k * one_se, k_se) / (k - 1) if k > 1 else one_se
    # where the replays cannot tell a term from zero, the part timed alone stands (a file's times are positive)
    layer_s = nonnegative_s(c.layer_s + one - (expert_s - c.expert_s), layer_se, "a layer's fixed time in the replay",
                            modelled) or c.layer_s
    compute = dataclasses.replace(c, layer_s=layer_s, expert_s=expert_s)
    return dataclasses.replace(hw, compute=compute), layer_s - c.layer_s, expert_s - c.expert_s


def _cpu_layer_fit(hw: Hardware, model: ModelSpec, repeats: int, workdir, seed: int) -> Hardware:
    """The executor's cost per CPU layer, from a replay with every layer's experts on the CPU (the strategy that
    places whole layers there: its ``places`` parameter counts them; ``fit_cpu_layer``)."""
    small, trace = _executor_log(model, repeats, seed)

    def replayed(machine: Hardware, t) -> tuple:
        placing = next(m for m in STRATEGIES.values() if m.cpu and m.places)
        config = Config.build(strategy=placing.name, **{placing.places: small.num_layers})
        r = replay(t, config, machine, "cpu", workdir=workdir, seed=seed, model=small)
        return r.step_times, r.sim_step_times

    return fit_cpu_layer(hw, small, replayed, trace)


def _steady(step_s: list) -> float:
    """The median of replays' mean steps (one slow spell of the disk must not set every copy's time), refused where
    the slowest is more than ``MOST_SPREAD`` times the fastest: the machine changed speed under the replays."""
    if max(step_s) > MOST_SPREAD * min(step_s):
        raise MoesimError(f"the same all-miss replay took {min(step_s) * 1e3:.2f} to {max(step_s) * 1e3:.2f} ms a step "
                          f"in three runs: this machine's speed moved under them; calibrate again on an idle machine")
    return float(np.median(step_s))


def _copy_fit(hw: Hardware, small: ModelSpec, trace, backend: str, real: float) -> Hardware:
    """The copy time per expert at which the simulation of the all-miss ``trace`` on ``small`` matches its replayed
    step, ``real`` s: extra latency per copy when the replay is slower than the microbenchmark says, latency and
    transfer time scaled down alike when it is faster (the simulator only ever copies experts of one size)."""
    link = hw.link
    micro = link_copy_s(link, small.expert_bytes(DTYPE[backend]))

    def with_copy(seconds: float) -> Hardware:
        if seconds >= micro:
            fitted = dataclasses.replace(link, latency_us=link.latency_us + (seconds - micro) * 1e6)
        else:
            factor = seconds / micro
            fitted = dataclasses.replace(link, latency_us=link.latency_us * factor, gbps=link.gbps / factor)
        return dataclasses.replace(hw, link=fitted)

    def simulated(seconds: float) -> float:
        return simulate_des(trace, Config.build(policy="lru", capacity=0, dtype=DTYPE[backend]), small,
                            with_copy(seconds)).tpot_s

    lo, hi = 0.0, micro
    while simulated(hi) < real:
        lo, hi = hi, 2 * hi
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if simulated(mid) < real else (lo, mid)
    if hi < micro / FASTEST_COPY:
        # no copy outruns the link's own microbenchmark by that much: the executor's overhead, fitted just before
        # from all-hit replays, is too large (those replays ran slower than the all-miss ones)
        raise MoesimError(f"the replay's all-miss steps ({real * 1e3:.2f} ms) leave {hi * 1e6:.1f} us a copy, under "
                          f"1/{FASTEST_COPY} of the {micro * 1e6:.0f} us the link's microbenchmark took: the replays "
                          f"that fitted the executor's overhead ran slower than the all-miss ones; calibrate again "
                          f"on an idle machine (where it happens again, the two-layer fit of that overhead may be "
                          f"too large on this machine: docs/replay.md, 'Measured on a GPU, second session')")
    return with_copy(hi)


def _disk_link(model: ModelSpec, repeats: int, workdir, seed: int) -> Link:
    """Reads of experts from files laid out as the CPU replay writes them, pages dropped after each."""
    from moesim.replay.cpu import ExpertFiles

    folder = work_folder(workdir)
    expert_bytes = 12 * model.d_model * model.d_expert
    # the expert files the replay writes (all layers, up to 4 GB), read at random (layer, expert):
    # sequential or repeated reads of a few experts are served by read-ahead and the host's caches
    layers = int(max(1, min(model.num_layers, 4e9 // (expert_bytes * model.num_experts))))
    shape = ModelSpec(model.name, "", "", layers, model.num_experts, 1, model.d_model, model.d_expert)
    with scratch(folder, "calibrate") as tmp:
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
    latency = min(page, full)
    bandwidth = (size - PAGE) / max(full - latency, 1e-9)
    return Link("disk reads", gbps=bandwidth / 1e9, efficiency=1.0, latency_us=latency * 1e6, engines=1)


def copy_line(nbytes: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """(GB/s, latency in us) of the line ``seconds = latency + nbytes / bandwidth``, fitted by least squares on
    relative errors (the small copies set the latency, the large ones the bandwidth); refused where the times do
    not grow with size."""
    slope, intercept = np.polyfit(nbytes, seconds, 1, w=1.0 / seconds)
    if not slope > 0:
        raise MoesimError(f"host-to-device copies did not take longer with size ({seconds.tolist()} s for "
                          f"{nbytes.tolist()} bytes): no bandwidth can be fitted; is the GPU busy?")
    return float(1.0 / slope / 1e9), float(max(intercept, 0.0) * 1e6)


def _copy_link(model: ModelSpec, repeats: int, seed: int, torch) -> tuple[Link, float]:
    """Host-to-device copies on a copy stream: the pinned line fitted over sizes, and pageable GB/s."""
    numel = 3 * model.d_model * model.d_expert
    # a small expert's copy is all latency (about 10 us through torch, whatever its size up to 200 KB on an H200):
    # the sizes reach LINK_SPAN so that the bandwidth shows, and the line is fitted on relative errors so that the
    # small copies still set the latency
    span = max(numel, LINK_SPAN // 2)  # in bf16 elements
    gen = torch.Generator().manual_seed(seed)
    pinned = torch.randn((DISTINCT, span), generator=gen).to(torch.bfloat16).pin_memory()
    pageable = torch.empty((DISTINCT, numel), dtype=torch.bfloat16)
    pageable.copy_(pinned[:, :numel])
    dst = torch.empty(span, dtype=torch.bfloat16, device="cuda")
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

    sizes = np.unique(np.geomspace(PAGE // 2, span, 6).astype(np.int64))
    gbps, latency_us = copy_line(2.0 * sizes, np.array([per_copy(pinned, int(n)) for n in sizes]))
    pageable_gbps = 2.0 * numel / per_copy(pageable, numel) / 1e9
    link = Link(f"pinned host-to-device copies ({torch.cuda.get_device_name()})", gbps=gbps, efficiency=1.0,
                latency_us=latency_us, engines=1)
    return link, pageable_gbps
