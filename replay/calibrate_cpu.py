"""The host CPU's part of `moesim calibrate` (the torch replay): the ``[cpu]`` section, fitted as llama.cpp's is.

The simulator times an expert of B bytes in format f on T tokens on the host CPU as
``task + max(B / min(D, n · u_f), 2·params·T / (n · m_f))`` with n threads (``moesim.sim.costs.cpu_expert_s``).
This times the replay's own expert kernel (``moesim.replay.compute.swiglu``) in each format torch computes at speed
on a CPU (``TORCH_FORMATS``; its f16 products fall back to a scalar loop, 0.7 GFLOP/s on a Zen 4 core), at 1, 2,
4, ... and every physical core: on one token at the expert's width and at half of it, and on ``BOUND_TOKENS``
tokens at its width, each the median of ``repeats`` sweeps over a pool of distinct experts twice the last-level
cache (their weights come from DRAM, as a decoding step's do), a DRAM probe before and after. The CPU model's fit
(``moesim.replay.cpu_fit``, the one ``moesim calibrate --engine llama.cpp`` uses) then gives, by least squares on
the log times: each format's unpack rate per thread (``unpack_gbps``), the fixed cost per expert (``task_us``, which
the narrow experts against the wide ones decide), the share of the probe's rate the kernel reaches (``dram_eff``)
and, on the many-token runs, each format's product rate per thread (``matmul_gflops``).

The rest is this machine as ``--hardware local`` detects it (physical cores, clock, ISA from /proc/cpuinfo, RAM
from the OS), computing with every core, as the replay does. A kernel timed alone takes no thread barrier (torch's
own fork and join are inside its time), so the barrier costs are 0; the executor's cost per CPU layer
(``sync_us``) comes from a replay with every layer's experts on the CPU (``fit_cpu_layer``). A layer's or an
expert's time the executor's replays put below zero is refused (``nonnegative_s``): the parts timed alone would
overstate the executor, and no file could describe it (a negative ``sync_us`` is still taken as 0: see there).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Callable

import numpy as np

from moesim.errors import MoesimError
from moesim.replay.compute import require_torch, swiglu
from moesim.replay.cpu_fit import KernelRun, fit, fit_matmul
from moesim.sim.local_machine import detect_cpu, measure_dram_gbps, thread_counts
from moesim.sim.machine import CPU, Hardware
from moesim.tracegen.models import ModelSpec

TORCH_FORMATS = ("fp32", "bf16")  # the formats torch's CPU kernels compute at speed
BOUND_TOKENS = 64      # an expert on this many tokens is compute-bound on any CPU
WIDTHS = (1.0, 0.5)    # the expert's width and half of it, on one token: what the narrower does not save is fixed
MIN_POOL = 2           # distinct experts at least, computed in turn
NOISE_SE = 2.0         # standard errors within which a negative fitted time is taken as zero
# and the share of the time an overhead is added to: on this project's host an expert's kernel timed alone moved
# by up to 40% between calibrations minutes apart (its DRAM bandwidth swings), and a replay's by as much
NOISE_SHARE = 0.25


def _median_s(fn, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def kernel_runs(model: ModelSpec, repeats: int, seed: int, cache: int, free: int, threads: list[int],
                progress: Callable[[str], None] = lambda _: None) -> dict:
    """The expert kernel timed in every format, thread count, width and token count (module docstring): a list of
    ``KernelRun`` per format."""
    torch = require_torch()
    before = torch.get_num_threads()
    gen = torch.Generator().manual_seed(seed)
    runs: dict = {}
    try:
        for fmt in TORCH_FORMATS:
            dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[fmt]
            for width in WIDTHS:
                de = max(1, round(model.d_expert * width))
                numel = 3 * model.d_model * de
                nbytes = numel * torch.finfo(dtype).bits // 8
                pool = max(MIN_POOL, min(math.ceil(2 * cache / nbytes), int(0.25 * free // nbytes)))
                weights = [(torch.randn(numel, generator=gen) / model.d_model ** 0.5).to(dtype) for _ in range(pool)]
                for n in threads:
                    torch.set_num_threads(n)
                    progress(f"{fmt} experts {de} wide, {n} thread(s)")
                    probe = measure_dram_gbps()
                    timed = {}
                    for tokens in (1, BOUND_TOKENS) if width == 1.0 else (1,):
                        x = (torch.randn(tokens, model.d_model, generator=gen) * 0.1).to(dtype)

                        def sweep():
                            for w in weights:
                                swiglu(torch, x, w, model.d_model, de)
                        sweep()  # warm up
                        timed[tokens] = _median_s(sweep, repeats) / pool
                    probe = (probe + measure_dram_gbps()) / 2
                    runs.setdefault(fmt, []).extend(
                        KernelRun(3 * model.d_model * de, fmt, nbytes, tokens, n, s, probe) for tokens, s in timed.items())
                weights.clear()  # before the next pool is made
    finally:
        torch.set_num_threads(before)
    return runs


def host_cpu(model: ModelSpec, repeats: int, seed: int, cache: int, free: int,
             progress: Callable[[str], None] = lambda _: None) -> CPU:
    """This machine's CPU computing the replay's experts with every core, the rates fitted to its kernel's times."""
    machine, _ = detect_cpu()  # the CPU alone: a GPU's detection has nothing to say here
    threads = thread_counts()
    runs = kernel_runs(model, repeats, seed, cache, free, threads, progress)
    return fit_kernels(machine, runs, threads[-1], f"torch {require_torch().__version__}")


def fit_kernels(machine: CPU, runs: dict, threads: int, engine: str) -> CPU:
    """``machine`` computing with ``threads`` threads, its rates fitted to kernel ``runs`` (a list per format): the
    probes' median as its DRAM rate, no barrier (module docstring)."""
    one = {fmt: [r for r in rs if r.tokens == 1] for fmt, rs in runs.items()}
    probes = [r.dram_gbps for rs in runs.values() for r in rs]
    start = dataclasses.replace(machine, name=f"{machine.name}, {engine}", dram_gbps=statistics.median(probes)
                                / machine.sockets, dram_eff=1.0, threads=threads, task_us=0.0, barrier_base_us=0.0,
                                barrier_thread_us=0.0, unpack_gbps=(), matmul_gflops=())
    cpu, _ = fit(start, [], one)
    matmul = {fmt: fit_matmul(cpu, fmt, [r for r in rs if r.tokens > 1]) for fmt, rs in runs.items()}
    return dataclasses.replace(cpu, matmul_gflops=tuple(sorted(matmul.items())))


def mean_se(differences) -> tuple[float, float]:
    """The mean of per-step differences between a replay and its simulation, and its standard error."""
    d = np.asarray(differences, np.float64)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0


def nonnegative_s(value: float, se: float, what: str, modelled: float = 0.0) -> float:
    """A time the replays fit (s), ``value`` with standard error ``se``, part of ``modelled`` s of simulated time
    (an expert's, a layer's): itself, or 0 where it is below zero by less than ``NOISE_SE`` standard errors or
    ``NOISE_SHARE`` of that time (the parts timed alone and the replays minutes apart); refused where it is further
    below (no executor takes negative time: the parts it was fitted against were timed wrong)."""
    if value >= 0:
        return value
    if -value <= max(NOISE_SE * se, NOISE_SHARE * modelled):
        return 0.0
    raise MoesimError(f"{what} came out at {value * 1e6:.0f} us (standard error {se * 1e6:.0f} us): negative, the "
                      "parts timed alone were slower than the executor's whole (was the machine busy while they ran?); "
                      "calibrate again on an idle machine")


def fit_cpu_layer(hw: Hardware, model: ModelSpec, replayed, trace) -> Hardware:
    """``sync_us`` from an all-CPU replay: the per-layer difference between replay and simulation
    (``replayed(hw, trace)`` gives their step times); a negative one is taken as 0 (below)."""
    hw = dataclasses.replace(hw, cpu=dataclasses.replace(hw.cpu, sync_us=0.0))
    real, simulated = replayed(hw, trace)
    # not refused yet, unlike a layer's or an expert's time: on a tiny model (experts of a few hundred KB, cached)
    # the replay's CPU layers ran 0.55 ms faster than the kernels timed from DRAM predict, on every CI run; taken as
    # 0 until the CPU model sees caches
    per_layer = max(float(np.mean((np.asarray(real) - np.asarray(simulated)) / model.num_layers)), 0.0)
    return dataclasses.replace(hw, cpu=dataclasses.replace(hw.cpu, sync_us=per_layer * 1e6))
