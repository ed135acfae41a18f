"""What every strategy module shares: the layer placements, what the engine can do with a missing expert,
the cells a strategy decides for, and the default of each interface function."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CACHED, ON_GPU, ON_CPU = 0, 1, 2  # a layer's experts: the GPU cache decides / all on the GPU / all on the host CPU
# What the discrete-event engine does with an executed expert that is not resident, each an action of
# ``moesim.sim.des_loop.load_misses``: copy it to the GPU (into a slot the policy frees, or scratch) and
# run it there; run it on the host CPU; run it on the CPU and copy it into a slot in the background for
# later tokens; copy its low-bit version into scratch and run that on the GPU.
A_LOAD, A_CPU, A_CPU_FILL, A_LOWBIT = range(4)


@dataclass(frozen=True)
class Cells:
    """What a strategy may look at to decide each missing expert's action: the request rows' executed
    experts and what is known of them before the run (a miss's action never depends on the run's state)."""

    tokens: np.ndarray       # int32 [R, L, W']: the tokens each executed expert computes (0: padding)
    weights: np.ndarray      # float32 [R, L, W]: the routed experts' router weights summed over their tokens, lined
                             # up with ``tokens`` except in committed cells (which run predictions)
    decode: np.ndarray       # bool [R]: the row decodes (else prefill)
    committed: np.ndarray    # bool [R, L]: the cell runs its prediction (CommitMoE)
    row_tokens: np.ndarray   # [R]: the tokens of each row
    placement: np.ndarray    # int8 [L]: CACHED, ON_GPU or ON_CPU
    cpu_s: np.ndarray        # float64 [T + 1]: one expert on T tokens on the host CPU
    gpu_s: np.ndarray        # float64 [T + 1]: the same on the GPU, with its own kernel's launch where it has one
    copy_s: float            # one expert over the host link (nan: the machine has no GPU)
    gpu: bool = True         # the machine has a GPU (else every expert runs on its CPU)
    offload_tokens: float = float("inf")  # a row of this many tokens has the engine run its CPU layers' experts on
                                          # the GPU (``moesim.sim.engines``: ``offload_min_tokens``)


def all_cached(num_layers: int, params: dict) -> np.ndarray:
    """The placement of a strategy that leaves every layer to the GPU cache."""
    return np.full(num_layers, CACHED, np.int8)


def all_loaded(cells: Cells, params: dict) -> np.ndarray:
    """Every missing expert is copied to the GPU: the ``miss_actions`` of a strategy that computes on the GPU only."""
    return np.full(cells.tokens.shape, A_LOAD, np.int8)
