"""What every strategy module shares: the layer placements, what the engine can do with a missing expert,
the cells a strategy decides for, the ``StrategySpec`` each declares, and the default of each interface function."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from moesim.errors import MoesimError

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
                                          # the GPU (``moesim.sim.engines``: ``offload_tokens``)


def all_cached(num_layers: int, params: dict) -> np.ndarray:
    """The placement of a strategy that leaves every layer to the GPU cache."""
    return np.full(num_layers, CACHED, np.int8)


def all_loaded(cells: Cells, params: dict) -> np.ndarray:
    """Every missing expert is copied to the GPU: the ``miss_actions`` of a strategy that computes on the GPU only."""
    return np.full(cells.tokens.shape, A_LOAD, np.int8)


@dataclass(frozen=True)
class StrategySpec:
    """A strategy as the discrete-event loop, memory, serving, replay and the command line read it.

    - ``summary``: the placement in a few words, for ``--strategy``'s help (which adds the engines that run it);
    - ``params``: its parameters, name -> ``moesim.params.Param``;
    - its roles: ``cache`` (the GPU expert cache, its policy and capacity, serves some layers), ``cpu`` (the host CPU
      computes experts: the machine needs a ``[cpu]``), ``prefetch`` (prefetchers combine with it), ``places`` (the
      parameter that places whole layers' experts on the CPU, which ``moesim validate`` varies; None: it places none);
    - ``placement(num_layers, params)``: what each layer's experts are, ``CACHED`` (the cache decides), ``ON_GPU``
      (all resident, loaded before decoding) or ``ON_CPU`` (in host RAM, computed there);
    - ``miss_actions(cells, params)``: what each executed expert does when it is not resident, one of ``actions``
      (``A_LOAD``, ``A_CPU``, ``A_CPU_FILL``, ``A_LOWBIT``), decided from the request rows before they run (``Cells``;
      checked: ``moesim.sim.run.miss_actions``; a strategy of one action is not asked again as a served stream's rows
      change);
    - a strategy without a cache: ``describe(params, num_layers)``, its placement in words, and ``label(params,
      num_layers)``, in a table cell;
    - ``lowbit_dtype(params)``: the format of a second, low-precision copy of each expert it keeps on the host (None:
      it keeps none); ``needs_weights``: it reads the trace's gate weights; ``lookup_tables``: it runs MoLE models;
      ``replay``: the real replay backends that execute it (every strategy replays on the virtual one)."""

    name: str
    summary: str
    placement: Callable
    miss_actions: Callable
    actions: tuple
    cache: bool
    cpu: bool
    prefetch: bool
    params: dict = field(default_factory=dict)
    places: str | None = None
    describe: Callable | None = None
    label: Callable | None = None
    lowbit_dtype: Callable | None = None
    needs_weights: bool = False
    lookup_tables: bool = False
    replay: tuple = ()

    def __post_init__(self):
        wrong = [what for what, bad in (
            ("its actions, some of A_LOAD, A_CPU, A_CPU_FILL, A_LOWBIT",
             not self.actions or not set(self.actions) <= {A_LOAD, A_CPU, A_CPU_FILL, A_LOWBIT}),
            ("the parameter that places layers among its params",
             self.places is not None and self.places not in self.params),
            ("describe and label, as it keeps no cache",
             not self.cache and (self.describe is None or self.label is None))) if bad]
        if wrong:
            raise MoesimError(f"strategy {self.name}: it must declare {'; '.join(wrong)}")
