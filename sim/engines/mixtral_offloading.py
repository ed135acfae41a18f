"""Mixtral-offloading (Eliseev and Mazur, 2023; github.com/dvmazur/mixtral-offloading): an LRU cache of E -
``offload_per_layer`` experts in every layer on the GPU, nothing fetched ahead, each expert its own kernels. Its
``OffloadConfig`` is a Python object, with no command line."""

from moesim.sim.engines.base import EngineSpec


def takes(config) -> bool:
    """Its cache is LRU and fetches nothing ahead."""
    return config.cache.policy == "lru" and config.prefetch.prefetcher == "none"


def flags(params: dict, config, model, gpu: bool) -> str:
    """``offload_per_layer``: the experts of a layer that are not on the GPU."""
    cache = config.cache
    if isinstance(cache.capacity, tuple) or cache.scope != "per-layer":
        return "none: its OffloadConfig takes one size for every layer"
    return f"offload_per_layer={model.num_experts - cache.capacity}"


ENGINE = EngineSpec(name="Mixtral-offloading", summary="an LRU expert cache on the GPU",
                    source="github.com/dvmazur/mixtral-offloading", runs=("gpu-cache",), flags=flags, takes=takes,
                    kernel="per-expert", layer_us=12205.0,
                    sources=(("kernel", "each expert runs on its own as its cache loads it: the per-expert kind "
                                        "--kernel describes"),
                             ("layer_us", "fitted to its 6 published points (2 groups: its paper's 4 GPUs, Fiddler's "
                                          "repository's 2); held out, its median error 43% against 274% without "
                                          "(python benchmarks/published_offload.py --cv, 2026-12-06)"),))
