"""Plots of a trace itself (the simulator's result plots live with the sweeps)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from moesim.files import atomic_output  # noqa: E402
from moesim.tracegen.trace import Trace  # noqa: E402


def plot_activations(trace: Trace, path: str | Path, seq_index: int = 0, max_layers: int = 10) -> Path:
    """Expert activations of one sequence over its tokens, one panel per layer (MELINOE Fig. 7 style).

    A cell is coloured by the gate weight the router gave the expert at that token (rank
    order decides the shade when the trace has no weights); blank cells were not selected.
    """
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


FORMATS = ("png", "svg", "pdf")


def save_figure(fig, path: str | Path) -> Path:
    """Write ``fig`` whole or not at all, in the format its suffix names, and close it."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    try:
        if fmt not in FORMATS:
            from moesim import MoesimError

            raise MoesimError(f"{path}: unknown figure format '{path.suffix}' (use {', '.join('.' + f for f in FORMATS)})")
        with atomic_output(path) as tmp:
            fig.savefig(tmp, dpi=110, format=fmt)
    finally:
        plt.close(fig)
    return path
