"""kTransformers (github.com/kvcache-ai/ktransformers): attention and shared experts on the GPU, routed experts on
the CPU, the most used experts placed on the GPU. Its current release is kt-kernel under SGLang
(``kt-kernel/README.md``): ``--kt-num-gpu-experts N`` keeps N experts a layer on the GPU, N times the MoE layers in
all, which ``--kt-expert-placement-strategy frequency`` takes as the most activated (layer, expert) pairs of a
recorded distribution (``--init-expert-location``): the pinned global pool moesim simulates, rounded down to a
whole number a layer (up to layers - 1 slots of the simulated pool unused). Its families are the models that
release lists; the archived local_chat stack's rules (Mixtral, Qwen2-MoE) place whole layers, not a pool."""

from moesim.sim.engines.base import GGUF_FORMATS, EngineSpec, Launch
from moesim.sim.machine import DISTRIBUTE, ONE_POOL, PER_SOCKET

# the expert distribution the frequency placement reads: SGLang's --init-expert-location takes a JSON file holding
# {"logical_count": [[count per expert] per layer]} (sglang/srt/eplb/expert_location.py, init_by_eplb);
# moesim plan --expert-counts FILE writes the plan's trace's
EXPERT_COUNTS = "expert-counts.json"
# an expert format -> its --kt-method (a GGUF's types: LLAMAFILE, its llamafile kernels on the GGUF)
METHODS = {"bf16": "BF16", "fp8": "FP8", "int8": "AMXINT8", "int4": "AMXINT4"}


def takes(config) -> bool:
    """Its GPU experts are placed once (policy ``static``), or there are none (capacity 0)."""
    return config.cache.policy == "static" or not _has_cache(config)


def _has_cache(config) -> bool:
    capacity = config.cache.capacity
    return capacity == "auto" or bool(sum(capacity) if isinstance(capacity, tuple) else capacity)


def command(launch: Launch) -> str:
    """SGLang with kt-kernel: the CPU's experts in the format's method, a thread pool a socket (one in all where the
    run lays them out as one pool), the pool's experts a layer placed by frequency, and the KV tokens memory was sized
    for; none for a copy of the experts per socket, which kt-kernel does not keep."""
    if launch.numa == PER_SOCKET:
        return ("none: kt-kernel splits each expert over the NUMA nodes (--numa distribute); a copy per socket was the "
                "archived local_chat built with USE_NUMA=1")
    method = METHODS.get(launch.fmt, "LLAMAFILE")
    weights = launch.gguf if method == "LLAMAFILE" else launch.checkpoint
    per_layer = launch.capacity // launch.model.num_layers if launch.capacity else 0
    pools = 1 if launch.numa == ONE_POOL else launch.sockets
    placed = f" --kt-expert-placement-strategy frequency --init-expert-location {EXPERT_COUNTS}" if per_layer else ""
    return (f"python -m sglang.launch_server --model {launch.checkpoint} --kt-weight-path {weights} --kt-method "
            f"{method} --kt-cpuinfer {launch.threads} --kt-threadpool-count {pools} --kt-num-gpu-experts "
            f"{per_layer}{placed} --max-total-tokens {launch.batch * launch.context}")


ENGINE = EngineSpec(
    name="kTransformers", summary="routed experts on the CPU, hot ones pinned on the GPU", command=command,
    takes=takes, source="github.com/kvcache-ai/ktransformers", release="pip install kt-kernel", runs=("hybrid",),
    families=("deepseek_v3", "qwen3_moe", "qwen3_next", "glm4_moe", "kimi_k2", "minimax_m2"),
    formats=(*GGUF_FORMATS, *METHODS), loads_gguf=True, numa=DISTRIBUTE, numa_options=(ONE_POOL, PER_SOCKET),
    shared_overlap=True, cpu_ops=(3, 0),
    layer_loop="python", layer_us=521.0,
    sources=(("numa", "kt-kernel's README: its converted weights split each expert over the NUMA nodes (a "
                      "...numa.{idx}.weight tensor each), a thread pool a node (--kt-threadpool-count)"),
             ("numa_options", "--kt-threadpool-count 1: one pool; the archived local_chat built with USE_NUMA=1 kept "
                              "a pool and a copy of the experts per socket (its DeepSeek-V3 tutorial: 382 GB of DRAM "
                              "on one socket, 1 TB on two), and without it one pool"),
             ("shared_overlap", "the shared experts run on the GPU while the CPU computes the routed ones"),
             ("cpu_ops", "its MoE operator synchronises once per projection stage"),
             ("families", "kt-kernel's README: DeepSeek-V3/R1/V3.2, GLM-4.7, Kimi-K2, MiniMax-M2, Qwen3, Qwen3-Next"),
             ("layer_us", "fitted to its 5 published points (3 groups); held out, its median error 8% against 50% "
                          "without, 50% where each fold chose from its own groups whether to ship it (python "
                          "benchmarks/published_offload.py --cv, 2026-12-08)")))
