"""MoE-Infinity (Xue et al., 2024; github.com/EfficientMoE/MoE-Infinity): a GPU expert cache with its own
activation-aware prefetching; the cache is a share of GPU memory (``device_memory_ratio``), not a count of
experts."""

from moesim.sim.engines.base import EngineSpec


def takes(config) -> bool:
    """It prefetches."""
    return config.prefetch.prefetcher != "none"


ENGINE = EngineSpec(
    name="MoE-Infinity", summary="an expert cache on the GPU with prefetching",
    source="github.com/EfficientMoE/MoE-Infinity", runs=("gpu-cache",), takes=takes,
    flags=lambda params, config, model, gpu: "none: its cache is a share of GPU memory (device_memory_ratio), its "
                                             "prefetch its own")
