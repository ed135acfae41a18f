"""Several GPUs in one host, as llama.cpp's layer split places a model over them (``--split-mode layer``, its
default): each GPU holds a contiguous run of layers, their attention, KV cache and the experts not placed on the CPU,
and the last holds the output layer.

llama.cpp gives layer ``il`` of ``n_layer + 1`` (the output layer the last) to the first device whose cumulative
share of ``--tensor-split`` exceeds ``il / (n_layer + 1)`` (``src/llama-model.cpp``, ``load_tensors``): a split given
as layer counts places exactly those counts. Left to itself it splits by each device's free memory and counts no
expert ``--n-cpu-moe`` moves to the CPU, so its first GPU, whose layers lose their experts, is left half empty while
the last overflows; moesim chooses the counts itself (``balance``) and writes them as ``-ts``.

The split ``balance`` chooses fills every GPU to the same share of its memory, as nearly as whole layers allow: of
all contiguous splits, the one whose fullest GPU is least full (exact, by dynamic programming over the layers). Each
GPU that holds a layer keeps its own reserve (CUDA context, workspaces); the first holds the scratch buffers.
"""

from __future__ import annotations

import numpy as np


def layer_bytes(other: float, head: float, kv: float, gpu_experts: np.ndarray, expert_layer: float) -> np.ndarray:
    """float64 [L + 1]: the GPU memory of each layer and, last, of the output layer: every weight but the routed
    experts and the output head (``other``) and the KV cache (``kv``) shared evenly over the L layers, the whole
    experts of a layer the placement keeps on the GPU (``gpu_experts``: bool [L]; ``expert_layer`` bytes a layer),
    and the head (``head``) on the output layer."""
    layers = gpu_experts.size
    out = np.full(layers + 1, (other + kv) / layers)
    out[:-1] += np.where(gpu_experts, expert_layer, 0.0)
    out[-1] = head
    return out


def balance(items: np.ndarray, vram: np.ndarray, reserve: float, first: float) -> tuple[np.ndarray, np.ndarray]:
    """(int64 [G] layers per GPU, float64 [G] bytes each GPU holds): the contiguous split of ``items`` (the output layer
    last) over GPUs of ``vram`` bytes each, in device order, whose fullest GPU is the least full share of its memory. A
    GPU holding a layer adds ``reserve``; the first holds ``first`` besides, whatever it holds (scratch). A GPU may hold
    none (``-ts`` 0). Exact: over every split point by dynamic programming."""
    n, gpus = items.size, vram.size
    ends = np.concatenate(([0.0], np.cumsum(items)))
    span = ends[None, :] - ends[:, None]  # [i, j]: items i..j-1
    held = np.triu(span + reserve, 1)  # a GPU with no layer holds nothing
    best = np.full((gpus, n + 1), np.inf)  # best[g, j]: the least fullest share with items 0..j-1 on GPUs 0..g
    came = np.zeros((gpus, n + 1), np.int64)
    best[0] = (held[0] + first) / vram[0]
    for g in range(1, gpus):
        share = np.where(np.triu(np.ones((n + 1, n + 1), bool)), np.maximum(best[g - 1][:, None], held / vram[g]),
                         np.inf)
        came[g] = share.argmin(axis=0)
        best[g] = share.min(axis=0)
    cuts = [n]
    for g in range(gpus - 1, 0, -1):
        cuts.append(int(came[g, cuts[-1]]))
    cuts = np.array([0, *reversed(cuts)])
    counts = np.diff(cuts)
    used = np.array([held[cuts[g], cuts[g + 1]] for g in range(gpus)]) + np.where(np.arange(gpus) == 0, first, 0.0)
    return counts, used


def layer_devices(counts) -> np.ndarray:
    """int64 [L + 1]: the GPU of each layer (the output layer last) under a split of ``counts`` layers per GPU, as
    llama.cpp places ``-ts`` given as those counts."""
    counts = np.asarray(counts, np.int64)
    return np.repeat(np.arange(counts.size), counts)


def describe(counts, cpu_layers: int, dense: int) -> str:
    """Where a split puts each layer, in llama.cpp's numbering (its blocks, the ``dense`` ones first; the output
    layer last), the experts of the first ``cpu_layers`` MoE layers on the CPU: "CUDA0: layers 0-19 (the experts
    of 0-10 on the CPU); CUDA1: layers 20-35 and the output"."""
    counts = list(counts)
    on_cpu = range(dense, dense + cpu_layers)
    out, start, last = [], 0, sum(counts) - 1  # the last item is the output layer
    for gpu, count in enumerate(counts):
        if not count:
            continue
        end = start + count - 1
        layers = min(end, last - 1)
        held = [] if start > layers else [f"layer {start}" if start == layers else f"layers {start}-{layers}"]
        held += ["the output"] if end == last else []
        cpu = [i for i in on_cpu if start <= i <= layers]
        experts = "" if not cpu else f" (the experts of {_span(cpu)} on the CPU)"
        out.append(f"CUDA{gpu}: {' and '.join(held)}{experts}")
        start = end + 1
    return "; ".join(out)


def _span(layers: list) -> str:
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"
