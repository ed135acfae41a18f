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
