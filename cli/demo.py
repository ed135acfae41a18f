"""`moesim demo`: the first look at the bundled real trace; it grows as the simulator does."""

from __future__ import annotations

from pathlib import Path

from moesim.console import console, table
from moesim.tracegen.io import bundled_trace_path, load_trace
from moesim.tracegen.plot import plot_activations
from moesim.tracegen.stats import REUSE_BUCKETS, trace_stats

DEMO_CAPACITIES = (2, 3, 4, 5, 6)


def run_demo(out: Path) -> Path:
    trace = load_trace(bundled_trace_path())
    m = trace.meta
    table("The bundled trace: Mixtral-8x7B routing on 2 GSM8K problems (vLLM, decode only)",
          ["field", "value"],
          [["model", m.model], ["layers x experts, top-k", f"{m.num_layers} x {m.num_experts}, top-{m.top_k}"],
           ["sequences", trace.num_sequences], ["decode steps", trace.decode_steps],
           ["incomplete tokens dropped on import", m.dropped_tokens], ["expert accesses", trace.accesses],
           ["bytes per expert (bf16)", f"{m.expert_bytes / 1e6:.1f} MB"]])
    stats = trace_stats(trace, DEMO_CAPACITIES)
    table("Reuse: tokens until an expert is selected again at the same layer",
          ["reuse distance", "share of accesses"], [[b, v] for b, v in zip(REUSE_BUCKETS, stats.reuse_histogram)])
    table("Routing skew and predictability", ["measure", "value"], [
        ["top expert's share of a sequence's activations", stats.concentration],
        ["expert popularity skew per layer (Gini, mean)", float(stats.layer_skew.mean())],
        ["next-layer expert = this layer's most frequent companion", stats.cross_layer_predictability],
    ])
    steps = trace.num_rows
    rows = []
    for capacity, hit in stats.lru_hit_rate.items():
        misses_per_token = (1 - hit) * m.num_layers * m.top_k
        rows.append([capacity, f"{capacity / m.num_experts:.0%}", hit, misses_per_token,
                     misses_per_token * m.expert_bytes / 1e9])
    table(f"LRU, C experts per layer, over these {steps} tokens (sequential semantics)",
          ["C", "of E", "hit rate", "loads/token", "GB/token bf16"], rows)
    path = plot_activations(trace, Path(out) / "expert_activations.png")
    console.print(f"plot: {path}")
    return path
