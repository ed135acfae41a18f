"""llama.cpp (github.com/ggml-org/llama.cpp): the routed experts of the first N layers in host RAM, computed by its CPU
backend (``--n-cpu-moe N``, or ``-ot "blk\\.(0|...|N-1)\\.ffn_(up|down|gate)_exps=CPU"``); everything else on the GPU
(``-ngl 99``), over several GPUs as ``-ts`` splits the layers (``moesim.sim.layer_split``); on a machine without a GPU,
or with it left out, every layer on the CPU (``-ngl 0 --no-op-offload``). Its families are the MoE architectures
``src/llama-arch.cpp`` loads, as transformers names them (Mixtral converts to its llama architecture; DeepSeek-V2, V3,
Kimi-K2 and GLM-4.7-Flash to deepseek2)."""

from moesim.sim.cpu_rates import EXPERT_BARRIERS
from moesim.sim.engines.base import GGUF_FORMATS, EngineSpec, Launch
from moesim.sim.machine import DISTRIBUTE, ONE_POOL


def command(launch: Launch, cpu_only: str = "-ngl 0 --no-op-offload", program: str = "llama-server") -> str:
    """``llama-server`` with the GGUF, every layer on the GPU but the first N's experts (without a GPU, or with it left
    out, ``cpu_only``: a CUDA build would still run a prompt's large products on the GPU without its switch),
    the threads where it computes on the CPU, and the context memory was sized for (``-np`` sequences sharing it)."""
    n, layers = launch.cpu_layers, launch.model.num_layers
    # --n-cpu-moe counts llama.cpp's blocks, the dense ones before the MoE layers (DeepSeek's) included
    place = cpu_only if not launch.gpu else "-ngl 99" + (
        "" if n == 0 else " --cpu-moe" if n == layers else f" --n-cpu-moe {n + launch.model.dense_layers}")
    # several GPUs: the layers each holds, the output layer counted, on the GPUs in the order nvidia-smi lists them
    # (CUDA numbers them fastest first unless told)
    several = launch.gpu and (len(launch.split) > 1 or bool(launch.split_mode))
    if several and launch.split:  # the layers each GPU holds, or a share of every layer where one was given
        place += f" -ts {','.join(f'{x:g}' for x in launch.split)}"
    if launch.split_mode:  # every layer split over the GPUs; llama.cpp's automatic fit places by layers, so off
        place += f" -sm {launch.split_mode}" + (" -fit off" if launch.split_mode == "tensor" else "")
    order = several and launch.vendor == "nvidia"
    threads = f" -t {launch.threads}" if n or not launch.gpu else ""
    threads += " --numa distribute" if threads and launch.numa == DISTRIBUTE else ""
    slots = f" -np {launch.batch}" if launch.batch > 1 else ""
    return (f"{ORDER + ' ' if order else ''}{program} -m {launch.gguf} {place}{threads} "
            f"-c {launch.batch * launch.context}{slots}")


ORDER = "CUDA_DEVICE_ORDER=PCI_BUS_ID"  # CUDA's devices in PCI bus order, as nvidia-smi and a hardware file list them


ENGINE = EngineSpec(
    name="llama.cpp", summary="--n-cpu-moe: the first N layers' experts on the CPU", command=command,
    source="github.com/ggml-org/llama.cpp", release="github.com/ggml-org/llama.cpp/releases", runs=("cpu-experts",),
    families=("mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "deepseek_v2", "deepseek_v3", "kimi_k2", "olmoe",
              "phimoe", "gpt_oss", "glm4_moe", "glm4_moe_lite", "dbrx", "granitemoe", "llama4", "minimax_m2"),
    formats=GGUF_FORMATS, loads_gguf=True, numa=ONE_POOL, numa_options=(DISTRIBUTE,), cpu_ops=EXPERT_BARRIERS,
    offload_min_tokens=32, gpus=16,
    tensor_mode="tensor", tensor_families=("mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "phimoe", "gpt_oss",
                                           "glm4_moe", "dbrx", "granitemoe", "llama4"),
    gpu_layer_us=(("amd", 55.0), ("apple", 186.0), ("intel", 414.0)),
    sources=(("numa", "one thread pool over every socket; a page lands in the DRAM of the thread that first "
                      "touched it (the loader), without --numa"),
             ("numa_options", "--numa distribute: the threads pinned evenly over the nodes, the model mapped without "
                              "read-ahead (src/llama-mmap.cpp: POSIX_MADV_RANDOM where numa), so with the page cache "
                              "dropped first (its help says so) the pages land in the DRAM of the threads that first "
                              "read them: every socket's bandwidth, an upper bound (a thread's chunks of a matrix "
                              "change from token to token)"),
             ("cpu_ops", "src/llama-graph.cpp build_moe_ffn on the CPU: gate, up, activation, down, the weights, "
                         "and an add per expert"),
             ("offload_min_tokens", "ggml-cuda.cu ggml_backend_cuda_device_offload_op: min_batch_size 32"),
             ("gpus", "--split-mode layer (the default) over up to GGML_CUDA_MAX_DEVICES = 16 GPUs, -ts the share of "
                      "layers each takes (src/llama-model.cpp load_tensors)"),
             ("tensor_mode", "--split-mode tensor (PR #19378, 2026): every matrix split over the GPUs, two "
                             "all-reduces a layer (ggml-backend-meta.cpp); docs/multi-gpu.md: -ts even by default, "
                             "-fit off, not for OLMoE, DeepSeek-V2's family or MiniMax-M2 (its families: the others)"),
             ("gpu_layer_us", "fitted to its published points on each maker's GPUs (python "
                              "benchmarks/published_offload.py --cv, 2026-12-07): its ROCm and Vulkan builds on AMD's, "
                              "22 points in 7 groups, held out 8% against 13% without; its Metal build on Apple's, 6 "
                              "points in 5 groups, 17% against 85%; its SYCL and Vulkan builds on Intel's, 5 points in "
                              "3 groups, 52% against 214%")))
