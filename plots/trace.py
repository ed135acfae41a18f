"""Plots of a trace: its activations, and when policies evict its experts (the result plots are ``results``)."""

from __future__ import annotations

import numbers
import sys
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:  # no window opens; a notebook keeps its own (inline) backend for its figures
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from moesim.errors import MoesimError, argument, named, whole  # noqa: E402
from moesim.files import atomic_output, check_output  # noqa: E402
from moesim.tracegen.trace import Trace  # noqa: E402

TRACE_KINDS = ("activation-heatmap", "eviction-timeline")
BOUND = "belady"  # the offline optimum of caches that admit every miss, drawn apart in every figure


def plot_activations(trace: Trace, path: str | Path, seq_index: int = 0, max_layers: int = 10) -> Path:
    """Expert activations of one sequence over its tokens, one panel per layer (MELINOE Fig. 7 style).

    A cell is coloured by the gate weight the router gave the expert at that token (rank
    order decides the shade when the trace has no weights); blank cells were not selected.
    """
    check_index(seq_index, trace.num_sequences, "seq_index", "sequences")
    lo, hi = trace.seq_offsets[seq_index], trace.seq_offsets[seq_index + 1]
    experts = trace.experts[lo:hi]
    rows, layers, k = experts.shape
    shown = min(layers, max_layers)
    if trace.weights is not None:
        weight = np.nan_to_num(trace.weights[lo:hi], nan=0.0)
    else:
        weight = np.broadcast_to((k - np.arange(k)) / k, experts.shape)
    cols = 2 if shown > 4 else 1
    fig, axes = plt.subplots(int(np.ceil(shown / cols)), cols, figsize=(7 * cols, 1.0 + 0.9 * shown / cols * 2),
                             squeeze=False, sharex=True, constrained_layout=True)
    for layer, ax in enumerate(axes.flat):
        if layer >= shown:
            ax.set_visible(False)
            continue
        grid = np.zeros((trace.meta.num_experts, rows))
        for j in range(k):
            grid[experts[:, layer, j], np.arange(rows)] = weight[:, layer, j]
        image = ax.imshow(np.ma.masked_equal(grid, 0.0), aspect="auto", interpolation="nearest",
                          cmap="viridis", vmin=0.0, vmax=1.0, origin="lower")
        ax.set_ylabel(f"layer {layer}\nexpert")
        ax.set_yticks(range(0, trace.meta.num_experts, max(1, trace.meta.num_experts // 4)))
    for ax in axes[-1]:
        ax.set_xlabel("token")
    fig.colorbar(image, ax=axes, shrink=0.6, label="gate weight" if trace.weights is not None else "rank (1 = top)")
    seq_id = int(trace.seq_ids[seq_index])
    fig.suptitle(f"{trace.meta.model}: expert activations of sequence {seq_id}, layers 0-{shown - 1}")
    return save_figure(fig, path)


def check_index(index, count: int, name: str, what: str, source: str = "the trace") -> None:
    """Refuse an index (a layer's, a sequence's) outside ``0..count-1``, naming the setting as its reader gave it
    (``--layer 40`` on the command line, ``layer=40`` in Python) and the range ``source`` has."""
    if isinstance(index, numbers.Integral) and not isinstance(index, bool) and 0 <= index < count:
        return
    argument(index, name, "a whole number (an index from 0)", whole(index))
    valid = (f"no {what}" if count == 0 else f"1 {what.removesuffix('s')} (index 0)" if count == 1
             else f"{count} {what} (0..{count - 1})")
    raise MoesimError(f"{named(name, index)} is out of range: {source} has {valid}")


FORMATS = ("png", "svg", "pdf")
SUFFIXES = tuple(f".{f}" for f in FORMATS)  # a figure's names (``moesim.files.check_output``)


def save_figure(fig, path: str | Path) -> Path:
    """Write ``fig`` whole or not at all, in the format its suffix names, and close it."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    try:
        check_output(path, "figure", suffixes=SUFFIXES)
        with atomic_output(path) as tmp:
            fig.savefig(tmp, dpi=110, format=fmt)
    finally:
        plt.close(fig)
    return path


def plot_eviction_timeline(trace: Trace, out: str | Path, capacity: int = 4, layer: int = 0, seq_index: int = 0,
                           policies: tuple[str, ...] = ("lru", BOUND)) -> Path:
    """When each policy evicts each expert of one layer, over one sequence (FlashMoE Fig. 2).

    Grey cells are the layer's routing; a marker is an eviction of that expert at that token.
    """
    from moesim.sim.config import CacheConfig
    from moesim.sim.hitrate import simulate
    from moesim.sim.hits import check_capacity

    check_index(layer, trace.meta.num_layers, "layer", "layers")
    check_index(seq_index, trace.num_sequences, "seq_index", "sequences")
    k, experts = trace.meta.top_k, trace.meta.num_experts
    if isinstance(capacity, numbers.Integral) and not isinstance(capacity, bool):  # else refused below, as a run's
        if capacity < k:  # step semantics, the only ones drawn (0 or fewer: no cache to evict from)
            raise MoesimError(f"{named('capacity', capacity)} is below top_k {k}: a step's k experts are resident at "
                              f"once; give {named('capacity')} {k} or more")
        if capacity > experts:
            raise MoesimError(f"{named('capacity', capacity)} is more than the {experts} experts per layer the trace "
                              f"has; give {named('capacity')} {k} to {experts}")
    caches = [CacheConfig(policy=policy, capacity=capacity) for policy in policies]
    for cache in caches:  # refused before a figure is opened
        check_capacity(trace.meta, cache)
    lo, hi = int(trace.seq_offsets[seq_index]), int(trace.seq_offsets[seq_index + 1])
    one = Trace(trace.meta, trace.experts[lo:hi], trace.seq_ids[seq_index:seq_index + 1],
            np.array([0, hi - lo], np.int64), trace.steps[lo:hi], trace.phase[lo:hi])
    n_layers, k, num_experts = trace.meta.num_layers, trace.meta.top_k, trace.meta.num_experts
    fig, axes = plt.subplots(len(policies), 1, figsize=(10, 1.2 + 1.6 * len(policies) * max(1, num_experts / 16)),
                             sharex=True, squeeze=False, constrained_layout=True)
    routed = np.zeros((num_experts, hi - lo))
    for j in range(k):
        routed[one.experts[:, layer, j], np.arange(hi - lo)] = 1.0
    for ax, policy, cache in zip(axes[:, 0], policies, caches):
        result = simulate(one, cache, log_evictions=one.accesses)
        t, obj = result.evictions[:, 0], result.evictions[:, 1]
        mine = obj // num_experts == layer
        tokens, experts = t[mine] // (n_layers * k), obj[mine] % num_experts
        ax.imshow(routed, aspect="auto", cmap="Greys", vmin=0, vmax=3, origin="lower", interpolation="nearest")
        ax.scatter(tokens, experts, marker="x", s=18, color="tab:red", label="eviction")
        ax.set_ylabel("expert")
        ax.set_title(f"{policy}: {int(mine.sum())} evictions in layer {layer}, hit rate "
                     f"{result.per_layer_hit_rate[layer]:.3f}", fontsize="medium", loc="left")
        ax.set_yticks(range(0, num_experts, max(1, num_experts // 8)))
    axes[-1, 0].set_xlabel("token (decode step)")
    # the key above the panels, where it covers no cell
    fig.legend(handles=[Patch(color="lightgrey", label="routed"), *axes[0, 0].get_legend_handles_labels()[0]],
               loc="outside upper right", ncols=2, fontsize="small")
    fig.suptitle(f"{trace.meta.model}: evictions with {capacity} GPU slots, layer {layer}, sequence "
                 f"{int(trace.seq_ids[seq_index])}", fontsize="medium")
    return save_figure(fig, out)
