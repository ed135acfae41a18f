"""kTransformers (github.com/kvcache-ai/ktransformers): attention and shared experts on the GPU, routed experts on
the CPU (``KExpertsCPU``), the hottest experts placed on the GPU by an optimize rule (a YAML of ``match`` /
``replace`` entries whose rules place whole layers: a pin set is written as the layers that hold it)."""

from moesim.sim.engines.base import EngineSpec
from moesim.sim.machine import PER_SOCKET


def takes(config) -> bool:
    """Its GPU experts are placed once (policy ``static``), or there are none (capacity 0)."""
    return config.cache.policy == "static" or not _has_cache(config)


def _has_cache(config) -> bool:
    capacity = config.cache.capacity
    return capacity == "auto" or bool(sum(capacity) if isinstance(capacity, tuple) else capacity)


def flags(params: dict, config, model, gpu: bool) -> str:
    """Its default rule for the model (every routed expert on the CPU), or a rule file of the pinned experts."""
    return "--optimize_config_path rules.yaml" if _has_cache(config) else ""


ENGINE = EngineSpec(
    name="kTransformers", summary="routed experts on the CPU, hot ones pinned on the GPU", flags=flags, takes=takes,
    source="github.com/kvcache-ai/ktransformers", runs=("hybrid",), numa=PER_SOCKET, shared_overlap=True,
    cpu_ops=(3, 0), threads_flag="--cpu_infer", layer_us=840.0,
    sources=(("numa", "its NUMA build (USE_NUMA=1) keeps a thread pool and a copy of the experts per socket"),
             ("shared_overlap", "the shared experts run on the GPU while the CPU computes the routed ones"),
             ("cpu_ops", "its MoE operator synchronises once per projection stage"),
             ("layer_us", "fitted to its 5 published points (3 groups); held out, its median error 40% against 50% "
                          "without (python benchmarks/published_offload.py --cv, 2026-12-06)")))
