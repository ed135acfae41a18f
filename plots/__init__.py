"""Every figure moesim draws: traces (activation heatmaps) and results (hit rate and TPOT against capacity, speedups, per-layer hit rates, eviction timelines)."""
