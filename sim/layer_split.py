"""Several GPUs in one host, as llama.cpp's layer split places a model over them (``--split-mode layer``, its
default): each GPU holds a contiguous run of layers, their attention, KV cache and the experts not placed on the CPU,
and the last holds the output layer.

llama.cpp gives layer ``il`` of ``n_layer + 1`` (the output layer the last) to the first device whose cumulative
share of ``--tensor-split`` exceeds ``il / (n_layer + 1)`` (``src/llama-model.cpp``, ``load_tensors``): a split given
as layer counts places exactly those counts. Left to itself it splits by each device's free memory and counts no
expert ``--n-cpu-moe`` moves to the CPU, so its first GPU, whose layers lose their experts, is left half empty while
the last overflows; moesim chooses the counts itself (``balance``) and writes them as ``-ts``, or places the layers
as a ``-ts`` a user gives (``as_given``, ``--tensor-split``).

The split ``balance`` chooses fills every GPU to the same share of its memory, as nearly as whole layers allow: of
all contiguous splits, the one whose fullest GPU is least full, and of those the most even (exact, by dynamic
programming over the layers). Each GPU keeps its own reserve (CUDA context, workspaces); the first holds the scratch
buffers.
"""

from __future__ import annotations

import numpy as np

from moesim.errors import MoesimError, named


def layer_bytes(weights: np.ndarray, kv: float, gpu_experts: np.ndarray, expert_layer: float) -> np.ndarray:
    """float64 [L + 1]: the GPU memory of each layer and, last, of the output layer: its weights but the routed experts
    (``weights``, the output layer's included), the KV cache (``kv``) shared evenly over the L layers, and the whole
    experts of a layer the placement keeps on the GPU (``gpu_experts``: bool [L]; ``expert_layer`` bytes a layer)."""
    out = np.asarray(weights, np.float64).copy()
    out[:-1] += kv / gpu_experts.size + np.where(gpu_experts, expert_layer, 0.0)
    return out


def balance(items: np.ndarray, vram: np.ndarray, reserve: float, first: float) -> tuple[np.ndarray, np.ndarray]:
    """(int64 [G] layers per GPU, float64 [G] bytes each GPU holds): the contiguous split of ``items`` (the output layer
    last) over GPUs of ``vram`` bytes each, in device order, whose fullest GPU is the least full share of its memory,
    and of those the most even (the least sum of squared shares). Every GPU holds ``reserve`` (llama.cpp opens each
    device it sees), the first ``first`` besides (scratch); a GPU may hold no layer (``-ts`` 0). Exact: two passes of
    dynamic programming over the split points."""
    n, gpus = items.size, vram.size
    ends = np.concatenate(([0.0], np.cumsum(items)))
    within = np.triu(np.ones((n + 1, n + 1), bool))  # [i, j], i <= j: the GPU holds items i..j-1
    held = np.where(within, ends[None, :] - ends[:, None], 0.0) + reserve
    share = np.stack([np.where(within, (held + (first if g == 0 else 0.0)) / vram[g], np.inf) for g in range(gpus)])
    fullest = share[0, 0]  # [j]: the least fullest share with items 0..j-1 on the GPUs so far
    for g in range(1, gpus):
        fullest = np.maximum(fullest[:, None], share[g]).min(axis=0)
    squares = np.where(share <= fullest[n] * (1 + 1e-9), share ** 2, np.inf)
    total, came = squares[0, 0], []
    for g in range(1, gpus):
        paths = total[:, None] + squares[g]
        came.append(paths.argmin(axis=0))
        total = paths.min(axis=0)
    cuts = [n]
    for back in reversed(came):
        cuts.append(int(back[cuts[-1]]))
    cuts = np.array([0, *reversed(cuts)])
    used = np.array([held[cuts[g], cuts[g + 1]] for g in range(gpus)]) + np.where(np.arange(gpus) == 0, first, 0.0)
    return np.diff(cuts), used


def as_given(items: np.ndarray, shares, reserve: float, first: float) -> tuple[np.ndarray, np.ndarray]:
    """(int64 [G] layers per GPU, float64 [G] bytes each GPU holds): ``items`` (the output layer last) placed as
    llama.cpp places a ``-ts`` of ``shares``, one a GPU: item ``il`` of n on the first GPU whose cumulative share
    of the whole exceeds ``il / n`` (``load_tensors``, in float32: at an exact tie the same GPU as llama.cpp); every
    GPU holds ``reserve``, the first ``first`` besides (``balance``'s)."""
    n, gpus = items.size, len(shares)
    sums = np.cumsum(np.asarray(shares, np.float32), dtype=np.float32)  # in float32, as llama.cpp adds and divides
    device = np.searchsorted(sums / sums[-1], np.arange(n, dtype=np.float32) / np.float32(n), side="right")
    used = np.bincount(device, weights=items, minlength=gpus) + reserve + np.where(np.arange(gpus) == 0, first, 0.0)
    return np.bincount(device, minlength=gpus), used


def shares_text(shares) -> str:
    """A ``-ts`` as llama.cpp takes it: ``3,1``."""
    return ",".join(f"{x:g}" for x in shares)


def check_shares(shares: tuple | None, hw) -> None:
    """Refuse a ``-ts`` of ``shares`` that does not give one share to each GPU of ``hw`` (a machine of several)."""
    if shares is not None and len(hw.gpus) > 1 and len(shares) != len(hw.gpus):
        raise MoesimError(f"{named('tensor_split', shares_text(shares))} gives {len(shares)} "
                          f"share(s), and the machine has {len(hw.gpus)} GPUs: one a GPU, in device order")


def layer_devices(counts) -> np.ndarray:
    """int64 [L + 1]: the GPU of each layer (the output layer last) under a split of ``counts`` layers per GPU, as
    llama.cpp places ``-ts`` given as those counts."""
    counts = np.asarray(counts, np.int64)
    return np.repeat(np.arange(counts.size), counts)


def describe(counts, cpu_layers: int, dense: int, backend: str = "CUDA") -> str:
    """Where a split puts each layer, in llama.cpp's numbering (its blocks, the ``dense`` ones first; the output
    layer last; its devices named by their ``backend``), the experts of the first ``cpu_layers`` MoE layers on the
    CPU: "CUDA0: layers 0-19 (the experts of 0-10 on the CPU); CUDA1: layers 20-35 and the output"."""
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
        out.append(f"{backend}{gpu}: {' and '.join(held)}{experts}")
        start = end + 1
    return "; ".join(out)


def _span(layers: list) -> str:
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"
