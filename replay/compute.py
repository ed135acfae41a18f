"""The compute stream's work, the same on every real backend: per layer the attention projections,
attention over the KV cache the step's tokens read, and the router (their weights stay resident),
then the SwiGLU FFN of each executed expert on the tokens that chose it, read from the buffer its
weights were copied into.

The replay's executor (``moesim.replay.run``) drives it through ``row``, ``layer``, ``scratch``,
``expert``, ``fused``, ``cpu``, ``combine`` and, after a row's last MoE layer, ``finish`` (the dense FFN
layers and the output head, the work the simulator times once per row); ``moesim.replay.virtual`` implements the same calls on a
virtual clock. Hidden states are synthetic: an expert on T tokens computes on the first T rows of
the step's states (what it costs depends on T, not on which tokens). Attention is one head of the
KV width: a row of T tokens whose sequences hold ctx KV tokens in all has each token attend to
ctx/T cached keys and values, from one random cache block shared by the layers (the work the
simulator's attention term counts; a real engine reads a separate cache per layer and sequence).
"""

from __future__ import annotations

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


class ComputeStream:
    """Dense weights of one layer (random, seeded) on ``device`` ("cpu" or "cuda"), in its ``DTYPE``."""

    def __init__(self, model: ModelSpec, seed: int = 0, device: str = "cpu", max_keys: int = 0):
        self.torch = torch = require_torch()
        self.device, self.dtype = device, {"fp32": torch.float32, "bf16": torch.bfloat16}[DTYPE[device]]
        d, q, kv = model.d_model, model.q_dim or model.d_model, model.kv_dim or model.d_model
        gen = torch.Generator().manual_seed(seed)
        shapes = [(d, q), (d, kv), (d, kv), (q, d), (d, model.num_experts), (max_keys, kv), (max_keys, kv),
                  (d, model.vocab), (3 * d * model.d_dense if model.dense_layers else 0,)]
        *self.dense, self.keys, self.values, self.head, self.dense_ffn = [
            (torch.randn(s, generator=gen) / max(s[0], 1) ** 0.5).to(device, self.dtype) for s in shapes]
        self.dense_layers, self.d_dense = model.dense_layers, model.d_dense
        self.d, self.de, self.q, self.kv, self.ctx, self.states = d, model.d_expert, q, min(q, kv), 0, {}

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

    def row(self, row: int, tokens: int, ctx: float = 0):
        """The hidden states a request row starts from; its layers attend to ``ctx`` KV tokens in all."""
        self.ctx = int(ctx)
        return self.tokens(tokens)

    def layer(self, x):
        """Attention projections (q, k, v, o), attention over the row's KV tokens and the router on
        x [T, d]; returns the new x."""
        torch = self.torch
        wq, wk, wv, wo, router = self.dense
        q = x @ wq
        (x @ wk), (x @ wv), (x @ router)
        per_token = min(self.ctx // x.shape[0], self.keys.shape[0])
        if per_token > 0:
            t, kv = x.shape[0], self.kv
            keys = self.keys[:per_token, :kv].expand(t, per_token, kv)
            values = self.values[:per_token, :kv].expand(t, per_token, kv)
            scores = torch.softmax(torch.bmm(q[:, None, :kv], keys.transpose(1, 2)) * kv ** -0.5, dim=-1)
            attended = torch.bmm(scores, values)[:, 0]
            q = torch.nn.functional.pad(attended, (0, self.q - kv)) + q
        return x + q @ wo * 0.01

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
        x @ self.head
        return x
