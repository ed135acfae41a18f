"""Execution strategies: where each routed expert of a cell runs, and whether its weights cross the link.

One module per strategy, each with

- ``NAME``, and ``SUMMARY``: the placement in a few words, for ``--strategy``'s help (which adds the engines that
  run it);
- ``PARAMS`` (name -> default) with ``PARAM_HELP`` (name -> the option's help), ``PARAM_CHOICES`` for named
  values, ``PARAM_BOUNDS`` for ranges, ``AUTO_PARAMS`` for those that may be ``"auto"``;
- three flags: ``CACHE`` (the GPU expert cache, its policy and capacity, serves some layers), ``CPU``
  (the host CPU computes experts: the machine needs a ``[cpu]``), ``PREFETCH`` (prefetchers combine
  with it);
- ``placement(num_layers, params)``: what each layer's experts are, ``CACHED`` (the cache decides),
  ``ON_GPU`` (all resident, loaded before decoding) or ``ON_CPU`` (in host RAM, computed there);
- ``miss_actions(cells, params)``: what each executed expert does when it is not resident, one of the
  engine's actions (``A_LOAD``, ``A_CPU``, ``A_CPU_FILL``, ``A_LOWBIT``: ``moesim.sim.strategies.base``),
  decided from the request rows before they run (``Cells``), and ``ACTIONS``, those it may take (checked:
  ``moesim.sim.run.miss_actions``; a strategy of one action is not asked again as a served stream's
  rows change);
- a strategy without a cache, ``describe(params, num_layers)``: its placement in words, and
  ``label(params, num_layers)``: in a table cell;

and optionally ``lowbit_dtype(params)`` (the format of a second, low-precision copy of each expert it
keeps on the host), ``NEEDS_WEIGHTS`` (it reads the trace's gate weights), ``LOOKUP_TABLES`` (it runs
MoLE models), ``REPLAY`` (the real replay backends that execute it; every strategy replays on the
virtual one) and ``PLACES`` (the parameter that places experts, which ``moesim validate`` varies). The engines
that run a strategy, what of them changes its durations, and their commands are ``moesim.sim.engines``'.

The discrete-event loop, memory (``moesim.sim.memory``), serving and replay read only this interface: a new
strategy is one module here, registered in ``STRATEGIES``; a new kind of action is a change to the loop
(``moesim.sim.des_loop.load_misses``), and new durations go in ``moesim.sim.costs``.
"""

from __future__ import annotations

from moesim.errors import MoesimError
from moesim.sim.strategies import cpu_experts, cpu_miss, gpu_cache, hybrid, lowbit_miss
from moesim.sim.strategies.base import CACHED, ON_CPU, ON_GPU

STRATEGIES = {m.NAME: m for m in (gpu_cache, cpu_experts, cpu_miss, hybrid, lowbit_miss)}
REQUIRED = ("NAME", "SUMMARY", "PARAMS", "CACHE", "CPU", "PREFETCH", "ACTIONS", "placement", "miss_actions")
for _module in STRATEGIES.values():
    if any(not hasattr(_module, attribute) for attribute in REQUIRED):
        raise MoesimError(f"strategy module {_module.__name__} lacks "
                          f"{', '.join(a for a in REQUIRED if not hasattr(_module, a))} (the interface above)")
__all__ = ["CACHED", "ON_CPU", "ON_GPU", "STRATEGIES", "get_strategy", "lowbit_dtype"]


def get_strategy(name: str):
    """A strategy module by name."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise MoesimError(f"unknown strategy '{name}' (choose from {', '.join(STRATEGIES)})") from None


def lowbit_dtype(strategy, params: dict) -> str | None:
    """The format of the strategy's low-precision copies of the experts (None: it keeps none)."""
    fn = getattr(strategy, "lowbit_dtype", None)
    return None if fn is None else fn(params)
