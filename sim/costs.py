"""How long each piece of a step takes: the durations the discrete-event engine strings together.

Every operation on the device that holds the non-expert weights — the GPU, or the CPU of a machine without
one — is timed on its roofline: on a GPU ``max(bytes / (HBM bw · mem_eff), FLOPs / (peak · flop_eff))``
plus a launch per kernel; on a CPU ``max(weight bytes / min(DRAM rate, unpack rate), FLOPs / FLOP rate)`` and,
for the products over the KV cache (their own operation in llama.cpp's graph), ``max(KV bytes / min(DRAM rate,
f16 unpack rate), their FLOPs / attention rate)`` (the rates: ``moesim.sim.machine.CPU``). At decode batch sizes
that is the memory term. Per layer and row of T tokens whose sequences hold ``ctx`` tokens of KV cache:

- attention: weights d·q + 2·d·kv + q·d (``ModelSpec.attention_params``), KV read ``kv_width``·ctx values
  (K and V, or MLA's one latent), a prompt's over the query rows that share a read (``kv_reads``: flash
  attention's tile of up to 64 rows; 1 at decode); 2·weights·T + 4·q·ctx FLOPs; on a CPU the 4·q·ctx FLOPs of the products over
  the cache are a product of their own at the flash attention's rate (``CPU.attn_flops``: one query row at a time,
  or tiles of them where a sequence's micro-batch of up to ``UBATCH`` tokens has at least 64: a prompt's);
- router: d·E weights; shared experts: their FFNs (resident, so computed, never copied) — before the layer's
  routed experts, or (an engine that overlaps them, ``shared_overlap``: kTransformers) on the GPU while the
  CPU computes the routed ones (``shared_s``);
- the engine's framework time per layer and row (``layer_us``, learned from published points by
  cross-validation: ``moesim.sim.engines``), added to the layer's first operation (a measured ``[compute]`` table,
  below, has its own);
- once per row (``row_s``): the embedding rows, the dense FFN layers (DeepSeek's first layers: attention and
  a dense FFN each, ``ModelSpec.dense_layers``), the final norm and the output head (vocab·d weights) on the
  tokens whose logits the row outputs (a prompt's last token per sequence, ``moesim.sim.requests``; a measured
  ``[compute]`` table keeps the replay's own, which computes the head on every token);
- one routed expert on the T_e tokens that chose it: ``max(expert_bytes / bw, 2·expert_params·T_e /
  FLOP/s)`` (``by_tokens[T_e]``); the layer's experts run as one of two kernel kinds:
  - ``fused`` (vLLM's fused MoE): one kernel, ``moe_launch + Σ_e by_tokens[T_e]``, once every
    expert's weights are resident;
  - ``per-expert`` (Mixtral-offloading): one kernel per expert, ``expert_launch + by_tokens[T_e]``,
    each as soon as its own weights are resident, in the order the engine decided;
- a copy of one expert over the host link: ``latency + expert_bytes / (nominal · efficiency)``;
  from the SSD: ``latency + expert_bytes / read bw``;
- MoLE: no routed-expert compute; per row and layer T·d·N values cross the link (MoLE eq. 14).

The host CPU (``moesim.sim.machine.CPU``), for strategies that compute experts there:

- one expert on T tokens (``cpu_by_tokens[T]``, ``cpu_expert_s``): ``task_us + max(expert_bytes / min(DRAM
  rate, unpack rate), 2·expert_params·T / FLOP rate)`` (a GGUF file's experts in several formats: each format's
  share of the bytes and parameters at its own rates): the weights stream from DRAM once per layer and the T
  tokens share them, unless unpacking the format (at one token) or the arithmetic (at many) is slower; the DRAM
  rate is one socket's, or every socket's where each reads its own (the engine's ``numa``, or the run's); the CPU
  runs a layer's experts one after another, each on all its threads;
- a layer's hand-off: the row's activations, T·d bf16 values, cross the host link each way at its
  bandwidth (``handoff_s`` per row); and ``cpu_layer_fixed_s`` once per layer the CPU works on: its threads'
  barriers for the routed experts (the engine's ``cpu_ops``: ``moesim.sim.engines``) and, with a GPU, the CPU's
  ``sync_us`` (the two small copies' latency and the waits, llama.cpp's graph splits);
- a low-bit copy of one expert (``lowbit-miss``): latency + its bytes in the low-bit format / link bandwidth.

Kernel counts (launch overheads): attention 6, router 2, an FFN (shared expert, dense layer) 3, the fused MoE
kernel 2, one expert's kernels 4 (two input projections, the gated activation, the output projection), the
head 2 (final norm, output projection). These are the spec sheets' cost model; a hardware file's ``[compute]`` table
replaces the compute side (``moesim.sim.cost_model``: one interface, ``SpecSheet`` and ``Measured``, which put these
formulas together). The discrete-event engine and the virtual replay backend take their durations from here
(``fused_add``/``fused_kernel_s``, ``expert_kernel_s``), so both run one schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit, uint64

from moesim.sim.cpu_rates import FA_TILE_Q
from moesim.sim.engines import EngineSpec
from moesim.sim.machine import ONE_POOL, Hardware
from moesim.tracegen.models import BYTES_PER_PARAM

KERNELS_ATTN, KERNELS_ROUTER, KERNELS_FFN, KERNELS_MOE, KERNELS_EXPERT, KERNELS_HEAD = 6, 2, 3, 2, 4, 2
KV_BYTES, KV_FORMAT = 2.0, "f16"  # a KV value (llama.cpp's default cache type)
UBATCH = 512  # query rows a CPU engine computes at once (llama.cpp's default n_ubatch)
# the scalar durations the compiled engine reads, by index (``scalar_times``): the ``Costs`` fields named
TIMES = ("moe_launch_s", "expert_launch_s", "copy_s", "ssd_s", "lowbit_copy_s", "cpu_layer_fixed_s")
T_MOE_LAUNCH, T_EXPERT_LAUNCH, T_COPY, T_SSD, T_LOWBIT_COPY, T_CPU_LAYER_FIXED = range(len(TIMES))


@dataclass(frozen=True)
class Costs:
    """The engine's durations in seconds; ``pre_s``, ``shared_s``, ``row_s`` and ``lut_s`` are per request row."""

    pre_s: np.ndarray        # attention + router (+ the shared experts unless they overlap) of one layer
    shared_s: np.ndarray     # the shared experts of one layer where they overlap the CPU's routed experts (else 0)
    row_s: np.ndarray        # once per row: embeddings, dense layers, final norm and output head
    lut_s: np.ndarray        # MoLE: the lookup-row transfer of one layer (0 for MoE)
    by_tokens: np.ndarray    # one expert's work on T tokens, T = 0..max (index 0 unused)
    moe_launch_s: float      # a fused MoE kernel's overhead
    expert_launch_s: float   # a per-expert kernel's overhead
    copy_s: float            # one expert over the host link (nan without one)
    ssd_s: float             # one expert read from the SSD (nan without one)
    expert_bytes: float
    lut_bytes: np.ndarray    # MoLE bytes per row and layer (0 for MoE)
    cpu_by_tokens: np.ndarray  # one expert's work on T tokens on the host CPU (zeros without one)
    handoff_s: np.ndarray    # per row: its activations between GPU and host, one way
    cpu_layer_fixed_s: float  # per layer the CPU works on: barriers, and the hand-off's sync with a GPU
    lowbit_copy_s: float     # one low-bit expert over the host link (nan without a low-bit format)
    lowbit_bytes: float

    def gpu_expert_s(self, per_expert: bool) -> np.ndarray:
        """One expert on T tokens on the GPU, T = 0..max, with its own kernel's launch where it has one
        (``per_expert``): what a miss computed on the GPU costs besides its copy."""
        return self.by_tokens + (self.expert_launch_s if per_expert else 0.0)

    def scalar_times(self) -> np.ndarray:
        """The scalar durations as the array (``T_*``) the compiled engine and its copy queue read."""
        return np.array([getattr(self, name) for name in TIMES])


def roofline(gpu, nbytes, flops):
    return np.maximum(nbytes / gpu.mem_bw, flops / gpu.flops)


def link_copy_s(link, nbytes: float) -> float:
    """One copy of ``nbytes`` over a host link: its latency, then the bytes at the bandwidth it reaches."""
    if link is None:
        return float("nan")
    return link.latency_us * 1e-6 + nbytes / link.bandwidth


def ssd_read_s(ssd, nbytes: float) -> float:
    """One read of ``nbytes`` from an SSD: its latency, then the bytes at its read bandwidth."""
    return ssd.latency_us * 1e-6 + nbytes / (ssd.gbps * 1e9)


def cpu_s(cpu, weight_bytes, flops, dtype: str, numa: str = ONE_POOL, mix: tuple = ()):
    """Work on the host CPU that reads ``weight_bytes`` of ``dtype`` weights (or of several formats: ``mix``, (format,
    share of the bytes) pairs, as a GGUF file's tensors are) and does ``flops`` (shared out like the parameters): each
    read at the slower of DRAM and unpacking its format, or the arithmetic where that is slower still (no fixed
    cost)."""
    weight_bytes = np.asarray(weight_bytes, np.float64)
    dram = cpu.dram_bw(numa)
    parts = mix or ((dtype, 1.0),)
    reads = sum(share * weight_bytes / min(dram, cpu.unpack_bw(fmt)) for fmt, share in parts)
    # the FLOPs go with the parameters: a format's share of them is its bytes' share over its bytes per parameter
    params = {fmt: share / BYTES_PER_PARAM.get(fmt, 1.0) for fmt, share in parts}
    total = sum(params.values())
    arithmetic = sum(p / total * np.asarray(flops, np.float64) / cpu.flops(fmt) for fmt, p in params.items())
    return np.maximum(reads, arithmetic)


def cpu_attention_s(cpu, kv_bytes, kv_flops, queries, numa: str = ONE_POOL):
    """Attention's products over the KV cache on the host CPU, a product of their own in llama.cpp's graph (its flash
    attention): ``kv_bytes`` of f16 cache read at the slower of DRAM and unpacking f16, or ``kv_flops`` at the rate of
    the path a micro-batch of ``queries`` query rows takes (``CPU.attn_flops``) where that is slower."""
    reads = np.asarray(kv_bytes, np.float64) / min(cpu.dram_bw(numa), cpu.unpack_bw(KV_FORMAT))
    return np.maximum(reads, np.asarray(kv_flops, np.float64) / cpu.attn_flops(queries))


def cpu_expert_s(cpu, params: int, dtype: str, nbytes: float, tokens, numa: str = ONE_POOL,
                 mix: tuple = ()) -> np.ndarray:
    """One expert of ``params`` weights, ``nbytes`` in format ``dtype`` (or ``mix``), on ``tokens`` tokens, on the
    host CPU."""
    tokens = np.asarray(tokens, np.float64)
    return cpu.task_us * 1e-6 + cpu_s(cpu, np.full_like(tokens, nbytes), 2.0 * params * tokens, dtype, numa, mix=mix)


def device_s(hw: Hardware, weight_bytes, flops, kernels: int, dtype: str, numa: str = ONE_POOL, mix: tuple = (),
             kv_bytes=0.0, kv_flops=0.0, queries=1.0):
    """An operation on the device that holds the non-expert weights (the GPU, or the CPU of a machine without one), with
    its kernels' launches (a CPU's thread barriers are counted per layer: ``moesim.sim.cost_model``), and the products
    over ``kv_bytes`` of KV cache (``kv_flops``; ``queries`` query rows a micro-batch) that follow it: on a GPU in the
    same roofline, on a CPU at the flash attention's own rates (``cpu_attention_s``)."""
    if hw.gpu is not None:
        return roofline(hw.gpu, weight_bytes + kv_bytes, flops + kv_flops) + kernels * hw.gpu.launch_us * 1e-6
    return cpu_s(hw.cpu, weight_bytes, flops, dtype, numa, mix) + cpu_attention_s(hw.cpu, kv_bytes, kv_flops, queries,
                                                                                  numa)


def cpu_layer_s(hw: Hardware, engine: EngineSpec, top_k: int) -> float:
    """What a layer whose experts the CPU computes costs besides them: its threads' barriers and, with a GPU, the
    hand-off's synchronisation (``sync_us``)."""
    cpu = hw.cpu
    if cpu is None:
        return 0.0
    return engine.expert_barriers(top_k) * cpu.barrier_s() + (cpu.sync_us * 1e-6 if hw.gpu is not None else 0.0)


@njit(cache=True, inline="always")
def fused_add(total, by_tokens, tokens):
    """A fused kernel's duration so far (it starts at its launch) with one more expert on ``tokens`` tokens."""
    return total + by_tokens[uint64(tokens)]


@njit(cache=True)
def fused_kernel_s(by_tokens, launch, tokens, n):
    """One fused MoE kernel over the first n experts of ``tokens`` (their token counts), in that order."""
    total = launch
    for i in range(n):
        total = fused_add(total, by_tokens, tokens[i])
    return total


@njit(cache=True)
def expert_kernel_s(by_tokens, launch, tokens):
    """One expert's own kernel on ``tokens`` tokens."""
    return launch + by_tokens[uint64(tokens)]


class RowCosts(NamedTuple):
    pre: np.ndarray
    shared: np.ndarray
    once: np.ndarray
    lut: np.ndarray
    lut_bytes: np.ndarray
    handoff: np.ndarray


def kv_reads(hw: Hardware, ctx, prompt_ctx=0.0, prompt_rows=1.0):
    """The KV tokens a row's attention streams from memory. ``ctx`` sums what each of its query rows attends to; a
    decode row's sequences each read their own cache, but a prompt's ``prompt_rows`` query rows of a sequence share
    a read a tile of them: flash attention on a GPU streams the cache once per block of rows (FlashAttention-2's
    are 64 or 128: the smaller taken), ggml's CPU path once per 64-row tile where a micro-batch has that many, else
    once per row. ``prompt_ctx``: the part of ``ctx`` the prompt rows attend to (a served step mixes both)."""
    prompt_rows = np.asarray(prompt_rows, np.float64)
    rows_a_read = np.clip(prompt_rows, 1.0, FA_TILE_Q) if hw.gpu is not None else \
        np.where(prompt_rows >= FA_TILE_Q, FA_TILE_Q, 1.0)
    return np.asarray(ctx, np.float64) - prompt_ctx + np.asarray(prompt_ctx, np.float64) / rows_a_read
