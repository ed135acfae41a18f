"""The compute stream's work, the same on every backend: per layer the attention projections and the
router on the step's tokens (their weights stay resident), then the SwiGLU FFN of each executed
expert, read from the buffer its weights were copied into."""

from __future__ import annotations

from moesim import MoesimError
from moesim.sim.models import ModelSpec

DTYPE = {"cpu": "fp32", "cuda": "bf16"}  # the weights' type on each backend (torch on a CPU is slow in bf16)


def require_torch():
    try:
        import torch
    except ImportError:
        raise MoesimError("replay computes with torch: pip install 'moesim[torch]'") from None
    torch.set_num_threads(1)  # the compute stream is one thread; the CPU backend's reader is the other
    return torch


class Compute:
    """Dense weights of one layer (random, seeded) on ``device`` ("cpu" or "cuda"), in its ``DTYPE``."""

    def __init__(self, model: ModelSpec, seed: int = 0, device: str = "cpu"):
        self.torch = torch = require_torch()
        self.device, self.dtype = device, {"fp32": torch.float32, "bf16": torch.bfloat16}[DTYPE[device]]
        d, q, kv = model.d_model, model.q_dim or model.d_model, model.kv_dim or model.d_model
        gen = torch.Generator().manual_seed(seed)
        shapes = [(d, q), (d, kv), (d, kv), (q, d), (d, model.num_experts)]
        self.dense = [(torch.randn(s, generator=gen) / s[0] ** 0.5).to(device, self.dtype) for s in shapes]
        self.d, self.de = d, model.d_expert

    @property
    def expert_numel(self) -> int:
        return 3 * self.d * self.de

    def layer(self, x):
        """Attention projections (q, k, v, o) and the router on x [T, d]; returns the new x."""
        wq, wk, wv, wo, router = self.dense
        q = x @ wq
        (x @ wk), (x @ wv), (x @ router)
        return x + q @ wo * 0.01

    def expert(self, x, weights):
        """SwiGLU: (silu(x W1) * x W3) W2 with the expert's flat weights (w1, w3: d x de; w2: de x d)."""
        d, de = self.d, self.de
        w1, w3, w2 = weights[:d * de].view(d, de), weights[d * de:2 * d * de].view(d, de), weights[2 * d * de:].view(de, d)
        return (self.torch.nn.functional.silu(x @ w1) * (x @ w3)) @ w2

    def tokens(self, n: int):
        """n hidden states (at least one), the same every call."""
        torch = self.torch
        x = torch.randn(max(int(n), 1), self.d, generator=torch.Generator().manual_seed(1)) * 0.1
        return x.to(self.device, self.dtype)
