"""MoE-Infinity (Xue et al., 2024; github.com/EfficientMoE/MoE-Infinity): a GPU expert cache with its own
activation-aware prefetching; the cache is a share of GPU memory (``device_memory_ratio``), not a count of
experts."""

from moesim.sim.engines.base import EngineSpec


def takes(config) -> bool:
    """It prefetches."""
    return config.prefetch.prefetcher != "none"


ENGINE = EngineSpec(
    name="MoE-Infinity", summary="an expert cache on the GPU with prefetching",
    source="github.com/EfficientMoE/MoE-Infinity", runs=("gpu-cache",), takes=takes, layer_us=2606.0,
    sources=(("layer_us", "fitted to its 5 published points (2 groups: its README's A5000, MELINOE's H100); held "
                          "out, its median error 22% against 44% without (python benchmarks/published_offload.py "
                          "--cv, 2026-12-06)"),),
    flags=lambda params, config, model, gpu: "none: its cache is a share of GPU memory (device_memory_ratio), its "
                                             "prefetch its own")
