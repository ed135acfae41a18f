"""How long each piece of a step takes: the durations the discrete-event engine strings together.

Every GPU operation is timed on the roofline, ``max(bytes / (HBM bw · mem_eff), FLOPs / (peak ·
flop_eff))`` plus a launch overhead per kernel; at decode batch sizes that is the memory term.
Per layer and row of T tokens whose sequences hold ``ctx`` tokens of KV cache in all:

- attention: weights d·q + 2·d·kv + q·d, KV read 2·kv·ctx values; 2·weights·T + 4·q·ctx FLOPs;
- router: d·E weights; shared experts: their FFNs (resident, so computed, never copied);
- routed experts, one fused MoE kernel over the n distinct experts the row needs, with A = T·k
  token-expert pairs: ``n · max(expert_bytes / bw, 2·expert_params·(A/n) / FLOP/s)``;
- a copy of one expert over the host link: ``latency + expert_bytes / (nominal · efficiency)``;
  from the SSD: ``latency + expert_bytes / read bw``;
- MoLE: no routed-expert compute; per row and layer T·d·N values cross the link (MoLE eq. 14).

Kernel counts (launch overheads): attention 6, router 2, shared experts 3, the MoE kernel 2.
A hardware file's ``[compute]`` section (measured for one model, ``moesim.sim.hardware.Compute``)
replaces all of the compute side for that model; transfers stay link and SSD arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.sim.hardware import Hardware
from moesim.sim.models import ModelSpec

KERNELS_ATTN, KERNELS_ROUTER, KERNELS_SHARED, KERNELS_MOE = 6, 2, 3, 2


@dataclass(frozen=True)
class Costs:
    """The engine's durations in seconds; ``pre_s`` and ``lut_s`` are per request row."""

    pre_s: np.ndarray        # attention + router + shared experts of one layer, per row
    lut_s: np.ndarray        # MoLE: the lookup-row transfer of one layer, per row (0 for MoE)
    expert_mem_s: float      # streaming one expert's weights from HBM
    expert_flop_s: float     # one token through one expert
    moe_launch_s: float
    copy_s: float            # one expert over the host link
    ssd_s: float             # one expert read from the SSD (nan without one)
    expert_bytes: float
    lut_bytes: np.ndarray    # MoLE bytes per row and layer (0 for MoE)


def roofline(gpu, nbytes, flops):
    return np.maximum(nbytes / gpu.mem_bw, flops / gpu.flops)


def costs(model: ModelSpec, hw: Hardware, tokens: np.ndarray, ctx: np.ndarray, bytes_per_param: float = 2.0,
          expert_bytes: float | None = None) -> Costs:
    """Durations for rows of ``tokens`` tokens whose sequences hold ``ctx`` KV tokens in all.

    ``expert_bytes`` overrides the model's (a trace records its own, e.g. for quantised experts).
    """
    gpu, d, bpp = hw.gpu, model.d_model, bytes_per_param
    tokens = np.asarray(tokens, np.float64)
    ctx = np.asarray(ctx, np.float64)
    q, kv = model.q_dim or d, model.kv_dim or d
    attn_w = d * q + 2 * d * kv + q * d
    launch = gpu.launch_us * 1e-6
    pre = (roofline(gpu, attn_w * bpp + 2 * kv * ctx * bpp, 2 * attn_w * tokens + 4 * q * ctx)
           + roofline(gpu, d * model.num_experts * bpp, 2 * d * model.num_experts * tokens)
           + launch * (KERNELS_ATTN + KERNELS_ROUTER))
    if model.shared_experts:
        shared_w = model.shared_experts * model.ffn_mats * d * model.d_shared
        pre = pre + roofline(gpu, shared_w * bpp, 2 * shared_w * tokens) + launch * KERNELS_SHARED
    eb = float(expert_bytes if expert_bytes is not None else model.expert_params * bpp)
    expert_mem_s, expert_flop_s, moe_launch_s = eb / gpu.mem_bw, 2.0 * model.expert_params / gpu.flops, \
        launch * KERNELS_MOE
    measured = hw.compute
    if measured is not None and measured.name == model.name:
        pre = measured.layer_s + measured.layer_token_s * tokens + measured.layer_ctx_s * ctx
        expert_mem_s, expert_flop_s, moe_launch_s = measured.expert_s, measured.expert_token_s, measured.moe_launch_s
    if model.kind == "mole":
        lut_bytes = tokens * d * model.num_experts * bpp
        lut_s = np.where(lut_bytes > 0, hw.link.latency_us * 1e-6 + lut_bytes / hw.link.bandwidth, 0.0)
    else:
        lut_bytes = np.zeros_like(tokens)
        lut_s = np.zeros_like(tokens)
    return Costs(pre_s=np.ascontiguousarray(pre, np.float64), lut_s=np.ascontiguousarray(lut_s, np.float64),
                 expert_mem_s=expert_mem_s, expert_flop_s=expert_flop_s, moe_launch_s=moe_launch_s,
                 copy_s=hw.link.transfer_s(eb),
                 ssd_s=hw.ssd.read_s(eb) if hw.ssd is not None else float("nan"), expert_bytes=eb,
                 lut_bytes=np.ascontiguousarray(lut_bytes, np.float64))
