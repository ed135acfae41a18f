"""What a machine is to the simulator: its GPU, the link experts cross, its host CPU and DRAM, its SSD.

Memory sizes are GiB (2^30 bytes), as GPUs and DIMMs are sold and nvidia-smi counts; bandwidths GB/s (1e9
bytes/s), as vendors quote them. The presets and the TOML files are in ``moesim.sim.hardware``; every key,
its unit, default and source in docs/hardware.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from moesim.sim.cpu_rates import (ATTN_FLOP_PER_CYCLE, BARRIER_BASE_US, BARRIER_THREAD_US, DRAM_EFF, FA_TILE_Q,
                                  FORMAT_CLASS, ISA_FAMILY, ISA_FLOP_PER_CYCLE, SYNC_US, WEIGHT_BYTES_PER_CYCLE)

# how an engine spreads its CPU work over sockets (its ``numa``, or the run's): one thread pool whose weights sit in
# one socket's DRAM (llama.cpp without --numa: pages land where the loader touched them); a pool per socket, each
# keeping a copy of the experts in its local DRAM and computing its share of each expert (kTransformers' archived
# local_chat built with USE_NUMA=1); or every socket reading its share of one copy (kt-kernel splits each expert over
# the nodes; llama.cpp --numa distribute maps the model without read-ahead, so its pages land in the DRAM of the
# threads that first read them)
ONE_POOL, PER_SOCKET, DISTRIBUTE = "one-pool", "per-socket", "distribute"
NUMA_LAYOUTS = (ONE_POOL, PER_SOCKET, DISTRIBUTE)
# a GPU's maker, and the backend llama.cpp runs on it (its devices' names: CUDA0, ROCm0, SYCL0, Metal)
VENDORS = {"nvidia": "CUDA", "amd": "ROCm", "intel": "SYCL", "apple": "Metal"}


@dataclass(frozen=True)
class GPU:
    name: str
    hbm_gbps: float          # GB/s
    tflops: float            # dense bf16 (fp16 where the GPU has no bf16), 1e12 FLOP/s
    hbm_gb: float            # memory, GiB
    mem_eff: float = 0.8     # fraction of HBM bandwidth a decode kernel reaches
    flop_eff: float = 0.6    # fraction of peak FLOP/s a GEMM reaches
    launch_us: float = 5.0   # per kernel launch
    # its memory is the host's (Apple M-series, AMD Strix Halo, NVIDIA DGX Spark): hbm_gb is the share of it the GPU may
    # map, hbm_gbps the memory's bandwidth, which the CPU shares; nothing is copied to it
    unified: bool = False
    vendor: str = "nvidia"   # who makes it (``VENDORS``): which engines' GPU backends run on it

    @property
    def mem_bw(self) -> float:
        """Bytes/s a kernel streams from HBM."""
        return self.hbm_gbps * 1e9 * self.mem_eff

    @property
    def flops(self) -> float:
        return self.tflops * 1e12 * self.flop_eff


@dataclass(frozen=True)
class Link:
    name: str
    gbps: float              # nominal GB/s, one direction
    efficiency: float = 0.8  # fraction a pinned copy reaches
    latency_us: float = 10.0
    engines: int = 1         # copy engines working in parallel (transfers stay FIFO on each)

    @property
    def bandwidth(self) -> float:
        return self.gbps * 1e9 * self.efficiency


@dataclass(frozen=True)
class CPU:
    """The host CPU: what computes the experts kept in its DRAM (llama.cpp ``--n-cpu-moe``, kTransformers,
    Fiddler), and everything on a machine without a GPU. ``cores`` and ``dram_gbps`` are per socket, ``ram_gb``
    the whole machine's. An expert of B bytes on T tokens takes ``task_us + max(B / min(DRAM rate, unpack
    rate), 2·params·T / FLOP rate)`` (``moesim.sim.costs.cpu_expert_s``; the rates: ``moesim.sim.cpu_rates``, or
    measured: ``unpack_gbps``, ``matmul_gflops``)."""

    name: str
    cores: int               # physical cores per socket
    ghz: float               # all-core clock
    isa: str                 # a key of ISA_FLOP_PER_CYCLE
    dram_gbps: float         # nominal per socket: channels x MT/s x 8 B
    ram_gb: float            # DRAM, GiB, all sockets
    sockets: int = 1
    threads: int = 0         # threads the engine computes with (llama.cpp -t, kTransformers --cpu_infer); 0: every core
    dram_eff: float = DRAM_EFF  # share of the nominal bandwidth a streaming read reaches
    # DRAM read GB/s one core reaches alone (the misses it keeps in flight over the memory's latency): the threads
    # together read at most workers x this; 0: no per-core limit (``dram_bw``)
    core_gbps: float = 0.0
    kernel_eff: float = 0.5  # share of the ISA's peak FLOP/s an expert kernel reaches on many tokens
    task_us: float = 0.0     # per expert kernel besides the barriers (what ``moesim calibrate`` measures of the replay's)
    sync_us: float = SYNC_US  # per layer handed to the CPU: the activations' two trips, the waits, the graph split
    barrier_base_us: float = BARRIER_BASE_US    # a thread barrier: base_us + thread_us x (threads - 1)
    barrier_thread_us: float = BARRIER_THREAD_US
    # measured decode unpack rates: (format, GB/s of its weights one thread turns into dot products at one token)
    # pairs (``moesim calibrate --engine llama.cpp``); a format listed here is held to threads x its rate
    unpack_gbps: tuple = ()
    # measured matrix-product rates: (format, GFLOP/s one thread reaches on many tokens) pairs (prefill; the same
    # calibration); a format listed here is held to threads x its rate instead of the FLOP tables
    matmul_gflops: tuple = ()
    # measured rates of attention's products over the KV cache, GFLOP/s per thread, in ggml's flash attention's two
    # paths (``moesim.sim.cpu_rates``): a query row at a time (decode), tiles of query rows (prompts); 0: the table's
    attn_gflops: float = 0.0
    attn_tiled_gflops: float = 0.0
    # what each thread past the first adds to the one-row path's rate, a share of one thread's (measured: 1 where
    # its threads share the rows out evenly)
    attn_thread_eff: float = 1.0
    # this machine's own 80% decode interval (``moesim validate --engine llama.cpp --out``): measured / predicted over
    # llama.cpp decodes calibration did not run, 10th and 90th percentiles, and the share of them an interval from
    # the others held; 0: none measured (``moesim.sim.accuracy.interval``)
    band_low: float = 0.0
    band_high: float = 0.0
    band_held: float = 0.0

    @property
    def workers(self) -> int:
        """The threads that compute: ``threads``, at most one per core of every socket."""
        return min(self.threads or self.cores * self.sockets, self.cores * self.sockets)

    def barrier_s(self) -> float:
        """One barrier of the engine's threads (``moesim.sim.cpu_rates``)."""
        return (self.barrier_base_us + self.barrier_thread_us * (self.workers - 1)) * 1e-6

    def dram_bw(self, numa: str = ONE_POOL) -> float:
        """Bytes/s a streaming read of expert weights reaches: one socket's DRAM, or every socket's where the
        engine's threads read each socket's own (``numa``: a pool per socket, or one spread over them), and at most
        what the threads reach a core each (``core_gbps``)."""
        dram = self.dram_gbps * 1e9 * self.dram_eff * (1 if numa == ONE_POOL else self.sockets)
        return min(dram, self.workers * self.core_gbps * 1e9) if self.core_gbps else dram

    def unpack_bw(self, dtype: str) -> float:
        """Bytes/s of ``dtype`` weights the threads unpack into dot products at one token: measured
        (``unpack_gbps``), else from the table (inf: the format is not unpack-bound)."""
        measured = dict(self.unpack_gbps).get(dtype)
        if measured is not None:
            return self.workers * measured * 1e9
        per_cycle = WEIGHT_BYTES_PER_CYCLE[ISA_FAMILY[self.isa]].get(dtype)
        if per_cycle is None:
            return math.inf
        return self.workers * self.ghz * 1e9 * per_cycle

    def flops(self, dtype: str) -> float:
        """FLOP/s of an expert kernel whose weights are in ``dtype``: measured for the format (``matmul_gflops``),
        or from the ISA table."""
        own = dict(self.matmul_gflops).get(dtype)
        if own is not None:
            return self.workers * own * 1e9
        return self.workers * self.ghz * 1e9 * ISA_FLOP_PER_CYCLE[self.isa][FORMAT_CLASS.get(dtype, "int4")] * self.kernel_eff

    def attn_flops(self, queries):
        """FLOP/s of attention's products over the KV cache for micro-batches of ``queries`` query rows: one row at a
        time below ``FA_TILE_Q`` rows, on ``1 + attn_thread_eff x (workers - 1)`` threads' worth, in tiles at or above,
        on every worker (measured: ``attn_gflops``, ``attn_tiled_gflops``, ``attn_thread_eff``; else
        ``ATTN_FLOP_PER_CYCLE`` at the clock)."""
        one = self.attn_gflops or ATTN_FLOP_PER_CYCLE["one"] * self.ghz
        one = one * ((1 + self.attn_thread_eff * (self.workers - 1)) / self.workers)  # (x 1 exactly where it is 1)
        tiled = self.attn_tiled_gflops or ATTN_FLOP_PER_CYCLE["tiled"] * self.ghz
        return self.workers * 1e9 * np.where(np.asarray(queries) >= FA_TILE_Q, tiled, one)


@dataclass(frozen=True)
class SSD:
    name: str
    gbps: float              # sequential read, GB/s
    latency_us: float = 80.0


@dataclass(frozen=True)
class MeasuredCompute:
    """Measured compute times for one model on this machine (what `moesim calibrate` fits); they
    replace the roofline for that model (``moesim.sim.costs``). A layer's attention + router + shared
    experts take ``layer_s + layer_token_s · T + layer_ctx_s · ctx`` for T tokens whose sequences
    hold ctx KV tokens; one expert on T tokens ``expert_s + expert_token_s · (T − 1)``; a fused MoE
    kernel adds ``moe_launch_s``, a per-expert kernel ``expert_launch_s``."""

    name: str                # the model preset these were measured for
    layer_s: float
    expert_s: float
    layer_token_s: float = 0.0
    layer_ctx_s: float = 0.0
    expert_token_s: float = 0.0
    moe_launch_s: float = 0.0
    expert_launch_s: float = 0.0
    row_s: float = 0.0        # once per row after its last MoE layer (dense layers, output head): row_s + row_token_s·T
    row_token_s: float = 0.0


@dataclass(frozen=True)
class Hardware:
    """A machine; ``gpu`` (and its ``link``) None: CPU only, every weight on the host CPU (llama.cpp without a
    GPU). Several GPUs: ``gpu`` and ``link`` are the first (llama.cpp's CUDA0), ``more_gpus`` the others in device
    order, each a (GPU, Link) pair; ``split``: the layers a run places on each (``moesim.sim.layer_split``; the
    machine as a run simulated it), () before a run places them; ``shares``: where a run splits every layer over
    them instead (``moesim.sim.tensor_split``), each one's share of every matrix."""

    name: str
    gpu: GPU | None
    link: Link | None
    ssd: SSD | None = None
    source: str = field(default="", compare=False)
    compute: MeasuredCompute | None = None
    cpu: CPU | None = None
    more_gpus: tuple = ()
    split: tuple = ()
    shares: tuple = ()

    @property
    def gpus(self) -> tuple:
        """Every GPU with its link, (GPU, Link) pairs in device order; () without a GPU."""
        return () if self.gpu is None else ((self.gpu, self.link), *self.more_gpus)

    def device(self, i: int) -> "Hardware":
        """The machine with its ``i``-th GPU (and that GPU's link) as its only one."""
        gpu, link = self.gpus[i]
        return replace(self, gpu=gpu, link=link, more_gpus=(), split=(), shares=())

    def without_gpus(self, name: str) -> "Hardware":
        """The machine with its GPUs left out (llama.cpp ``-ngl 0``), named ``name``."""
        return replace(self, name=name, gpu=None, link=None, more_gpus=(), split=(), shares=())

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """The machine in a line: GPUs and memory, links, CPU and RAM."""
        if self.gpu is None:
            parts = ["no GPU"]
        elif self.gpu.unified:
            parts = [f"{self.gpu.name} (up to {self.gpu.hbm_gb:g} GiB of the host's memory)"]
        elif len(set(self.gpus)) == 1:
            count = f"{len(self.gpus)} x " if self.more_gpus else ""
            each = " each" if self.more_gpus else ""
            parts = [f"{count}{self.gpu.name} ({self.gpu.hbm_gb:g} GiB{each})", self.link.name]
        else:
            parts = [" + ".join(f"{g.name} ({g.hbm_gb:g} GiB, {lk.name})" for g, lk in self.gpus)]
        if self.cpu is not None:
            c = self.cpu
            sockets = f"{c.sockets} x " if c.sockets > 1 else ""
            parts.append(f"{sockets}{c.name} ({c.ram_gb:g} GiB, {c.workers} threads)")
        return ", ".join(parts)
