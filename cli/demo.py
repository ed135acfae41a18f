"""`moesim demo`: the first experience on the bundled real trace — what it looks like, which policy
wins and how fast decoding would be with what fits on a 24 GB card, every execution strategy side by
side for Mixtral-8x7B and Qwen3-30B-A3B on it, and the pictures."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from moesim.cli.console import console, table, working
from moesim.cli.plan_cmd import LEARNED, placed, rate, three
from moesim.experiments.plan import candidate, expert_counts
from moesim.files import output_folder
from moesim.sim.engines.ktransformers import EXPERT_COUNTS
from moesim.tracegen.io import load_trace
from moesim.tracegen.trace import bundled_trace_path
from moesim.plots.trace import plot_activations
from moesim.tracegen.stats import REUSE_BUCKETS, trace_stats

DEMO_POLICIES = ("belady", "lru", "lfu", "fifo", "gamma")
DEMO_CAPACITIES = (2, 3, 4, 5, 6, 7)  # all fit the card at DEMO_DTYPE; 7 is what 'capacity auto' gives
DEMO_HARDWARE = "rtx4090"
DEMO_DTYPE = "q4_k"  # llama.cpp's Q4_K, 4.5 bits per weight, for every weight (a GGUF checkpoint)
TABLE_CAPACITY = 7
# (model, expert format) planned side by side: Qwen3-30B-A3B at 8 bits, since at 4 bits it fits the card whole
DEMO_PLANS = (("mixtral-8x7b", "q4_k"), ("qwen3-30b-a3b", "q8_0"))


def run_demo(out: Path, jobs: int = 2) -> list[Path]:
    """Describe the trace, sweep the demo policies x capacities that fit an RTX 4090 (4-bit experts) with
    the discrete-event simulator (its hits are the hit-rate engine's), print the policy table, plan every
    strategy for Mixtral-8x7B and Qwen3-30B-A3B on the card, and write the hit-rate and TPOT curves, the
    activation heatmap and the plans' figures into ``out``."""
    import moesim
    from moesim.experiments.plan import curves, plan_loops
    from moesim.experiments.sweep import SweepSpec
    from moesim.plots.plan import plot_plan
    from moesim.plots.results import plot_results
    from moesim.sim.des import compiling

    out = output_folder(out, "demo's plots and results")
    # every loop the sweep and the plans run compiles at once in worker processes while this one reads the trace and
    # prints its statistics, then compiles the rest of what the sweep and the plans run (their synthetic traces too)
    with compiling([(policy, "none") for policy in DEMO_POLICIES] + plan_loops(), synthetic=True):
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
                     {"hardware": DEMO_HARDWARE, "scope": "per-layer", "dtype": DEMO_DTYPE, "other_dtype": DEMO_DTYPE})
    with working(f"simulating {len(DEMO_POLICIES)} policies x {len(DEMO_CAPACITIES)} capacities "
                        f"(the first run compiles each policy)"):
        moesim.sweep(spec, results, jobs=jobs)
    frame = pl.read_parquet(results, glob=False)
    rows = frame.filter(pl.col("capacity") == TABLE_CAPACITY).sort("tpot_s")
    lru = rows.filter(pl.col("policy") == "lru")["tpot_s"][0]
    vram = rows["vram_gb"][0]
    table(f"{TABLE_CAPACITY} of {m.num_experts} experts per layer on the GPU (the most that fit: {vram:.1f} of 24 GiB), "
          f"RTX 4090 + PCIe 4, {DEMO_DTYPE} weights: simulated decoding",
          ["policy", "hit rate", "TPOT ms", "tokens/s", "copy ms/token", "speedup vs LRU"],
          [[r["policy"], r["hit_rate"], r["tpot_s"] * 1e3, r["tokens_per_s"], r["copy_s"] * 1e3, lru / r["tpot_s"]]
           for r in rows.to_dicts()])
    paths = [plot_results(frame, "hitrate-vs-capacity", out / "hitrate_vs_capacity.png", source=str(results)),
             plot_results(frame, "tpot-vs-capacity", out / "tpot_vs_capacity.png", source=str(results)),
             plot_activations(trace, out / "expert_activations.png")]
    with working("planning every strategy for Mixtral-8x7B and Qwen3-30B-A3B on the card"):
        plans = [(moesim.plan(model, DEMO_HARDWARE, dtypes=[dtype]), dtype) for model, dtype in DEMO_PLANS]
    for result, dtype in plans:
        every = [*result.rows, *sorted(result.apart, key=lambda r: -r.tokens_per_s.mid)]
        best = [r for i, r in enumerate(every) if candidate(r) not in map(candidate, every[:i])]
        table(f"{result.model}, {dtype} experts, on an RTX 4090 (24 GiB) with a Ryzen 9 7950X (128 GiB DDR5): each "
              f"placement at its best, those an engine you can run gives first (*: not offered); {result.trace}; "
              "steady state; memory in GiB", ["engine", "experts on GPU", "tok/s (80% interval)", "VRAM", "RAM"],
              [[r.engine.split(" (")[0] + ("*" if r.apart else ""),
                placed(r) + (f" +{r.prefetch}" if r.prefetch == "history" else ""), rate(r), three(r.vram_gb),
                three(r.ram_gb)] for r in best])
        counts = out / f"{EXPERT_COUNTS.removesuffix('.json')}-{result.model}.json"
        for r in best:  # a kTransformers command names the routing counts the demo writes beside the figures
            command = r.command.replace(f" {EXPERT_COUNTS} ", f" {counts} ")
            console.print(f"{r.engine}: " + (f"not offered: {r.apart}" if r.apart else command), soft_wrap=True)
        if any(f" {EXPERT_COUNTS} " in r.command for r in best if not r.apart):
            counts.write_text(json.dumps({"logical_count": expert_counts(result)}) + "\n")
        paths.append(plot_plan(result, curves(result), out / f"plan-{result.model}.png"))
    console.print(f"{LEARNED}: the pinned experts or the prefetcher learned from the trace itself: an upper bound on "
                  "other prompts", soft_wrap=True)
    console.print("wrote " + ", ".join(str(p) for p in paths) + f" and {results}")
    console.print("next: 'moesim plan --model M --hardware H', 'moesim sim run TRACE --strategy S --capacity auto', "
                  "'moesim sim serve TRACE --rate R', 'moesim sweep SPEC.toml', 'moesim plot' (docs/commands.md)")
    return paths
