"""Every figure moesim draws: of a trace (activations, eviction timelines) and of results (hit rate and
TPOT against capacity, speedups, per-layer hit rates)."""
