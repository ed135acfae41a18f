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

from moesim.sim.strategies.base import LOWBIT_MISS, all_cached
from moesim.tracegen.models import BYTES_PER_PARAM

NAME = "lowbit-miss"
CODE = LOWBIT_MISS
PARAMS = {"lowbit_threshold": 0.2, "lowbit_dtype": "int4"}
PARAM_BOUNDS = {"lowbit_threshold": (0.0, 1.0)}
PARAM_CHOICES = {"lowbit_dtype": ("int4", "int2")}
CACHE, CPU, PREFETCH = True, False, True
placement = all_cached


def host_copy_bytes_per_param(params: dict) -> float:
    """The low-precision copy every expert also keeps in host RAM."""
    return BYTES_PER_PARAM[params["lowbit_dtype"]]


def engine(params: dict, capacity: int, num_layers: int) -> tuple[str, str]:
    return "HOBBIT (llama.cpp fork)", ""
