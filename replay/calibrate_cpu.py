"""The host CPU's part of `moesim calibrate`: the ``[cpu]`` section, measured rather than assumed.

The simulator times an expert on the host CPU as ``task + max(bytes / DRAM bandwidth, 2·params·T /
FLOP/s)`` (``moesim.sim.costs.cpu_expert_s``). Each term is measured on the replay's own code, with
the threads the replay computes with:

1. **DRAM bandwidth reached**: a streaming read (a sum) of a buffer at least twice the last-level
   cache — what STREAM's read kernels measure — median of ``repeats``;
2. **FLOP/s of the expert kernel** in the replay's weight format: ``ComputeStream.expert`` on
   ``BOUND_TOKENS`` tokens, where it is compute-bound, over a pool of distinct experts larger than
   the cache (so the weights come from DRAM, as a decoding step's do);
3. **fixed cost per expert** (``task_us``): the 1-token time less the larger of the two terms, never
   below zero;
4. **per CPU layer** (``sync_us``), on the CPU backend: the replay runs a log with every layer on the CPU
   and the per-layer difference between replay and simulation is the executor's hand-off (there is
   no PCIe trip on this backend); on a CUDA machine it keeps the preset's value, which the CUDA
   replay cannot yet measure.

The ISA is read from /proc/cpuinfo; the rates measured replace the ISA table's. The section's RAM is
the host's physical memory.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from moesim.replay.compute import DTYPE, ComputeStream
from moesim.sim.local_machine import cpuinfo_ghz, isa
from moesim.sim.machine import CPU, Hardware
from moesim.sim.cpu_rates import FORMAT_CLASS
from moesim.tracegen.models import ModelSpec

BOUND_TOKENS = 64  # an expert on this many tokens is compute-bound on any CPU


def _median_s(fn, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def host_cpu(model: ModelSpec, backend: str, repeats: int, seed: int, pool: int, cache: int, threads: int) -> CPU:
    """Measure the DRAM bandwidth, the expert kernel's FLOP/s and its fixed cost, with ``threads`` threads."""
    work = ComputeStream(model, seed, "cpu")
    torch = work.torch
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        stream = torch.ones(max(2 * cache, 256 << 20) // 4, dtype=torch.float32)
        stream.sum()
        bandwidth = stream.numel() * 4 / _median_s(stream.sum, repeats)
        del stream
        gen = torch.Generator().manual_seed(seed)
        weights = [torch.randn(work.expert_numel, generator=gen).to(work.dtype) for _ in range(pool)]

        def per_expert(tokens: int) -> float:
            x = work.tokens(tokens)
            out = work.scratch(x)

            def sweep():
                for w in weights:
                    work.expert(x, out, w, tokens)
            sweep()  # warm up
            return _median_s(sweep, max(3, repeats // 3)) / len(weights)

        params, nbytes = model.expert_params, weights[0].numel() * weights[0].element_size()
        flops = 2.0 * params * BOUND_TOKENS / per_expert(BOUND_TOKENS)
        task = max(per_expert(1) - max(nbytes / bandwidth, 2.0 * params / flops), 0.0)
    finally:
        torch.set_num_threads(before)
    rates = {f"{cls}_gflops": 0.0 for cls in ("fp32", "bf16", "int8", "int4")}
    rates[f"{FORMAT_CLASS[DTYPE[backend]] if backend == 'cpu' else 'fp32'}_gflops"] = flops / 1e9
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    return CPU(f"{isa()} host, {threads} thread(s), measured", threads, cpuinfo_ghz() or 1.0, isa(), bandwidth / 1e9, ram,
               dram_eff=1.0, kernel_eff=1.0, task_us=task * 1e6, **rates)


def fit_cpu_layer(hw: Hardware, model: ModelSpec, replayed, trace) -> Hardware:
    """``sync_us`` from an all-CPU replay: the per-layer difference between replay and simulation
    (``replayed(hw, trace)`` gives their mean step times)."""
    hw = dataclasses.replace(hw, cpu=dataclasses.replace(hw.cpu, sync_us=0.0))
    real, simulated = replayed(hw, trace)
    per_layer = max((real - simulated) / model.num_layers, 0.0)
    return dataclasses.replace(hw, cpu=dataclasses.replace(hw.cpu, sync_us=per_layer * 1e6))
