"""lowbit-miss: HOBBIT (Tang et al., 2024), its token-level dynamic expert loading. A missed expert
whose gate weight is below ``lowbit_threshold`` is less critical to the token: a low-precision copy
(``lowbit_dtype``, int4 or int2, kept in host RAM beside the full one) is copied instead, into a
scratch buffer, and computed on the GPU; any other miss loads the full expert as ``gpu-cache`` does.

Where this differs from HOBBIT, and why: HOBBIT also caches low-precision experts and ranks them with
its own multidimensional policy; here low-bit copies are used once and not cached, so the cache and
its policy are exactly ``gpu-cache``'s. The gate weight is the router weight the trace recorded (for a
batch, the mean over the tokens that chose the expert); a trace without weights is refused. The
threshold's default, 0.2, is ours (HOBBIT tunes it per model), and a low-bit kernel is timed as a
full-precision one. The result reports the share of accesses and of router weight served at low
precision (``lowbit_share``, ``lowbit_weight``). Prefetchers fetch full-precision experts.
"""

import numpy as np

from moesim.params import Param
from moesim.sim.strategies.base import A_LOAD, A_LOWBIT, Cells, StrategySpec, all_cached


def lowbit_dtype(params: dict) -> str:
    """The format of the low-precision copy every expert also keeps in host RAM."""
    return params["lowbit_dtype"]


def miss_actions(cells: Cells, params: dict) -> np.ndarray:
    """A decode miss whose gate weight (the mean over the tokens that chose it) is below the threshold
    fetches the low-bit copy, unless its cell runs a prediction; every other miss loads the full expert."""
    cheap = cells.decode[:, None, None] & ~cells.committed[:, :, None] & (
        cells.weights < float(params["lowbit_threshold"]) * cells.tokens)
    return np.where(cheap, A_LOWBIT, A_LOAD).astype(np.int8)


SPEC = StrategySpec("lowbit-miss", "a GPU cache; a low-bit copy for a miss of low gate weight", all_cached,
                    miss_actions, (A_LOAD, A_LOWBIT), cache=True, cpu=False, prefetch=True,
                    params={"lowbit_threshold": Param(0.2, "number", "Gate weight below which a miss fetches the "
                                                                     "low-bit copy.", bounds=(0.0, 1.0)),
                            "lowbit_dtype": Param("int4", "choice", "Format of the low-bit copies: int4 or int2.",
                                                  choices=("int4", "int2"))},
                    lowbit_dtype=lowbit_dtype, needs_weights=True)  # it judges a miss by its gate weight
