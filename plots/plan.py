"""The figure of a plan: decode tokens/s against the GPU memory used, one line per execution strategy."""

from __future__ import annotations

import textwrap
from pathlib import Path

from moesim.plots.legible import coinciding
from moesim.plots.trace import plt, save_figure

STYLE = {"gpu-cache": ("C0", "o"), "cpu-experts": ("C1", "s"), "cpu-miss": ("C2", "^"), "hybrid": ("C3", "D"),
         "lowbit-miss": ("C4", "v"), "all-on-gpu": ("black", "*")}


def plot_plan(plan, curves: list, out: str | Path) -> Path:
    """``curves`` (``moesim.experiments.plan.curves``): per strategy, the row it was drawn from and its (VRAM GiB,
    tokens/s) points, each line labelled by that row."""
    fig, ax = plt.subplots(figsize=(7.2, 4.6), constrained_layout=True)
    lines = [(label(c.row), [v for v, _ in c.points], [t for _, t in c.points], c.row.strategy) for c in curves]
    for (_, x, y, strategy), name, c in zip(lines, coinciding([line[:3] for line in lines]), curves):
        colour, marker = STYLE.get(strategy, ("grey", "."))
        ax.plot(x, y, marker=marker, color=colour, label=name, markersize=12 if len(x) == 1 else 6)
        _, low, high = c.row.tokens_per_s
        if low is not None:  # the row's 80% interval, at its own point (the line's last)
            ax.vlines(x[-1], low, high, color=colour, linewidth=6, alpha=0.25, gid="interval")
    banded = any(c.row.tokens_per_s.low is not None for c in curves)
    limit = plan.results[0].vram_limit_gb
    if limit:
        ax.axvline(limit, color="black", linestyle=":", linewidth=1)
        ax.text(limit, ax.get_ylim()[0], "GPU memory ", va="bottom", ha="right", fontsize="small")
    ax.set_xlabel("GPU memory used (GiB: weights, KV cache, reserve and experts)")
    ax.set_ylabel("decode tokens/s (batch %d)" % plan.batch + (", bars: 80% interval" if banded else ""))
    ax.grid(alpha=0.3)
    ax.legend(title="strategy + prefetcher (format, policy)", fontsize="small", loc="upper left")
    about = textwrap.fill(f"{plan.machine}; {plan.trace}; steady state after a warm-up batch"
                          + ("; each line's own point is timed as its engine, with its 80% interval (a bar) from "
                             "published points of real engines, held out" if banded else ""), 95)
    fig.suptitle(f"{plan.model} on {plan.hardware}: decode tokens/s against GPU memory\n{about}", fontsize="medium")
    return save_figure(fig, out)


def label(row) -> str:
    """A plan row (``moesim.experiments.plan_row.PlanRow``) as its line's legend names it: strategy, prefetcher, format,
    policy."""
    fetch = f" + {row.prefetch}" if row.prefetch not in (None, "none") else ""
    return f"{row.strategy}{fetch} ({row.format}" + (f", {row.policy})" if row.policy else ")")
