"""llama.cpp (github.com/ggml-org/llama.cpp): the routed experts of the first N layers in host RAM, computed by
its CPU backend (``--n-cpu-moe N``, or ``-ot "blk\\.(0|...|N-1)\\.ffn_(up|down|gate)_exps=CPU"``); everything else
on the GPU (``-ngl 99``); on a machine without a GPU its CPU build runs every layer (``-ngl 0``)."""

from moesim.sim.engines.base import EngineSpec
from moesim.sim.machine import ONE_POOL


def flags(params: dict, config, model, gpu: bool) -> str:
    """``-ngl 99`` and the layers whose experts stay on the CPU; ``-ngl 0`` without a GPU."""
    if not gpu:
        return "-ngl 0"
    n = params.get("cpu_layers", 0)
    return "-ngl 99" + ("" if n == 0 else " --cpu-moe" if n == model.num_layers else f" --n-cpu-moe {n}")


ENGINE = EngineSpec(
    name="llama.cpp", summary="--n-cpu-moe: the first N layers' experts on the CPU", flags=flags,
    source="github.com/ggml-org/llama.cpp", runs=("cpu-experts",), numa=ONE_POOL, cpu_ops=(5, 1),
    offload_min_tokens=32, threads_flag="-t",
    sources=(("numa", "one thread pool over every socket; a page lands in the DRAM of the thread that first "
                      "touched it (the loader), without --numa"),
             ("cpu_ops", "src/llama-graph.cpp build_moe_ffn on the CPU: gate, up, activation, down, the weights, "
                         "and an add per expert"),
             ("offload_min_tokens", "ggml-cuda.cu ggml_backend_cuda_device_offload_op: min_batch_size 32")))
