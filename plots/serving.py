"""Figures of served streams (a ``kind = "serve"`` sweep): latency against throughput as the rate rises, and
the hit rate against the running batch.

A curve per setting that varies between the rows besides the rate (strategy, policy, draft tokens, ...);
rows with an error are left out; rows that differ in nothing shown are averaged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.ticker import LogFormatter

from moesim.errors import MoesimError
from moesim.plots.legible import MARKERS, label_points
from moesim.plots.results import source_line
from moesim.plots.trace import plt, save_figure

SERVE_KINDS = ("latency-vs-throughput", "hitrate-vs-batch")
# settings a curve may stand for, in the order its label names them
SERIES = ("strategy", "policy", "capacity", "split", "prefetch", "mode", "kernel", "dtype", "max_batch",
          "max_batch_tokens", "chunked_prefill", "draft_tokens", "acceptance", "hardware", "model")


def plot_serving(frame: pl.DataFrame, kind: str, out: str | Path, source: str = "results") -> Path:
    """Draw ``kind`` (one of ``SERVE_KINDS``) from a serve sweep's results into ``out``."""
    if "error" in frame.columns:
        frame = frame.filter(pl.col("error").is_null())
    need = {"rate", "tokens_per_s", "ttft_p99_s", "tpot_s"} if kind == SERVE_KINDS[0] else \
        {"batch_running", "batch_hits", "batch_accesses"}
    missing = sorted(need - set(frame.columns))
    if missing or frame.height == 0:
        what = f"lacks column(s) {', '.join(missing)}" if missing else "has no successful rows"
        raise MoesimError(f"{source}: {what} (a 'serve' sweep writes them)")
    series = [c for c in SERIES if c in frame.columns and frame[c].cast(pl.String).n_unique() > 1]
    frame = frame.with_columns(pl.concat_str([pl.lit(f"{c} ") + pl.col(c).cast(pl.String) for c in series],
                                             separator=", ").alias("series") if series
                               else pl.lit("all rows").alias("series"))
    if kind == SERVE_KINDS[0]:
        return _latency(frame, out, source)
    return _by_batch(frame, out, source)


def _title_line(frame: pl.DataFrame, source: str) -> str:
    """``source_line`` and what the stream's rows share: policy, capacity, requests, prompts."""
    parts = []
    for column, fmt in (("policy", "policy {}"), ("capacity", "capacity {}"), ("requests", "{} requests"),
                        ("prompt", "{}-token prompts")):
        if column in frame.columns and frame[column].cast(pl.String).n_unique() == 1 and frame[column][0] is not None:
            parts.append(fmt.format(frame[column][0]))
    return source_line(frame, source) + ("\n" + ", ".join(parts) if parts else "")


def _latency(frame: pl.DataFrame, out, source) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(12.0, 4.6), constrained_layout=True)
    frame = frame.with_columns((pl.col("tpot_s") * 1e3).alias("tpot_ms"))
    rates = {ax: [] for ax in axes}  # (x, y, label, colour) per panel
    for i, name in enumerate(sorted(frame["series"].unique().to_list())):
        points = (frame.filter(pl.col("series") == name).group_by("rate")
                  .agg(pl.col("tokens_per_s", "ttft_p99_s", "tpot_ms").mean()).sort("rate"))
        for ax, column in zip(axes, ("ttft_p99_s", "tpot_ms")):
            ax.plot(points["tokens_per_s"], points[column], marker=MARKERS[i % len(MARKERS)], color=f"C{i % 10}",
                    label=name)
            rates[ax] += [(x, y, f"{rate:g}/s", {"color": f"C{i % 10}"})
                          for x, y, rate in zip(points["tokens_per_s"], points[column], points["rate"])]
    for ax, label in zip(axes, ("p99 time to first token (s)", "mean time per output token (ms)")):
        ax.set_xlabel("throughput (output tokens/s)")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(LogFormatter())  # 0.2, not 2×10⁻¹; some minor ticks named in a short range
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))
        ax.grid(alpha=0.3, which="both")
    axes[1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Latency against throughput as the arrival rate rises (labels: requests/s; one with no free place "
                 f"is left out)\n{_title_line(frame, source)}", fontsize="medium")
    for ax, labels in rates.items():
        label_points(ax, labels, fontsize="x-small")
    return save_figure(fig, out)


def _by_batch(frame: pl.DataFrame, out, source) -> Path:
    fig, ax = plt.subplots(figsize=(7.6, 4.6), constrained_layout=True)
    for i, name in enumerate(sorted(frame["series"].unique().to_list())):
        rows = frame.filter(pl.col("series") == name)
        running = np.concatenate([np.asarray(v, np.int64) for v in rows["batch_running"].to_list()])
        hits = np.concatenate([np.asarray(v, np.float64) for v in rows["batch_hits"].to_list()])
        accesses = np.concatenate([np.asarray(v, np.float64) for v in rows["batch_accesses"].to_list()])
        sizes = np.unique(running)
        rate = [hits[running == b].sum() / accesses[running == b].sum() for b in sizes]
        ax.plot(sizes, rate, marker=MARKERS[i % len(MARKERS)], color=f"C{i % 10}", label=name)
    ax.set_ylim(0, 1.02)  # from 0: a cut axis makes a few points look like a cliff
    ax.set_xlabel("requests in the step (running batch)")
    ax.set_ylabel("hit rate (decode accesses served from GPU memory)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"Hit rate against the running batch, all rates pooled\n{_title_line(frame, source)}",
                 fontsize="medium")
    return save_figure(fig, out)
