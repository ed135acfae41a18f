"""cpu-experts: llama.cpp's ``--n-cpu-moe N`` (``-ot "blk\\.(0|...|N-1)\\.ffn_(up|down|gate)_exps=CPU"``).

The routed experts of the first N MoE layers stay in host RAM and run on the CPU; every other layer's
experts are loaded into GPU memory before decoding and never move. Attention, routers and shared
experts run on the GPU: a CPU layer hands its activations to the host and back (the link's latency
and bytes, plus the CPU's ``sync_us``). The CPU runs a layer's experts one after another, each on all
cores, each on the tokens that chose it (``moesim.sim.costs.cpu_expert_s``).

A row of at least 32 tokens (prefill) is what llama.cpp's CUDA backend offloads instead
(``offload_op``: matrix products with a batch of 32 or more): the layer's experts are copied over the
link into scratch buffers and run on the GPU. On a machine without a GPU every layer is on the CPU
(``auto``), everything else runs there too, and nothing is handed off (llama.cpp's CPU backend).
llama.cpp runs one thread pool over every socket, its weights in the DRAM the loader touched (``NUMA``:
one socket's bandwidth, ``moesim.sim.machine``). There is no cache (policy and capacity are ignored),
so prefetchers do not combine with it. ``cpu_layers = "auto"`` takes the fewest layers on the CPU with
which everything fits in GPU memory (``moesim.sim.memory``).
"""

import numpy as np

from moesim.errors import MoesimError
from moesim.sim.machine import ONE_POOL
from moesim.sim.strategies.base import A_CPU, A_LOAD, ON_CPU, ON_GPU, Cells

NAME = "cpu-experts"
SUMMARY = "llama.cpp --n-cpu-moe"
PARAMS = {"cpu_layers": "auto"}
AUTO_PARAMS = ("cpu_layers",)
PARAM_HELP = {"cpu_layers": "The first N MoE layers keep their experts on the CPU; auto: the fewest with which "
                             "everything fits."}
PLACES = "cpu_layers"  # the parameter that says where the experts are (``moesim validate`` varies it)
CACHE, CPU, PREFETCH = False, True, False
NUMA = ONE_POOL
CPU_OPS = (5, 1)  # llama.cpp's build_moe_ffn on the CPU: gate, up, activation, down, weights, an add per expert
ACTIONS = (A_LOAD, A_CPU)
REPLAY = ("cpu",)  # a CPU layer and a GPU layer never overlap, so the CPU backend's one compute stream runs it
OFFLOAD_MIN_TOKENS = 32  # llama.cpp: ggml_backend_cuda_device_offload_op's min_batch_size


def placement(num_layers: int, params: dict) -> np.ndarray:
    """The first ``cpu_layers`` layers on the CPU, the rest on the GPU."""
    n = params["cpu_layers"]
    if n == "auto":
        raise MoesimError("cpu_layers auto is resolved from memory before placement (moesim.sim.memory)")
    if n > num_layers:
        raise MoesimError(f"cpu_layers {n} is more than the model's {num_layers} MoE layers")
    return np.where(np.arange(num_layers) < n, ON_CPU, ON_GPU).astype(np.int8)


def describe(params: dict, num_layers: int) -> str:
    """The placement in words."""
    return f"{params['cpu_layers']} of {num_layers} layers' experts on the CPU"


def label(params: dict, num_layers: int) -> str:
    """The placement in a table cell."""
    return f"layers on CPU {params['cpu_layers']}/{num_layers}"


def miss_actions(cells: Cells, params: dict) -> np.ndarray:
    """An ON_CPU layer's experts run on the CPU, except in a row llama.cpp offloads: they are copied over."""
    offload = (cells.row_tokens >= OFFLOAD_MIN_TOKENS) & cells.gpu
    on_cpu = (cells.placement == ON_CPU)[None, :, None] & ~offload[:, None, None]
    return np.broadcast_to(np.where(on_cpu, A_CPU, A_LOAD), cells.tokens.shape).astype(np.int8)


def engine(params: dict, config, model) -> tuple[str, str]:
    """llama.cpp's options for this placement (every layer on the GPU, the first N layers' experts on the CPU)."""
    n = params["cpu_layers"]
    return "llama.cpp", "-ngl 99 " + ("--cpu-moe" if n == model.num_layers else f"--n-cpu-moe {n}")
