"""The cost model behind one interface: a model, a machine and an engine give the durations the discrete-event loop
strings together (``moesim.sim.costs``: the formulas, ``Costs``: what the loop reads).

``CostModel`` is what every caller asks: ``row_costs`` for what depends on a row's tokens and KV cache, ``costs``
for a run's whole table. Its implementations differ only in where the compute side comes from:

- ``SpecSheet``: every duration from the parts' spec-sheet rates (rooflines on the GPU, DRAM and unpack rates on
  the CPU) and the engine's figures (``moesim.sim.engines``);
- ``Measured``: a hardware file's ``[compute]`` table, measured for one model (``moesim calibrate``:
  ``moesim.sim.machine.MeasuredCompute``), replaces the compute side — an expert's ``by_tokens[T] = expert_s +
  expert_token_s · (T − 1)``, a layer's ``layer_s + layer_token_s · T + layer_ctx_s · KV reads``, a row's ``row_s +
  row_token_s · T`` — and names its model, so a table measured for another is refused; transfers stay link and SSD
  arithmetic.

``cost_model`` picks the one a machine calls for. A model that drew uncertain constants from their distributions
(intervals) would be a third implementation of the same two methods.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Protocol

import numpy as np

from moesim.errors import MoesimError
from moesim.sim.costs import (KERNELS_ATTN, KERNELS_EXPERT, KERNELS_FFN, KERNELS_HEAD, KERNELS_MOE, KERNELS_ROUTER,
                              KV_BYTES, UBATCH, Costs, RowCosts, cpu_expert_s, cpu_layer_s, device_s, kv_reads,
                              link_copy_s, ssd_read_s)
from moesim.sim.cpu_rates import CPU_LAYER_BARRIERS, expert_barriers
from moesim.sim.engines import EngineSpec
from moesim.sim.layer_split import layer_devices
from moesim.sim.machine import Hardware
from moesim.sim.strategies import ON_CPU, ON_GPU
from moesim.sim.tensor_split import REDUCES_PER_LAYER, allreduce_s
from moesim.sim.weights import Weights
from moesim.tracegen.models import BYTES_PER_PARAM, ModelSpec


class CostModel(Protocol):
    def row_costs(self, tokens, ctx, outputs=None, prompt_ctx=0.0, prompt_rows=1.0) -> RowCosts: ...

    def costs(self, tokens: np.ndarray, ctx: np.ndarray, max_expert_tokens: int = 1, lowbit_dtype: str | None = None,
              outputs: np.ndarray | None = None, prefill: np.ndarray | None = None) -> Costs: ...


class SpecSheet:
    """Durations from the parts' spec sheets for ``model`` with weights ``weights`` (``moesim.sim.weights``) on
    ``hw``, run by ``engine``."""

    def __init__(self, model: ModelSpec, hw: Hardware, weights: Weights, engine: EngineSpec):
        self.model, self.hw, self.weights, self.engine = model, hw, weights, engine

    def expert_compute(self, n_tokens: np.ndarray, cpu_by_tokens: np.ndarray) -> tuple[np.ndarray, float, float]:
        """One routed expert on T = ``n_tokens`` tokens on the device that holds the resident experts (the GPU's
        roofline; without a GPU, the CPU's ``cpu_by_tokens``), and a fused and a per-expert kernel's launch."""
        gpu, params = self.hw.gpu, self.model.expert_params
        if gpu is None:  # an expert "resident on the device" of a CPU-only machine runs on its CPU
            return cpu_by_tokens, 0.0, 0.0
        by_tokens = np.maximum(self.weights.expert_bytes / gpu.mem_bw, 2.0 * params * n_tokens / gpu.flops)
        return by_tokens, gpu.launch_us * 1e-6 * KERNELS_MOE, gpu.launch_us * 1e-6 * KERNELS_EXPERT

    def layer_compute(self, tokens, ctx, outputs, read) -> tuple:
        """One layer's attention + router (+ shared experts, or apart where the engine overlaps them) and the row's
        once-per-row work (its output head on ``outputs`` tokens), for rows of ``tokens`` whose sequences hold
        ``ctx`` KV tokens, ``read`` of them streamed from memory (``kv_reads``)."""
        model, hw, weights, engine = self.model, self.hw, self.weights, self.engine
        d, bpp, fmt, numa = model.d_model, weights.other_bpp, weights.other_format, engine.numa
        q, attn_w = model.q_dim or d, model.attention_params
        # a sequence's query rows in a micro-batch: a prompt's tokens (up to UBATCH), one at decode (each sequence its
        # own KV stream, llama.cpp's default since its per-sequence KV cache, however many share the row)
        queries = np.minimum(tokens / np.maximum(outputs, 1.0), UBATCH)

        def op(params, flops, kernels, kv=0.0, kv_flops=0.0):
            return device_s(hw, params * bpp, flops, kernels, fmt, numa, weights.other_mix, kv, kv_flops, queries)

        attention = op(attn_w, 2 * attn_w * tokens, KERNELS_ATTN, model.kv_width * read * KV_BYTES, 4 * q * ctx)
        pre = attention + op(d * model.num_experts, 2 * d * model.num_experts * tokens, KERNELS_ROUTER)
        shared = np.zeros_like(tokens)
        if model.shared_experts:
            shared_w = model.shared_experts * model.ffn_mats * d * model.d_shared
            shared = shared + op(shared_w, 2 * shared_w * tokens, KERNELS_FFN)
        if not engine.shared_overlap:
            pre, shared = pre + shared, np.zeros_like(tokens)
        pre = pre + engine.layer_us * 1e-6  # the engine's framework time per layer (a measured table has its own)
        dense_w = model.ffn_mats * d * model.d_dense
        head = model.vocab * d
        once = model.dense_layers * (attention + op(dense_w, 2 * dense_w * tokens, KERNELS_FFN))
        if head:  # a model that states its vocabulary: the embedding rows read, the final norm and the output head
            once = once + op(tokens * d, 0.0, 0) + op(head, 2 * head * outputs, KERNELS_HEAD)
        if hw.gpu is None:  # the CPU's thread barriers: a layer's besides its experts' (the engine's own, counted with
            barrier = hw.cpu.barrier_s()  # them), a dense layer's, the head's
            pre = pre + (CPU_LAYER_BARRIERS - expert_barriers(model.top_k)) * barrier
            once = once + (model.dense_layers * CPU_LAYER_BARRIERS + (KERNELS_HEAD if head else 0)) * barrier
        return pre, shared, once

    def row_costs(self, tokens, ctx, outputs=None, prompt_ctx=0.0, prompt_rows=1.0) -> RowCosts:
        """What depends on a row's ``tokens`` and the KV tokens ``ctx`` its sequences hold (arrays or scalars): its
        layer's compute (``layer_compute``), MoLE's lookup-row copy and its bytes, and the activations' hand-off to
        the host, one way. ``prompt_ctx``: the part of ``ctx`` that prompt rows attend to, in pieces of
        ``prompt_rows`` query rows a sequence (``kv_reads``)."""
        model, hw = self.model, self.hw
        tokens = np.asarray(tokens, np.float64)
        outputs = tokens if outputs is None else np.asarray(outputs, np.float64)
        ctx = np.asarray(ctx, np.float64)
        pre, shared, once = self.layer_compute(tokens, ctx, outputs, kv_reads(hw, ctx, prompt_ctx, prompt_rows))
        d = model.d_model
        if model.kind == "mole":
            lut_bytes = tokens * d * model.num_experts * self.weights.other_bpp
            lut_s = np.where(lut_bytes > 0, link_copy_s(hw.link, lut_bytes), 0.0)
        else:
            lut_bytes = np.zeros_like(tokens)
            lut_s = np.zeros_like(tokens)
        handoff = tokens * d * 2.0 / hw.link.bandwidth if hw.gpu is not None else np.zeros_like(tokens)
        return RowCosts(pre, shared, once, lut_s, lut_bytes, handoff)

    def costs(self, tokens: np.ndarray, ctx: np.ndarray, max_expert_tokens: int = 1, lowbit_dtype: str | None = None,
              outputs: np.ndarray | None = None, prefill: np.ndarray | None = None) -> Costs:
        """Durations for rows of ``tokens`` tokens whose sequences hold ``ctx`` KV tokens in all and which output
        ``outputs`` tokens' logits (all unless given), experts computing up to ``max_expert_tokens`` tokens each.
        ``lowbit_dtype`` prices low-bit copies. ``prefill`` marks the prompt rows (each wholly a prompt's, of tokens
        / outputs rows a sequence)."""
        model, hw, weights, engine = self.model, self.hw, self.weights, self.engine
        eb = weights.expert_bytes
        n_tokens = np.arange(max(int(max_expert_tokens), 1) + 1, dtype=np.float64)
        cpu_by_tokens = (cpu_expert_s(hw.cpu, model.expert_params, weights.expert_format, eb, n_tokens, engine.numa,
                                      weights.expert_mix)
                         if hw.cpu is not None else np.zeros_like(n_tokens))
        by_tokens, moe_launch_s, expert_launch_s = self.expert_compute(n_tokens, cpu_by_tokens)
        rows = np.asarray(tokens, np.float64) / np.maximum(tokens if outputs is None else outputs, 1.0)
        prompt_ctx = 0.0 if prefill is None else np.where(prefill, ctx, 0.0)
        rc = self.row_costs(tokens, ctx, outputs, prompt_ctx, rows)
        lowbit_bytes = model.expert_params * BYTES_PER_PARAM[lowbit_dtype] if lowbit_dtype else 0.0
        f64 = lambda a: np.ascontiguousarray(a, np.float64)  # noqa: E731
        return Costs(pre_s=f64(rc.pre), shared_s=f64(rc.shared), row_s=f64(rc.once), lut_s=f64(rc.lut),
                     by_tokens=by_tokens, moe_launch_s=moe_launch_s, expert_launch_s=expert_launch_s,
                     copy_s=link_copy_s(hw.link, eb),
                     ssd_s=ssd_read_s(hw.ssd, eb) if hw.ssd is not None else float("nan"), expert_bytes=eb,
                     lut_bytes=f64(rc.lut_bytes), cpu_by_tokens=cpu_by_tokens, handoff_s=f64(rc.handoff),
                     cpu_layer_fixed_s=cpu_layer_s(hw, engine, model.top_k),
                     lowbit_copy_s=link_copy_s(hw.link, lowbit_bytes) if lowbit_dtype else float("nan"),
                     lowbit_bytes=float(lowbit_bytes))


class Measured(SpecSheet):
    """A spec sheet whose compute side is a ``[compute]`` table measured for this model."""

    def __init__(self, model: ModelSpec, hw: Hardware, weights: Weights, engine: EngineSpec):
        if hw.compute.name != model.name:
            raise MoesimError(f"{hw.source or hw.name}: its [compute] table was measured for {hw.compute.name}, not "
                              f"{model.name}; calibrate this model ('moesim calibrate --model ...') or use a "
                              "hardware file without [compute]")
        super().__init__(model, hw, weights, engine)

    def expert_compute(self, n_tokens: np.ndarray, cpu_by_tokens: np.ndarray) -> tuple[np.ndarray, float, float]:
        m = self.hw.compute
        return m.expert_s + m.expert_token_s * np.maximum(n_tokens - 1, 0), m.moe_launch_s, m.expert_launch_s

    def layer_compute(self, tokens, ctx, outputs, read) -> tuple:
        # layer_ctx_s is a KV token's read, fitted on decode rows: a prompt's tokens share theirs as above (the table
        # has no term for a long prompt's attention FLOPs); the row's work is the replay's, which computes the head
        # on every token
        m = self.hw.compute
        return (m.layer_s + m.layer_token_s * tokens + m.layer_ctx_s * read, np.zeros_like(tokens),
                m.row_s + m.row_token_s * tokens)


class LayerSplit:
    """Several GPUs, each holding whole layers (``moesim.sim.layer_split``, the split in ``hw.split``): each duration
    is its GPU's (``SpecSheet`` on that GPU and its link) in the share of the layers it concerns — a layer's
    attention over every MoE layer, a GPU-resident expert over the layers whose experts are on the GPUs, a CPU layer's
    hand-off over the CPU layers, the row's once-per-row work over the dense layers and the output layer — so a
    row's sum over its layers is exact wherever each layer's experts are alike; and once per row, the activations
    (``ACTIVATION_BYTES`` a value) cross each boundary between two GPUs: a copy to the host and one on to the next
    GPU (consumer cards without peer-to-peer access go through host memory), each its link's latency and bandwidth.
    An expert copied to a GPU (a prompt's CPU experts, llama.cpp's offload) goes to the first, over its link. Where the
    layers' order changes what overlaps (copies beside compute) this mean is not exact; the placements run over
    several GPUs keep no cache and copy only a prompt's CPU experts (``moesim.sim.run``)."""

    def __init__(self, model: ModelSpec, hw: Hardware, weights: Weights, engine: EngineSpec, placement: np.ndarray):
        self.model, self.hw = model, hw
        self.parts = [SpecSheet(model, hw.device(i), weights, engine) for i in range(len(hw.gpus))]
        if sum(hw.split) != model.dense_layers + model.num_layers + 1:
            raise ValueError(f"a split of {hw.split} layers is not {model.name}'s layers and its output layer")
        device = layer_devices(hw.split)
        moe = device[model.dense_layers:model.dense_layers + model.num_layers]
        self.share = {"layers": _share(moe, len(self.parts), moe)}
        self.share["gpu"] = _share(moe[placement == ON_GPU], len(self.parts), moe)
        self.share["cpu"] = _share(moe[placement == ON_CPU], len(self.parts), moe)
        self.share["once"] = _share(np.r_[device[:model.dense_layers], device[-1:]], len(self.parts), moe)
        self.share["first"] = _share(np.zeros(1, np.int64), len(self.parts), moe)
        self.crossings = [(a, b) for a, b in zip(device[:-1], device[1:]) if a != b]

    def crossing_s(self, tokens) -> np.ndarray:
        """A row's activations across every boundary between two GPUs."""
        nbytes = np.asarray(tokens, np.float64) * self.model.d_model * ACTIVATION_BYTES
        links = [self.hw.gpus[g][1] for pair in self.crossings for g in pair]
        return sum((link.latency_us * 1e-6 + nbytes / link.bandwidth for link in links), np.zeros_like(nbytes))

    def _mixed(self, parts: list[dict], kind: dict) -> dict:
        """Each field of ``parts`` (one a GPU) weighted by its GPU's share of what it concerns (``kind``: field ->
        share; the others alike on every GPU: the first's)."""
        return {name: sum(w * p[name] for w, p in zip(self.share[kind[name]], parts)) if name in kind else value
                for name, value in parts[0].items()}

    def row_costs(self, tokens, ctx, outputs=None, prompt_ctx=0.0, prompt_rows=1.0) -> RowCosts:
        parts = [p.row_costs(tokens, ctx, outputs, prompt_ctx, prompt_rows)._asdict() for p in self.parts]
        mixed = self._mixed(parts, ROW_SHARES)
        return RowCosts(**{**mixed, "once": mixed["once"] + self.crossing_s(tokens)})

    def costs(self, tokens: np.ndarray, ctx: np.ndarray, max_expert_tokens: int = 1, lowbit_dtype: str | None = None,
              outputs: np.ndarray | None = None, prefill: np.ndarray | None = None) -> Costs:
        parts = [p.costs(tokens, ctx, max_expert_tokens, lowbit_dtype, outputs, prefill) for p in self.parts]
        mixed = self._mixed([{f.name: getattr(p, f.name) for f in fields(p)} for p in parts], COST_SHARES)
        mixed["row_s"] = np.ascontiguousarray(mixed["row_s"] + self.crossing_s(tokens))
        return Costs(**mixed)


ACTIVATION_BYTES = 4.0  # a value of the activations handed between GPUs (ggml's f32)
ROW_SHARES = {"pre": "layers", "shared": "layers", "once": "once", "handoff": "cpu"}
# an expert copied to a GPU (a prompt's CPU experts, llama.cpp's offload) goes to the first: ggml's scheduler gives an
# op whose weights are in host memory to the first backend that takes it
COST_SHARES = {"pre_s": "layers", "shared_s": "layers", "row_s": "once", "by_tokens": "gpu", "moe_launch_s": "gpu",
               "expert_launch_s": "gpu", "copy_s": "first", "handoff_s": "cpu", "lowbit_copy_s": "first"}


def _share(devices: np.ndarray, gpus: int, fallback: np.ndarray) -> np.ndarray:
    """Each GPU's share of ``devices`` (the GPU of each item counted), or of ``fallback``'s where there is none."""
    counts = np.bincount(devices if devices.size else fallback, minlength=gpus).astype(np.float64)
    return counts / counts.sum()


class TensorSplit:
    """Several GPUs, each holding its share of every matrix (``moesim.sim.tensor_split``, the shares in
    ``hw.shares``): each GPU timed on its spec sheet (``SpecSheet``) at its memory bandwidth and FLOP/s over its share —
    its share of every weight, KV entry and FLOP in the whole one's time, its kernel launches and the engine's framework
    time whole — each duration the slowest GPU's; and a row's partial results added over the GPUs
    (``allreduce_s``) twice a MoE or dense layer, and the output head's logits gathered once. Every expert is on the
    GPUs (``moesim.sim.run.check`` refuses a placement with experts on the CPU: not modelled)."""

    def __init__(self, model: ModelSpec, hw: Hardware, weights: Weights, engine: EngineSpec):
        self.model, self.hw = model, hw
        self.parts = [SpecSheet(model, replace(hw.device(i), gpu=replace(gpu, hbm_gbps=gpu.hbm_gbps / share,
                                                                         tflops=gpu.tflops / share)), weights, engine)
                      for i, ((gpu, _), share) in enumerate(zip(hw.gpus, hw.shares)) if share > 0]
        self.links = [link for (_, link), share in zip(hw.gpus, hw.shares) if share > 0]  # the GPUs that take part

    def _reduces(self, tokens, outputs) -> tuple[np.ndarray, np.ndarray]:
        """A row's all-reduces: a MoE layer's two, and the once-per-row ones (a dense layer's two, and the output
        head's logits gathered: ``outputs`` tokens of ``vocab`` values); none where one GPU takes every share."""
        tokens = np.asarray(tokens, np.float64)
        if len(self.links) < 2:
            return np.zeros_like(tokens), np.zeros_like(tokens)
        outputs = tokens if outputs is None else np.asarray(outputs, np.float64)
        layer = REDUCES_PER_LAYER * allreduce_s(tokens * self.model.d_model, self.links)
        head = allreduce_s(outputs * self.model.vocab, self.links) if self.model.vocab else np.zeros_like(tokens)
        return layer, self.model.dense_layers * layer + head

    def row_costs(self, tokens, ctx, outputs=None, prompt_ctx=0.0, prompt_rows=1.0) -> RowCosts:
        slowest = _slowest([p.row_costs(tokens, ctx, outputs, prompt_ctx, prompt_rows)._asdict() for p in self.parts])
        layer, once = self._reduces(tokens, outputs)
        return RowCosts(**{**slowest, "pre": slowest["pre"] + layer, "once": slowest["once"] + once})

    def costs(self, tokens: np.ndarray, ctx: np.ndarray, max_expert_tokens: int = 1, lowbit_dtype: str | None = None,
              outputs: np.ndarray | None = None, prefill: np.ndarray | None = None) -> Costs:
        parts = [p.costs(tokens, ctx, max_expert_tokens, lowbit_dtype, outputs, prefill) for p in self.parts]
        slowest = _slowest([{f.name: getattr(p, f.name) for f in fields(p)} for p in parts])
        layer, once = self._reduces(tokens, outputs)
        return Costs(**{**slowest, "pre_s": np.ascontiguousarray(slowest["pre_s"] + layer),
                        "row_s": np.ascontiguousarray(slowest["row_s"] + once)})


def _slowest(parts: list[dict]) -> dict:
    """Each field of ``parts`` (one a GPU, all computing at once) the slowest GPU's, element by element."""
    return {name: np.maximum.reduce([p[name] for p in parts]) if isinstance(value, np.ndarray)
            else max(p[name] for p in parts) for name, value in parts[0].items()}


def cost_model(model: ModelSpec, hw: Hardware, weights: Weights, engine: EngineSpec,
               placement: np.ndarray | None = None) -> CostModel:
    """The cost model ``hw`` calls for: over several GPUs, each layer's (``LayerSplit``, which needs the run's
    ``placement``: each layer's experts on the GPU or the CPU) or each layer split over them (``TensorSplit``); else
    its measured ``[compute]`` table where it has one, else its spec sheets."""
    if hw.shares:
        return TensorSplit(model, hw, weights, engine)
    if hw.more_gpus:
        return LayerSplit(model, hw, weights, engine, placement)
    return (SpecSheet if hw.compute is None else Measured)(model, hw, weights, engine)
