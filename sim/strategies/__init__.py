"""Execution strategies: where each routed expert of a cell runs, and whether its weights cross the link.

One module per strategy, each with ``NAME``; ``CODE``, the branch the compiled loop takes
(``moesim.sim.des_loop``); ``PARAMS`` (name -> default; ``PARAM_CHOICES`` for named values,
``AUTO_PARAMS`` for those that may be ``"auto"``); three flags — ``CACHE`` (the GPU expert cache, its
policy and capacity, serves some layers), ``CPU`` (the host CPU computes experts: the machine needs a
``[cpu]``), ``PREFETCH`` (prefetchers combine with it) — and ``placement(num_layers, params)``, what
each layer's experts are: ``CACHED`` (the cache decides), ``ON_GPU`` (all resident, loaded before
decoding) or ``ON_CPU`` (in host RAM, computed there); and ``engine(params, capacity, num_layers)``, the
engines that run it and their settings (``moesim plan`` prints them). A strategy that keeps a second
copy of each expert on the host names its bytes per parameter in ``host_copy_bytes_per_param(params)``.

Memory (``moesim.sim.memory``) and the engine read only this interface, so a new strategy is a module
here, its branch in ``des_loop.load_misses`` and, if it has new durations, their place in ``costs``.
"""

from __future__ import annotations

from moesim.errors import MoesimError
from moesim.sim.strategies import cpu_experts, cpu_miss, gpu_cache, hybrid, lowbit_miss
from moesim.sim.strategies.base import CACHED, ON_CPU, ON_GPU

STRATEGIES = {m.NAME: m for m in (gpu_cache, cpu_experts, cpu_miss, hybrid, lowbit_miss)}
__all__ = ["CACHED", "ON_CPU", "ON_GPU", "STRATEGIES", "get_strategy"]


def get_strategy(name: str):
    """A strategy module by name."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise MoesimError(f"unknown strategy '{name}' (choose from {', '.join(STRATEGIES)})") from None
