"""gpu-cache: experts computed on the GPU only; a missed expert is copied to a GPU slot the replacement
policy frees (or, declined or with no slot, to a scratch buffer) before its layer's kernel runs.
What vLLM-style offloading engines, Mixtral-offloading, MoE-Infinity and the papers' simulators do."""

from moesim.sim.strategies.base import A_LOAD, all_cached, all_loaded

NAME = "gpu-cache"
SUMMARY = "an expert cache on the GPU, misses copied over"
PARAMS: dict = {}
CACHE, CPU, PREFETCH = True, False, True
ACTIONS = (A_LOAD,)
LOOKUP_TABLES = True  # it runs MoLE's lookup tables too (copied per row, no expert cache)
REPLAY = ("cpu", "cuda")  # the real replay backends that execute it (moesim.replay.run)
placement = all_cached
miss_actions = all_loaded


def engine(params: dict, config, model) -> tuple[str, str]:
    """The engine that runs this strategy, and its settings: Mixtral-offloading's ``OffloadConfig`` (a Python
    object; it has no command line) keeps E - offload_per_layer experts of every layer in an LRU cache on the
    GPU, and fetches nothing ahead. With a prefetcher it is MoE-Infinity's, whose cache is sized by a share of
    GPU memory (``device_memory_ratio``), not in experts."""
    cache = config.cache
    if config.prefetch.prefetcher != "none":
        return "MoE-Infinity", "none: its cache is a share of GPU memory (device_memory_ratio), its prefetch its own"
    if isinstance(cache.capacity, tuple) or cache.scope != "per-layer":
        return "Mixtral-offloading", "none: its OffloadConfig takes one size for every layer"
    return "Mixtral-offloading", f"offload_per_layer={model.num_experts - cache.capacity}"
