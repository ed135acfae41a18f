"""Execution strategies: where each routed expert of a cell runs, and whether its weights cross the link.

One module per strategy, each declaring its ``SPEC``, a ``moesim.sim.strategies.base.StrategySpec``: its placement,
the actions of its misses, its roles (keeps a cache, computes on the CPU, places layers) and its parameters. The
engines that run a strategy, what of them changes its durations, and their commands are ``moesim.sim.engines``'.

The discrete-event loop, memory (``moesim.sim.memory``), serving and replay read only this interface: a new
strategy is one module here, registered in ``STRATEGIES``; a new kind of action is a change to the loop
(``moesim.sim.des_loop.load_misses``), and new durations go in ``moesim.sim.costs``.
"""

from __future__ import annotations

from moesim.errors import MoesimError
from moesim.sim.strategies import cpu_experts, cpu_miss, gpu_cache, hybrid, lowbit_miss
from moesim.sim.strategies.base import CACHED, ON_CPU, ON_GPU, StrategySpec

STRATEGIES = {m.SPEC.name: m.SPEC for m in (gpu_cache, cpu_experts, cpu_miss, hybrid, lowbit_miss)}
__all__ = ["CACHED", "ON_CPU", "ON_GPU", "STRATEGIES", "StrategySpec", "get_strategy", "lowbit_dtype"]


def get_strategy(name: str) -> StrategySpec:
    """A strategy by name."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise MoesimError(f"unknown strategy '{name}' (choose from {', '.join(STRATEGIES)})") from None


def lowbit_dtype(strategy: StrategySpec, params: dict) -> str | None:
    """The format of the strategy's low-precision copies of the experts (None: it keeps none)."""
    return None if strategy.lowbit_dtype is None else strategy.lowbit_dtype(params)
