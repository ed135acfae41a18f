"""What every strategy module shares: the layer placements and the default of each interface function."""

from __future__ import annotations

import numpy as np

CACHED, ON_GPU, ON_CPU = 0, 1, 2  # a layer's experts: the GPU cache decides / all on the GPU / all on the host CPU
# the compiled loop's branch of each strategy (``moesim.sim.des_loop.load_misses``)
GPU_CACHE, CPU_EXPERTS, CPU_MISS, HYBRID, LOWBIT_MISS = range(5)


def all_cached(num_layers: int, params: dict) -> np.ndarray:
    """The placement of a strategy that leaves every layer to the GPU cache."""
    return np.full(num_layers, CACHED, np.int8)
