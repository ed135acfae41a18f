"""cpu-experts: llama.cpp's ``--n-cpu-moe N`` (``-ot "blk\\.(0|...|N-1)\\.ffn_(up|down|gate)_exps=CPU"``).

The routed experts of the first N MoE layers stay in host RAM and run on the CPU; every other layer's
experts are loaded into GPU memory before decoding and never move. Attention, routers and shared
experts run on the GPU: a CPU layer hands its activations to the host and back (the link's latency
and bytes, plus the CPU's ``sync_us``). The CPU runs a layer's experts one after another, each on all
cores, each on the tokens that chose it (``moesim.sim.costs.cpu_expert_s``).

A row of at least the engine's ``offload_tokens`` (llama.cpp's CUDA backend: 32, a prefill row; ik_llama.cpp's: 32 for
each expert on average) has the layer's experts copied over the link into scratch buffers and run on the GPU
instead. On a machine without a GPU
every layer is on the CPU (``auto``), everything else runs there too, and nothing is handed off (llama.cpp's CPU
backend).
How the engine uses the CPU's sockets and what a CPU layer costs besides its experts are the engine's
(``moesim.sim.engines``). There is no cache (policy and capacity are ignored),
so prefetchers do not combine with it. ``cpu_layers = "auto"`` takes the fewest layers on the CPU with
which everything fits in GPU memory (``moesim.sim.memory``).
"""

import numpy as np

from moesim.errors import MoesimError, named
from moesim.params import AUTO, Param
from moesim.sim.strategies.base import A_CPU, A_LOAD, ON_CPU, ON_GPU, Cells, StrategySpec


def placement(num_layers: int, params: dict) -> np.ndarray:
    """The first ``cpu_layers`` layers on the CPU, the rest on the GPU."""
    n = params["cpu_layers"]
    if n == AUTO:
        raise MoesimError("cpu_layers auto is resolved from memory before placement (moesim.sim.memory)")
    if n > num_layers:
        raise MoesimError(f"{named('cpu_layers', n)} is more than the model's {num_layers} MoE layers")
    return np.where(np.arange(num_layers) < n, ON_CPU, ON_GPU).astype(np.int8)


def describe(params: dict, num_layers: int) -> str:
    """The placement in words."""
    return f"{params['cpu_layers']} of {num_layers} layers' experts on the CPU"


def label(params: dict, num_layers: int) -> str:
    """The placement in a table cell."""
    return f"layers on CPU {params['cpu_layers']}/{num_layers}"


def miss_actions(cells: Cells, params: dict) -> np.ndarray:
    """An ON_CPU layer's experts run on the CPU, except in a row the engine offloads: they are copied over."""
    offload = (cells.row_tokens >= cells.offload_tokens) & cells.gpu
    on_cpu = (cells.placement == ON_CPU)[None, :, None] & ~offload[:, None, None]
    return np.broadcast_to(np.where(on_cpu, A_CPU, A_LOAD), cells.tokens.shape).astype(np.int8)


SPEC = StrategySpec("cpu-experts", "the first N layers' experts on the CPU, the rest on the GPU", placement,
                    miss_actions, (A_LOAD, A_CPU), cache=False, cpu=True, prefetch=False,
                    params={"cpu_layers": Param(AUTO, "count", "The first N MoE layers keep their experts on the CPU; "
                                                               "auto: the fewest with which everything fits.",
                                                auto=True)},
                    places="cpu_layers", describe=describe, label=label,
                    replay=("cpu",))  # a CPU layer and a GPU layer never overlap: the CPU backend's one stream runs it
