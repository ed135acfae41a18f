"""Figures of sweep results: hit rate and TPOT against capacity, speedups over a baseline, per-layer hit rates.

Every plot reads a results file written by ``moesim sweep`` (or any frame with its columns).
Rows with an error are left out. Configurations that differ in a column the plot does not show
(several traces, say) are averaged, and the title says over how many.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import polars as pl

from moesim.errors import MoesimError, first_line, named
from moesim.plots.legible import MARKERS, coinciding
from moesim.plots.trace import BOUND, TRACE_KINDS, plt, save_figure
from moesim.tracegen.io import READ_FAILURES

RESULT_KINDS = ("hitrate-vs-capacity", "tpot-vs-capacity", "speedup-heatmap", "per-layer-hitrate")


def read_results(path: str | Path) -> pl.DataFrame:
    """A results file (Parquet) from ``moesim sweep``; a missing or unreadable one, or a trace, is a one-line error."""
    if kind_of_file(path) == "trace":
        raise MoesimError(f"{path}: a trace, not a sweep's results; its figures are {', '.join(TRACE_KINDS)}")
    try:
        return pl.read_parquet(path, glob=False)
    except FileNotFoundError:
        raise MoesimError(f"{path}: no such results file") from None
    except READ_FAILURES as exc:
        raise MoesimError(f"{path}: unreadable results file ({first_line(exc)})") from None


def kind_of_file(path: str | Path) -> str | None:
    """What a Parquet file holds, by its columns alone: "results" (a sweep's: ``config_id``), "trace" (``experts``),
    else None (or unreadable: its reader says why)."""
    try:
        columns = pl.read_parquet_schema(path)
    except READ_FAILURES:
        return None
    return "results" if "config_id" in columns else "trace" if "experts" in columns else None


def plot_results(frame: pl.DataFrame, kind: str, out: str | Path, baseline: str = "lru",
                 capacity: int | None = None, source: str = "results") -> Path:
    """Draw ``kind`` (one of ``RESULT_KINDS``) from sweep results into ``out``."""
    if kind not in RESULT_KINDS:
        raise MoesimError(f"unknown plot kind {kind!r} for a results file; choose from {', '.join(RESULT_KINDS)}")
    if "error" in frame.columns:
        frame = frame.filter(pl.col("error").is_null())
    if {"policy", "admission"} <= set(frame.columns):  # a policy behind an admission is a series of its own
        alone = pl.col("admission").is_null() | (pl.col("admission") == "all") | \
            pl.col("policy").str.contains("+", literal=True)
        frame = frame.with_columns(pl.when(alone).then(pl.col("policy"))
                                   .otherwise(pl.col("policy") + "+" + pl.col("admission")).alias("policy"))
    metric = "tpot_s" if kind == "tpot-vs-capacity" else None
    need = {"policy", "capacity"} | ({metric} if metric else set())
    need |= {"per_layer_hit_rate"} if kind == "per-layer-hitrate" else set()
    need |= {"hit_rate"} if kind == "hitrate-vs-capacity" else set()
    missing = sorted(need - set(frame.columns))
    if missing or frame.height == 0:
        what = f"lacks column(s) {', '.join(missing)}" if missing else "has no successful rows"
        hint = " (a 'des' sweep writes tpot_s)" if "tpot_s" in missing else ""
        raise MoesimError(f"{source}: {what}{hint}")
    if "kind" in frame.columns and set(frame["kind"].unique().to_list()) == {"serve"}:
        raise MoesimError(f"{source}: a serve sweep's results; its figures are latency-vs-throughput and "
                          "hitrate-vs-batch")
    if not frame["capacity"].dtype.is_numeric():
        sizes = ", ".join(sorted(map(str, frame["capacity"].unique().to_list())))
        raise MoesimError(f"{source}: {kind} draws against the cache's size in slots, and the rows' capacity is "
                          f"{sizes}; sweep capacity over numbers")
    if kind == "hitrate-vs-capacity":
        return _lines(frame, "hit_rate", "hit rate", "Hit rate against GPU cache size", out, source)
    if kind == "tpot-vs-capacity":
        frame = frame.with_columns((pl.col("tpot_s") * 1e3).alias("tpot_ms"))
        return _lines(frame, "tpot_ms", "time per output token (ms)", "Time per output token against GPU cache size",
                      out, source)
    if kind == "speedup-heatmap":
        return _heatmap(frame, baseline, out, source)
    return _per_layer(frame, capacity, out, source)


def _panels(frame: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """One panel per scope when the results hold several, else one."""
    if "scope" in frame.columns and frame["scope"].n_unique() > 1:
        return [(f"scope {s}", frame.filter(pl.col("scope") == s)) for s in sorted(frame["scope"].unique())]
    return [("", frame)]


def _averaged_note(frame: pl.DataFrame, keys: list[str]) -> str:
    n = frame.group_by(keys).len()["len"].max()
    return f" (mean of {n} configurations per point)" if n and n > 1 else ""


def _style(policy: str) -> dict:
    """The same colour for a policy in every figure; the Belady bound black and dashed, the popularity
    oracle (static) dotted; a policy behind an admission (``lru+gamma``) in its policy's colour, dash-dotted."""
    from moesim.policies import POLICIES
    from moesim.policies.admission import ADMITS_ALL, parts

    name, admission = parts(policy)
    if admission != ADMITS_ALL:
        return {**_style(name), "linestyle": "-.", "label": policy}
    if policy == BOUND:
        return {"color": "black", "linestyle": "--", "marker": "x", "label": f"{policy} (optimum, no bypass)"}
    if policy == "static":
        return {"color": "darkgoldenrod", "linestyle": ":", "marker": "+", "label": "static (popularity oracle)"}
    others = [p for p in POLICIES if p != BOUND]
    index = others.index(policy) if policy in others else len(others)
    colours = [f"C{i}" for i in range(10)] + ["navy", "maroon", "grey"]
    return {"color": colours[min(index, len(colours) - 1)], "linestyle": "-", "marker": MARKERS[index % len(MARKERS)],
            "label": policy}


def source_line(frame: pl.DataFrame, source: str) -> str:
    """The results file and what its rows share that a reader needs to trust the numbers: model,
    machine, expert format, strategy, kernel kind, batch (a served stream's most running)."""
    parts = [] if "model" in frame.columns else _traced_model(frame)
    for column, fmt in (("model", "{}"), ("hardware", "on {}"), ("dtype", "{} experts"), ("strategy", "{}"),
                        ("kernel", "{} kernel"), ("batch", "batch {}"), ("max_batch", "max batch {}"),
                        ("scope", "{} cache"), ("semantics", "{} semantics")):
        if column in frame.columns and frame[column].n_unique() == 1 and frame[column][0] is not None:
            parts.append(fmt.format(frame[column][0]))
    # lines break between the parts, never inside one ("max batch" / "8")
    whole = [part.replace(" ", "\u00a0") for part in parts]
    return textwrap.fill(Path(source).name + (": " + ", ".join(whole) if parts else ""), 80).replace("\u00a0", " ")


def _traced_model(frame: pl.DataFrame) -> list[str]:
    """The model of the one trace the rows ran on, its shape, from the trace file's metadata (nothing where the
    rows ran on several, or the file is gone)."""
    from moesim.tracegen.io import read_meta

    if "trace" not in frame.columns or frame["trace"].n_unique() != 1:
        return []
    try:
        meta = read_meta(frame["trace"][0])
    except (MoesimError, OSError):
        return []
    return [f"{meta.model or 'trace'} ({meta.num_layers} layers, {meta.num_experts} experts, top-{meta.top_k})"]


def _policy_order(frame: pl.DataFrame) -> list[str]:
    policies = sorted(frame["policy"].unique().to_list())
    return ([BOUND] if BOUND in policies else []) + [p for p in policies if p != BOUND]


def _lines(frame, column, ylabel, title, out, source) -> Path:
    panels = _panels(frame)
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.6), squeeze=False, sharey=True,
                             constrained_layout=True)
    note = ""
    for ax, (label, part) in zip(axes[0], panels):
        note = note or _averaged_note(part, ["policy", "capacity"])
        lines = []
        for policy in _policy_order(part):
            points = (part.filter(pl.col("policy") == policy).group_by("capacity").agg(pl.col(column).mean())
                      .sort("capacity"))
            style = _style(policy)
            lines.append((style["label"], points["capacity"].to_list(), points[column].to_list(), style))
        for (_, x, y, style), name in zip(lines, coinciding([line[:3] for line in lines])):
            ax.plot(x, y, **{**style, "label": name})
        ax.set_xlabel("GPU cache capacity (experts" + (" per layer)" if "global" not in label else " in the pool)"))
        ax.set_title(label)
        ax.grid(alpha=0.3)
        ax.set_xticks(sorted(part["capacity"].unique().to_list()))
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(title="policy", fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{title}{note}\n{source_line(frame, source)}", fontsize="medium")
    return save_figure(fig, out)


def _heatmap(frame, baseline, out, source) -> Path:
    des = "tpot_s" in frame.columns and frame["tpot_s"].is_not_null().any()
    value = "tpot_s" if des else "misses"
    if value not in frame.columns:
        raise MoesimError(f"{source}: lacks column(s) tpot_s or misses")
    if baseline not in frame["policy"].to_list():
        raise MoesimError(f"{source}: baseline policy '{baseline}' is not in the results "
                          f"({', '.join(sorted(frame['policy'].unique().to_list()))}); choose one of them with {named('baseline')}")
    panels = _panels(frame)
    fig, axes = plt.subplots(1, len(panels), figsize=(1.2 + 1.0 * frame["capacity"].n_unique() * len(panels) + 1.5,
                                                      1.5 + 0.5 * frame["policy"].n_unique()),
                             squeeze=False, constrained_layout=True)
    for ax, (label, part) in zip(axes[0], panels):
        mean = part.group_by(["policy", "capacity"]).agg(pl.col(value).mean())
        policies, capacities = _policy_order(part), sorted(part["capacity"].unique().to_list())
        grid = np.full((len(policies), len(capacities)), np.nan)
        base = dict(mean.filter(pl.col("policy") == baseline).select("capacity", value).iter_rows())
        for policy, cap, v in mean.iter_rows():
            if base.get(cap) is not None and v:
                grid[policies.index(policy), capacities.index(cap)] = base[cap] / v
        limit = max(abs(np.log2(np.nanmax(grid))), abs(np.log2(np.nanmin(grid))), 0.05) if np.isfinite(grid).any() \
            else 1.0
        image = ax.imshow(np.log2(grid), cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}×", ha="center", va="center", fontsize="small")
        ax.set_xticks(range(len(capacities)), capacities)
        ax.set_yticks(range(len(policies)), policies)
        ax.set_xlabel("GPU cache capacity (experts)")
        ax.set_title(label)
    bar = fig.colorbar(image, ax=axes, shrink=0.8)
    bar.set_label(f"log2 of the ratio to {baseline}")
    what = "Speedup in time per token" if des else "Miss reduction (baseline misses / policy misses)"
    fig.suptitle(f"{what} relative to {baseline}\n{source_line(frame, source)}", fontsize="medium")
    return save_figure(fig, out)


def _per_layer(frame, capacity, out, source) -> Path:
    capacities = sorted(frame["capacity"].unique().to_list())
    if capacity is None:
        capacity = capacities[len(capacities) // 2]
    elif capacity not in capacities:
        raise MoesimError(f"{source}: no rows at capacity {capacity} (have {', '.join(map(str, capacities))})")
    part = frame.filter(pl.col("capacity") == capacity)
    panels = _panels(part)
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.4), squeeze=False, sharey=True,
                             constrained_layout=True)
    for ax, (label, rows) in zip(axes[0], panels):
        for policy in _policy_order(rows):
            lists = rows.filter(pl.col("policy") == policy)["per_layer_hit_rate"].to_list()
            curve = np.mean(np.array(lists, dtype=float), axis=0)
            ax.plot(range(curve.size), curve, markersize=4, **_style(policy))
        ax.set_xlabel("MoE layer")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("hit rate")
    axes[0][-1].legend(title="policy", fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"Hit rate per layer at capacity {capacity}\n{source_line(frame, source)}", fontsize="medium")
    return save_figure(fig, out)
