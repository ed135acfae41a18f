"""gpu-cache: experts computed on the GPU only; a missed expert is copied to a GPU slot the replacement
policy frees (or, declined or with no slot, to a scratch buffer) before its layer's kernel runs.
What vLLM-style offloading engines, Mixtral-offloading, MoE-Infinity and the papers' simulators do."""

from moesim.sim.strategies.base import A_LOAD, StrategySpec, all_cached, all_loaded

SPEC = StrategySpec("gpu-cache", "an expert cache on the GPU, misses copied over", all_cached, all_loaded,
                    (A_LOAD,), cache=True, cpu=False, prefetch=True,
                    lookup_tables=True,  # it runs MoLE's lookup tables too (copied per row, no expert cache)
                    replay=("cpu", "cuda"))
