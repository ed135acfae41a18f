"""Mixtral-offloading (Eliseev and Mazur, 2023; github.com/dvmazur/mixtral-offloading): an LRU cache of E -
``offload_per_layer`` experts in every layer on the GPU, nothing fetched ahead, each expert its own kernels. It runs
Mixtral-8x7B with HQQ 2-bit experts (``int2``) from its notebook, configured by an ``OffloadConfig`` (no command
line): ``main_size`` experts on the GPU, ``offload_size`` in host RAM, ``buffer_size`` 4 as its demo sets it."""

from moesim.sim.engines.base import EngineSpec, Launch


def takes(config) -> bool:
    """Its cache is LRU and fetches nothing ahead."""
    return config.cache.composed == "lru" and config.prefetch.prefetcher == "none"


def command(launch: Launch) -> str:
    """Its ``OffloadConfig``: one cache size for every layer."""
    cache = launch.config.cache
    if isinstance(cache.capacity, tuple) or cache.scope != "per-layer":
        return "none: its OffloadConfig takes one size for every layer"
    layers, off = launch.model.num_layers, launch.model.num_experts - cache.capacity
    return (f"OffloadConfig(main_size={layers * cache.capacity}, offload_size={layers * off}, buffer_size=4, "
            f"offload_per_layer={off})")


ENGINE = EngineSpec(name="Mixtral-offloading", summary="an LRU expert cache on the GPU",
                    source="github.com/dvmazur/mixtral-offloading",
                    release="github.com/dvmazur/mixtral-offloading (a notebook)", runs=("gpu-cache",),
                    command=command, takes=takes, families=("mixtral",), formats=("int2",), kernel="per-expert",
                    layer_loop="python", layer_us=12205.0,
                    sources=(("kernel", "each expert runs on its own as its cache loads it: the per-expert kind "
                                        "--kernel describes"),
                             ("layer_us", "fitted to its 6 published points (2 groups: its paper's 4 GPUs, Fiddler's "
                                          "repository's 2); held out, its median error 43% against 274% without "
                                          "(python benchmarks/published_offload.py --cv, 2026-12-06)"),))
