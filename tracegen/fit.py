"""Fit the synthetic generator's locality knobs to a real trace (`moesim trace synth --like`)."""

from __future__ import annotations

import math

import numpy as np

from moesim.tracegen.stats import REUSE_BUCKETS, TraceStats, trace_stats
from moesim.tracegen.synth import Locality, synth_trace
from moesim.tracegen.trace import Trace

_GRIDS = {
    "layer_alpha": np.geomspace(0.02, 20.0, 13),
    "seq_alpha": np.geomspace(0.02, 20.0, 13),
    "reuse": np.linspace(0.0, 0.9, 10),
    "cross_layer": np.linspace(0.0, 0.9, 10),
}


def fit_locality(real: Trace, seed: int, rounds: int = 3, min_accesses: int = 200_000) -> Locality:
    """Coordinate search over the knobs, minimising the squared distance between statistic vectors.

    Candidates are scored on synthetic traces with the real trace's dimensions and mean sequence
    length (more sequences when the real trace is short, so the score is not noise). Not fewer when it is long:
    a trace's layer skew and cross-layer predictability depend on its number of sequences (scored on two
    sequences, a 40-sequence trace of known knobs came out with the wrong skew), so the 139 candidates of a long
    trace take minutes.
    """
    m = real.meta
    real_stats = trace_stats(real)
    capacities = tuple(real_stats.lru_hit_rate)
    target = real_stats.vector()
    rows_per_seq = max(1, round(real.num_rows / real.num_sequences))
    prompt = round(real.prefill_steps / real.num_sequences)
    tokens = max(1, rows_per_seq - prompt)
    sequences = max(real.num_sequences, math.ceil(min_accesses / (rows_per_seq * m.num_layers * m.top_k)))

    def loss(knobs: dict[str, float]) -> float:
        trace = synth_trace(m.num_layers, m.num_experts, m.top_k, sequences, tokens, seed,
                            Locality(**knobs), prompt_tokens=prompt)
        return float(np.sum((trace_stats(trace, capacities).vector() - target) ** 2))

    best = Locality().as_dict()
    best_loss = loss(best)
    for _ in range(rounds):
        for name, grid in _GRIDS.items():
            for value in grid:
                trial = {**best, name: float(value)}
                trial_loss = loss(trial)
                if trial_loss < best_loss:
                    best, best_loss = trial, trial_loss
    return Locality(**best)


def compare(real: TraceStats, synthetic: TraceStats) -> list[tuple[str, float, float]]:
    """Rows (statistic, real, synthetic) for the fit report."""
    rows = [(f"reuse distance {b}", float(r), float(s))
            for b, r, s in zip(REUSE_BUCKETS, real.reuse_histogram, synthetic.reuse_histogram)]
    rows += [
        ("reuse histogram distance (TV)", 0.0,
         float(0.5 * np.abs(real.reuse_histogram - synthetic.reuse_histogram).sum())),
        ("mean reuse distance (tokens)", real.mean_reuse_distance, synthetic.mean_reuse_distance),
        ("concentration (top E/8 share)", real.concentration, synthetic.concentration),
        ("layer skew (mean Gini)", float(real.layer_skew.mean()), float(synthetic.layer_skew.mean())),
        ("cross-layer predictability", real.cross_layer_predictability, synthetic.cross_layer_predictability),
    ]
    rows += [(f"LRU hit rate, C={c} per layer", real.lru_hit_rate[c], synthetic.lru_hit_rate.get(c, math.nan))
             for c in real.lru_hit_rate]
    return rows
