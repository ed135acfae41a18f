"""Several GPUs in one host computing every layer together (tensor parallelism): llama.cpp's ``--split-mode tensor``
(PR #19378, 2026: ``ggml-backend-meta.cpp``) and ik_llama.cpp's ``--split-mode graph`` (PR #1022). Each GPU holds a
share of every matrix of a layer — the attention's heads, and their KV cache with them; each routed and shared
expert's FFN width (up and gate by their rows, down by its columns); the output head — reads that share each token,
and computes that share of the FLOPs; the router is copied to every GPU (moesim shares it out like the rest: d·E
weights a layer, a few hundred KB). Twice a layer, after the attention's output projection and after the experts'
down projections (summed over the chosen experts first), the GPUs' partial results are added: an all-reduce of a
row's ``d_model`` activations; and once a row the output head's logits, its ``vocab`` values a token, are gathered. llama.cpp's NCCL path
reduces in f32 below ``F32_BELOW`` values (32,768 on two GPUs, 262,144 on more), in bf16 above; every decode row is
below.

An all-reduce of ``n`` values over G GPUs takes ``ALLREDUCE_US`` and a ring's bytes, 2(G − 1)/G · n · its value's
bytes, over the slowest GPU's link. ``ALLREDUCE_US`` is the median of four published NCCL all-reduce times of a few
KB on PCIe without NVLink: 39 µs (two RTX 5070 Ti without peer access, about 10 KB: sglang PR #39605), 19.4 µs (four
V100 behind one PCIe switch, 4 KB: haohervchb/sglang-V100 PR #2), 42.1 µs (eight RTX 4090, 8 B: NVIDIA/nccl issue
#1530) and 20.4 µs (two T4 on two sockets, 8 B: NVIDIA/nccl issue #428). NVLink reduces in 6-17 µs (not modelled:
a machine file's GPUs reach each other over their host links). At batch 1 the bytes are a few KB, so a token pays
two ``ALLREDUCE_US`` a layer, about 60 µs: splitting each layer pays where a layer's weights take longer than that to
read on one GPU (a large dense part, many active experts) and costs where they do not.

Each GPU's share of every matrix is its ``--tensor-split`` share where one is given, else an even share (llama.cpp's
``docs/multi-gpu.md``: without ``-ts`` its tensor split cuts the tensors evenly, where its layer split follows each
device's free memory). llama.cpp runs the mode for some architectures only (the same page: not OLMoE, not DeepSeek-V2's
family, not MiniMax-M2), and ik_llama.cpp's graph mode was enabled architecture by architecture: an engine lists the
families it splits (``EngineSpec.tensor_families``).
"""

from __future__ import annotations

import numpy as np

ALLREDUCE_US = 29.7
REDUCES_PER_LAYER = 2  # after the attention's output projection, after the experts' down projections
F32_BELOW = {2: 32768}  # values an all-reduce sends in f32 below (two GPUs; more: MANY_F32_BELOW), else bf16
MANY_F32_BELOW = 262144


def shares_of(gpus: int, given: tuple | None) -> np.ndarray:
    """float64 [G]: each of ``gpus`` GPUs' share of every matrix: ``given`` (a ``-ts``, one a GPU) normalised, else
    even."""
    shares = np.asarray(given if given is not None else [1.0] * gpus, np.float64)
    return shares / shares.sum()


def allreduce_s(values, links) -> np.ndarray:
    """Seconds to add ``values`` activations (an array: a row's tokens x d_model) over the GPUs reached by ``links``
    (one a GPU): ``ALLREDUCE_US`` and a ring's 2(G − 1)/G of them over the slowest link, f32 below ``F32_BELOW`` values,
    bf16 above."""
    values, gpus = np.asarray(values, np.float64), len(links)
    width = np.where(values < F32_BELOW.get(gpus, MANY_F32_BELOW), 4.0, 2.0)
    slowest = min(link.bandwidth for link in links)
    return ALLREDUCE_US * 1e-6 + 2.0 * (gpus - 1) / gpus * values * width / slowest


def held(shares: np.ndarray, total: float, reserve: float, first: float) -> np.ndarray:
    """float64 [G]: the bytes each GPU holds: its share of ``total`` (every weight, KV entry and expert the GPUs hold),
    a ``reserve`` on each (its context and workspaces), ``first`` besides on the first (scratch)."""
    return shares * total + reserve + np.where(np.arange(shares.size) == 0, first, 0.0)


def describe(shares, backend: str = "CUDA") -> str:
    """Each GPU's share of every layer, named as its backend names it: "CUDA0: 50% of every layer; CUDA1: 50% of every layer"."""
    return "; ".join(f"{backend}{i}: {share:.0%} of every layer" for i, share in enumerate(shares))
