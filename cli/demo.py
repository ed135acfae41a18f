"""`moesim demo`: the first experience on the bundled real trace — what it looks like, which policy
wins, how fast decoding would be, and the pictures."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from moesim.cli.console import console, table
from moesim.tracegen.io import bundled_trace_path, load_trace
from moesim.plots.trace import plot_activations
from moesim.tracegen.stats import REUSE_BUCKETS, trace_stats

DEMO_POLICIES = ("belady", "lru", "lfu", "fifo", "gamma")
DEMO_CAPACITIES = (2, 3, 4, 5, 6, 7)
DEMO_HARDWARE = "rtx4090"
TABLE_CAPACITY = 4


def run_demo(out: Path, jobs: int = 2) -> list[Path]:
    """Describe the trace, sweep the demo policies x capacities on an RTX 4090 / PCIe 4 with the
    discrete-event simulator (its hits are the hit-rate engine's), print the policy table, and
    write the hit-rate curve, the TPOT curve and the activation heatmap into ``out``."""
    from moesim.plots.results import plot_results
    from moesim.experiments.sweep import SweepSpec, run_sweep

    out = Path(out)
    trace = load_trace(bundled_trace_path())
    m = trace.meta
    table("The bundled trace: Mixtral-8x7B routing on 2 GSM8K problems (vLLM, decode only)",
          ["field", "value"],
          [["model", m.model], ["layers x experts, top-k", f"{m.num_layers} x {m.num_experts}, top-{m.top_k}"],
           ["sequences", trace.num_sequences], ["decode steps", trace.decode_steps],
           ["incomplete tokens dropped on import", m.dropped_tokens], ["expert accesses", trace.accesses],
           ["bytes per expert (bf16)", f"{m.expert_bytes / 1e6:.1f} MB"]])
    stats = trace_stats(trace, ())
    table("Reuse: tokens until an expert is selected again at the same layer",
          ["reuse distance", "share of accesses"], [[b, v] for b, v in zip(REUSE_BUCKETS, stats.reuse_histogram)])
    table("Routing skew and predictability", ["measure", "value"], [
        ["top expert's share of a sequence's activations", stats.concentration],
        ["expert popularity skew per layer (Gini, mean)", float(stats.layer_skew.mean())],
        ["next-layer expert = this layer's most frequent companion", stats.cross_layer_predictability],
    ])

    results = out / "demo-results.parquet"
    results.unlink(missing_ok=True)
    spec = SweepSpec(Path("demo"), "des", [str(bundled_trace_path())],
                     {"policy": list(DEMO_POLICIES), "capacity": list(DEMO_CAPACITIES)},
                     {"hardware": DEMO_HARDWARE, "scope": "per-layer"})
    with console.status(f"simulating {len(DEMO_POLICIES)} policies x {len(DEMO_CAPACITIES)} capacities "
                        f"(the first run compiles each policy)"):
        run_sweep(spec, results, jobs=jobs)
    frame = pl.read_parquet(results, glob=False)
    rows = frame.filter(pl.col("capacity") == TABLE_CAPACITY).sort("tpot_s")
    lru = rows.filter(pl.col("policy") == "lru")["tpot_s"][0]
    table(f"{TABLE_CAPACITY} of {m.num_experts} experts per layer on the GPU, RTX 4090 + PCIe 4, bf16: "
          f"simulated decoding",
          ["policy", "hit rate", "TPOT ms", "tokens/s", "copy ms/token", "speedup vs LRU"],
          [[r["policy"], r["hit_rate"], r["tpot_s"] * 1e3, r["tokens_per_s"], r["copy_s"] * 1e3, lru / r["tpot_s"]]
           for r in rows.to_dicts()])
    paths = [plot_results(frame, "hitrate-vs-capacity", out / "hitrate_vs_capacity.png", source=str(results)),
             plot_results(frame, "tpot-vs-capacity", out / "tpot_vs_capacity.png", source=str(results)),
             plot_activations(trace, out / "expert_activations.png")]
    console.print("wrote " + ", ".join(str(p) for p in paths) + f" and {results}")
    console.print("next: 'moesim sim run TRACE --prefetch oracle', 'moesim sweep SPEC.toml', 'moesim plot' "
                  "(see the README)")
    return paths
