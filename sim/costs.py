"""How long each piece of a step takes: the durations the discrete-event engine strings together.

Every GPU operation is timed on the roofline, ``max(bytes / (HBM bw · mem_eff), FLOPs / (peak ·
flop_eff))`` plus a launch overhead per kernel; at decode batch sizes that is the memory term.
Per layer and row of T tokens whose sequences hold ``ctx`` tokens of KV cache in all:

- attention: weights d·q + 2·d·kv + q·d (``ModelSpec.attention_params``), KV read ``kv_width``·ctx values
  (K and V, or MLA's one latent); 2·weights·T + 4·q·ctx FLOPs;
- router: d·E weights; shared experts: their FFNs (resident, so computed, never copied);
- one routed expert on the T_e tokens that chose it: ``max(expert_bytes / bw, 2·expert_params·T_e /
  FLOP/s)`` (``by_tokens[T_e]``); the layer's experts run as one of two kernel kinds:
  - ``fused`` (vLLM's fused MoE): one kernel, ``moe_launch + Σ_e by_tokens[T_e]``, once every
    expert's weights are resident;
  - ``per-expert`` (Mixtral-offloading): one kernel per expert, ``expert_launch + by_tokens[T_e]``,
    each as soon as its own weights are resident, in the order the engine decided;
- a copy of one expert over the host link: ``latency + expert_bytes / (nominal · efficiency)``;
  from the SSD: ``latency + expert_bytes / read bw``;
- MoLE: no routed-expert compute; per row and layer T·d·N values cross the link (MoLE eq. 14).

The host CPU (``moesim.sim.hardware.CPU``), for strategies that compute experts there:

- one expert on T tokens (``cpu_by_tokens[T]``, ``cpu_expert_s``): ``task_us + max(expert_bytes / DRAM
  bandwidth reached, 2·expert_params·T / the weight format's FLOP/s)``: the weights stream from DRAM
  once per layer and the T tokens share them, unless unpacking the format makes the kernel
  compute-bound; the CPU runs a layer's experts one after another, each on all cores;
- a layer's hand-off: the row's activations, T·d bf16 values, cross the host link each way at its
  bandwidth (``handoff_s`` per row), and ``cpu_sync_s`` (the CPU's ``sync_us``: the two small copies'
  latency and the waits, llama.cpp's graph splits) once per layer the CPU works on;
- a low-bit copy of one expert (``lowbit-miss``): latency + its bytes in the low-bit format / link bandwidth.

Kernel counts (launch overheads): attention 6, router 2, shared experts 3, the fused MoE kernel 2,
one expert's kernels 4 (two input projections, the gated activation, the output projection).
A hardware file's ``[compute]`` section (measured for one model, ``moesim.sim.hardware.MeasuredCompute``)
replaces all of the compute side for that model — ``by_tokens[T] = expert_s + expert_token_s ·
(T − 1)`` — and names the model, so a table measured for another one is refused; transfers stay
link and SSD arithmetic. The discrete-event engine and the virtual replay backend take their
durations from here (``fused_add``/``fused_kernel_s``, ``expert_kernel_s``), so both run one schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from moesim.errors import MoesimError

from moesim.sim.hardware import Hardware
from moesim.tracegen.models import BYTES_PER_PARAM, ModelSpec, format_of

KERNELS_ATTN, KERNELS_ROUTER, KERNELS_SHARED, KERNELS_MOE, KERNELS_EXPERT = 6, 2, 3, 2, 4
# the scalar durations the compiled engine reads, by index (``scalar_times``): the ``Costs`` fields named
TIMES = ("moe_launch_s", "expert_launch_s", "copy_s", "ssd_s", "lowbit_copy_s", "cpu_sync_s")
T_MOE_LAUNCH, T_EXPERT_LAUNCH, T_COPY, T_SSD, T_LOWBIT_COPY, T_CPU_SYNC = range(len(TIMES))


@dataclass(frozen=True)
class Costs:
    """The engine's durations in seconds; ``pre_s`` and ``lut_s`` are per request row."""

    pre_s: np.ndarray        # attention + router + shared experts of one layer, per row
    lut_s: np.ndarray        # MoLE: the lookup-row transfer of one layer, per row (0 for MoE)
    by_tokens: np.ndarray    # one expert's work on T tokens, T = 0..max (index 0 unused)
    moe_launch_s: float      # a fused MoE kernel's overhead
    expert_launch_s: float   # a per-expert kernel's overhead
    copy_s: float            # one expert over the host link
    ssd_s: float             # one expert read from the SSD (nan without one)
    expert_bytes: float
    lut_bytes: np.ndarray    # MoLE bytes per row and layer (0 for MoE)
    cpu_by_tokens: np.ndarray  # one expert's work on T tokens on the host CPU (zeros without one)
    handoff_s: np.ndarray    # per row: its activations between GPU and host, one way
    cpu_sync_s: float        # per layer handed to the CPU
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
    return link.latency_us * 1e-6 + nbytes / link.bandwidth


def ssd_read_s(ssd, nbytes: float) -> float:
    """One read of ``nbytes`` from an SSD: its latency, then the bytes at its read bandwidth."""
    return ssd.latency_us * 1e-6 + nbytes / (ssd.gbps * 1e9)


def cpu_expert_s(cpu, model: ModelSpec, dtype: str, nbytes: float, tokens) -> np.ndarray:
    """One expert of ``nbytes`` in format ``dtype`` on ``tokens`` tokens, on the host CPU."""
    tokens = np.asarray(tokens, np.float64)
    return cpu.task_us * 1e-6 + np.maximum(nbytes / cpu.dram_bw, 2.0 * model.expert_params * tokens / cpu.flops(dtype))


@njit(cache=True, inline="always")
def fused_add(total, by_tokens, tokens):
    """A fused kernel's duration so far (it starts at its launch) with one more expert on ``tokens`` tokens."""
    return total + by_tokens[tokens]


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
    return launch + by_tokens[tokens]


def row_costs(model: ModelSpec, hw: Hardware, tokens, ctx, bytes_per_param: float = 2.0) -> tuple:
    """What depends on a row's ``tokens`` and the KV tokens ``ctx`` its sequences hold (arrays or scalars):
    one layer's attention + router + shared experts, MoLE's lookup-row copy and its bytes, and the
    activations' hand-off to the host, one way."""
    gpu, d, bpp = hw.gpu, model.d_model, bytes_per_param
    tokens = np.asarray(tokens, np.float64)
    ctx = np.asarray(ctx, np.float64)
    q, attn_w = model.q_dim or d, model.attention_params
    launch = gpu.launch_us * 1e-6
    pre = (roofline(gpu, attn_w * bpp + model.kv_width * ctx * bpp, 2 * attn_w * tokens + 4 * q * ctx)
           + roofline(gpu, d * model.num_experts * bpp, 2 * d * model.num_experts * tokens)
           + launch * (KERNELS_ATTN + KERNELS_ROUTER))
    if model.shared_experts:
        shared_w = model.shared_experts * model.ffn_mats * d * model.d_shared
        pre = pre + roofline(gpu, shared_w * bpp, 2 * shared_w * tokens) + launch * KERNELS_SHARED
    measured = hw.compute
    if measured is not None:
        pre = measured.layer_s + measured.layer_token_s * tokens + measured.layer_ctx_s * ctx
    if model.kind == "mole":
        lut_bytes = tokens * d * model.num_experts * bpp
        lut_s = np.where(lut_bytes > 0, link_copy_s(hw.link, lut_bytes), 0.0)
    else:
        lut_bytes = np.zeros_like(tokens)
        lut_s = np.zeros_like(tokens)
    return pre, lut_s, lut_bytes, tokens * d * 2.0 / hw.link.bandwidth


def costs(model: ModelSpec, hw: Hardware, tokens: np.ndarray, ctx: np.ndarray, bytes_per_param: float = 2.0,
          expert_bytes: float | None = None, max_expert_tokens: int = 1, lowbit_dtype: str | None = None) -> Costs:
    """Durations for rows of ``tokens`` tokens whose sequences hold ``ctx`` KV tokens in all, experts
    computing up to ``max_expert_tokens`` tokens each.

    ``expert_bytes`` overrides the model's (a trace records its own, e.g. for quantised experts); the
    CPU's kernel is the format whose bytes per parameter those are. ``lowbit_dtype`` prices low-bit copies.
    """
    gpu, bpp = hw.gpu, bytes_per_param
    launch = gpu.launch_us * 1e-6
    eb = float(expert_bytes if expert_bytes is not None else model.expert_params * bpp)
    n_tokens = np.arange(max(int(max_expert_tokens), 1) + 1, dtype=np.float64)
    by_tokens = np.maximum(eb / gpu.mem_bw, 2.0 * model.expert_params * n_tokens / gpu.flops)
    moe_launch_s, expert_launch_s = launch * KERNELS_MOE, launch * KERNELS_EXPERT
    measured = hw.compute
    if measured is not None:
        if measured.name != model.name:
            raise MoesimError(f"{hw.source or hw.name}: its [compute] table was measured for {measured.name}, not "
                              f"{model.name}; calibrate this model ('moesim calibrate --model ...') or use a "
                              "hardware file without [compute]")
        by_tokens = measured.expert_s + measured.expert_token_s * np.maximum(n_tokens - 1, 0)
        moe_launch_s, expert_launch_s = measured.moe_launch_s, measured.expert_launch_s
    pre, lut_s, lut_bytes, handoff = row_costs(model, hw, tokens, ctx, bpp)
    cpu = hw.cpu
    cpu_by_tokens = (cpu_expert_s(cpu, model, format_of(model.expert_params, eb), eb, n_tokens) if cpu is not None
                     else np.zeros_like(n_tokens))
    lowbit_bytes = model.expert_params * BYTES_PER_PARAM[lowbit_dtype] if lowbit_dtype else 0.0
    return Costs(pre_s=np.ascontiguousarray(pre, np.float64), lut_s=np.ascontiguousarray(lut_s, np.float64),
                 by_tokens=by_tokens, moe_launch_s=moe_launch_s, expert_launch_s=expert_launch_s,
                 copy_s=link_copy_s(hw.link, eb),
                 ssd_s=ssd_read_s(hw.ssd, eb) if hw.ssd is not None else float("nan"), expert_bytes=eb,
                 lut_bytes=np.ascontiguousarray(lut_bytes, np.float64), cpu_by_tokens=cpu_by_tokens,
                 handoff_s=np.ascontiguousarray(handoff, np.float64),
                 cpu_sync_s=cpu.sync_us * 1e-6 if cpu is not None else 0.0,
                 lowbit_copy_s=link_copy_s(hw.link, lowbit_bytes) if lowbit_dtype else float("nan"),
                 lowbit_bytes=float(lowbit_bytes))
