"""The compute stream's work, the same on every real backend: per layer the attention projections,
attention over the KV cache the step's tokens read, and the router (their weights stay resident),
then the SwiGLU FFN of each executed expert on the tokens that chose it, read from the buffer its
weights were copied into.

The replay's executor (``moesim.replay.run``) drives it through ``row``, ``layer``, ``scratch``,
``expert``, ``fused``, ``cpu``, ``combine`` and, after a row's last MoE layer, ``finish`` (the dense FFN
layers and the output head, the work the simulator times once per row); ``moesim.replay.virtual`` implements the same calls on a
virtual clock. Hidden states are synthetic: an expert on T tokens computes on the first T rows of
the step's states (what it costs depends on T, not on which tokens).

Attention is every head's, as llama.cpp's: a row of T tokens from S sequences (``Requests.outputs``) that read
ctx KV tokens in all is S sequences of T/S query rows, each attending to ctx/T keys and values of its own, with
the model's query heads grouped over its KV heads (head size ``HEAD``; one head of the KV width where that does not
divide it) in one ``scaled_dot_product_attention``: the 4·q·ctx FLOPs the simulator's attention term counts (a
prefill row's causal triangle as a rectangle of the same area). Each layer reads the next stretch of a key/value
pool as large as every layer's cache for the stream's largest row, or ``POOL_BYTES`` (past any cache) where that is
larger (``pool_keys``): keys come from memory where a real engine's per-layer caches would, and stay cached where
those would fit. A row whose sequences need more than the pool (it takes at most 1/``MEMORY_SHARE`` of the memory
available) has them overlap, and a sequence that alone needs more attends to the pool's length. The cache is in the
weights' type: torch on a CPU computes attention in f16 at half its fp32 rate (2.8 against 4.9 GFLOP/s on two Zen 4
cores at 2,048 keys), where llama.cpp reads an f16 cache; the calibration times this stream, not llama.cpp's.
"""

from __future__ import annotations

import contextlib

import numpy as np

from moesim.errors import MoesimError
from moesim.tracegen.models import ModelSpec

DTYPE = {"cpu": "fp32", "cuda": "bf16"}  # the weights' type on each backend (torch on a CPU is slow in bf16)


def require_torch():
    try:
        import torch
    except ImportError:
        raise MoesimError("replay computes with torch: pip install 'moesim[torch]'") from None
    from moesim.sim.local_machine import physical_cores

    # every core computes, as llama.cpp's threads do (the CPU backend's reader thread waits on the disk beside them)
    torch.set_num_threads(physical_cores())
    return torch


def swiglu(torch, x, weights, d: int, de: int):
    """An expert's SwiGLU, (silu(x W1) * x W3) W2, with its flat weights (w1, w3: d x de; w2: de x d)."""
    w1, w3, w2 = weights[:d * de].view(d, de), weights[d * de:2 * d * de].view(d, de), weights[2 * d * de:].view(de, d)
    return (torch.nn.functional.silu(x @ w1) * (x @ w3)) @ w2


HEAD = 128                 # the head size of every preset but DeepSeek's latent attention
POOL_BYTES = 256 << 20     # keys and values a stream cycles through: past any CPU's last-level cache or GPU's L2
MEMORY_SHARE = 8           # the pool takes at most this share of the memory available to it


def heads(q: int, kv: int) -> tuple[int, int, int]:
    """(query heads, KV heads, head size) of attention with q query and kv KV widths: ``HEAD``-wide heads grouped
    evenly where that divides both, else one KV head of the KV width and the nearest whole number of query heads."""
    if kv % HEAD == 0 and q % kv == 0:
        return q // HEAD, kv // HEAD, HEAD
    return max(1, round(q / kv)), 1, kv


class ComputeStream:
    """Dense weights of one layer (random, seeded) on ``device`` ("cpu" or "cuda"), in its ``DTYPE``, and a KV pool
    for rows whose sequences read up to ``row_keys`` keys in all (module docstring)."""

    def __init__(self, model: ModelSpec, seed: int = 0, device: str = "cpu", row_keys: int = 0):
        self.torch = torch = require_torch()
        self.device, self.dtype = device, {"fp32": torch.float32, "bf16": torch.bfloat16}[DTYPE[device]]
        d, q, kv = model.d_model, model.q_dim or model.d_model, model.kv_dim or model.d_model
        self.q_heads, self.kv_heads, self.head = heads(q, kv)
        gen = torch.Generator().manual_seed(seed)
        shapes = [(d, q), (d, kv), (d, kv), (q, d), (d, model.num_experts), (d, model.vocab),
                  (3 * d * model.d_dense if model.dense_layers else 0,)]
        *self.dense, self.head_w, self.dense_ffn = [
            (torch.randn(s, generator=gen) / max(s[0], 1) ** 0.5).to(device, self.dtype) for s in shapes]
        caches = model.num_layers + model.dense_layers
        keys = pool_keys(row_keys, caches, kv * torch.finfo(self.dtype).bits // 8, available_bytes(torch, device))
        self.pool = [torch.empty(self.kv_heads, keys, self.head).normal_(generator=gen).to(device, self.dtype)
                     for _ in range(2 if keys else 0)]
        self.dense_layers, self.d_dense = model.dense_layers, model.d_dense
        self.d, self.de, self.q, self.seqs, self.keys, self.at, self.states = d, model.d_expert, q, 1, 0, 0, {}
        self.kernels = attention_kernels(torch, device)

    @property
    def expert_numel(self) -> int:
        return 3 * self.d * self.de

    def tokens(self, n: int):
        """n hidden states (at least one), the same every call (made once per n)."""
        n = max(int(n), 1)
        if n not in self.states:
            torch = self.torch
            x = torch.randn(n, self.d, generator=torch.Generator().manual_seed(1)) * 0.1
            self.states[n] = x.to(self.device, self.dtype)
        return self.states[n]

    def row(self, row: int, tokens: int, ctx: float = 0, seqs: int = 1):
        """The hidden states a request row of ``tokens`` tokens from ``seqs`` sequences starts from; its layers
        attend to ``ctx`` KV tokens in all."""
        seqs, keys = row_shape(tokens, ctx, seqs)
        self.seqs, self.keys = int(seqs), int(keys) if self.pool else 0
        return self.tokens(tokens)

    def layer(self, x):
        """Attention projections (q, k, v, o), attention over the row's KV tokens and the router on
        x [T, d]; returns the new x."""
        wq, wk, wv, wo, router = self.dense
        q = x @ wq
        (x @ wk), (x @ wv), (x @ router)
        if self.keys > 0:
            q = q + self.attend(q)
        return x + q @ wo * 0.01

    def attend(self, q):
        """Each sequence's query rows over its own ``keys`` keys and values, the next stretch of the pool
        (sequences overlap where the pool is shorter than the row needs), every query head over its KV head. T
        rows that S does not divide are ceil(T/S) a sequence, the last padded (at most S − 1 rows more)."""
        torch, seqs, hd, size = self.torch, self.seqs, self.head, self.pool[0].shape[1]
        keys = min(self.keys, size)
        rows = q.shape[0]
        per_seq = -(-rows // seqs)
        step = keys if seqs * keys <= size else (size - keys) // max(seqs - 1, 1)
        span = step * (seqs - 1) + keys
        if self.at + span > size:
            self.at = 0
        k, v = (p.as_strided((seqs, self.kv_heads, keys, hd), (step * hd, size * hd, hd, 1), self.at * hd)
                for p in self.pool)
        self.at += span
        width = self.q_heads * hd
        queries = torch.nn.functional.pad(q, (0, max(width - q.shape[1], 0), 0, seqs * per_seq - rows))[:, :width]
        queries = queries.view(seqs, per_seq, self.q_heads, hd).transpose(1, 2)
        with self.kernels:
            out = torch.nn.functional.scaled_dot_product_attention(queries, k, v, enable_gqa=True)
        out = out.transpose(1, 2).reshape(seqs * per_seq, width)[:rows]
        return torch.nn.functional.pad(out, (0, max(q.shape[1] - width, 0)))[:, :q.shape[1]]

    def ffn(self, x, weights):
        return swiglu(self.torch, x, weights, self.d, self.de)

    def scratch(self, x):
        """Where a layer's expert outputs accumulate."""
        return self.torch.zeros_like(x)

    def expert(self, x, out, weights, tokens: int) -> None:
        """One expert on ``tokens`` tokens, added into ``out``."""
        out[:tokens] += self.ffn(x[:tokens], weights)

    def fused(self, x, out, run: list) -> None:
        """A layer's experts back to back, ``run`` = [(weights, tokens), ...], with no wait between them."""
        for weights, tokens in run:
            self.expert(x, out, weights, tokens)

    def cpu(self, x, out, weights, tokens: int) -> None:
        """One expert on the host CPU from host memory (the CPU backend's compute stream is the host CPU)."""
        self.expert(x, out, weights, tokens)

    def combine(self, x, out):
        return x + out * 0.01

    def finish(self, x):
        """The dense FFN layers (attention and a SwiGLU of ``d_dense``) and the output head's logits."""
        for _ in range(self.dense_layers):
            x = self.layer(x)
            d, dd, w = self.d, self.d_dense, self.dense_ffn
            gate, up, down = w[:d * dd].view(d, dd), w[d * dd:2 * d * dd].view(d, dd), w[2 * d * dd:].view(dd, d)
            x = x + (self.torch.nn.functional.silu(x @ gate) * (x @ up)) @ down * 0.01
        x @ self.head_w
        return x


def attention_kernels(torch, device: str):
    """A context to call a stream's attention in: on a GPU, with cuDNN's kernel turned off and its setting restored
    after (the other kernels as they were: torch then takes flash's). cuDNN's builds a plan for each new number of
    keys, on the host: on an H200 (torch 2.11) every decode step of a new process's first replay took 35-60 ms
    against 2.3-5 ms once its lengths had been seen (docs/replay.md, "Measured on a GPU, second session"), where an
    engine's attention kernel takes any length at the same cost. Entering and leaving it costs about 1 us."""
    return _WithoutCudnn(torch.backends.cuda) if device == "cuda" else contextlib.nullcontext()


class _WithoutCudnn:
    """cuDNN's attention kernel off inside, as it was outside (two flag calls: torch's ``sdpa_kernel`` took 15 us)."""

    def __init__(self, flags):
        self.flags, self.was = flags, True

    def __enter__(self):
        self.was = self.flags.cudnn_sdp_enabled()
        self.flags.enable_cudnn_sdp(False)

    def __exit__(self, *exc):
        self.flags.enable_cudnn_sdp(self.was)


def row_shape(tokens, ctx, seqs):
    """(sequences, keys each query row attends to) of rows of ``tokens`` tokens from ``seqs`` sequences that read
    ``ctx`` KV tokens in all: numbers or arrays of rows (the replay sizes its pool by the largest product)."""
    tokens = np.maximum(np.asarray(tokens, np.int64), 1)
    return np.clip(seqs, 1, tokens), np.rint(np.asarray(ctx, np.float64) / tokens).astype(np.int64)


def pool_keys(row_keys: int, caches: int, key_bytes: int, available: int) -> int:
    """The KV pool's length in keys: one row's keys in every layer's cache (``caches``) where that is smaller, else
    at least ``POOL_BYTES`` and one row's keys, at most ``1 / MEMORY_SHARE`` of the ``available`` bytes (K and V)."""
    if row_keys <= 0:
        return 0
    want = min(caches * row_keys, max(row_keys, POOL_BYTES // (2 * key_bytes)))
    return max(1, min(want, available // (MEMORY_SHARE * 2 * key_bytes)))


def available_bytes(torch, device: str) -> int:
    """Memory free on ``device``: the GPU's, or the host's ``MemAvailable`` (the page cache counts as free)."""
    if device == "cuda":
        return int(torch.cuda.mem_get_info()[0])
    from moesim.host import available_ram

    free = available_ram()
    if free is None:  # sizing pools from 0 would measure the wrong thing without a word
        raise MoesimError("this host tells neither /proc/meminfo's MemAvailable nor its free pages")
    return free
