"""gpu-cache: experts computed on the GPU only; a missed expert is copied to a GPU slot the replacement
policy frees (or, declined or with no slot, to a scratch buffer) before its layer's kernel runs.
What vLLM-style offloading engines, Mixtral-offloading, MoE-Infinity and the papers' simulators do."""

from moesim.sim.strategies.base import GPU_CACHE, all_cached

NAME = "gpu-cache"
CODE = GPU_CACHE
PARAMS: dict = {}
CACHE, CPU, PREFETCH = True, False, True
placement = all_cached


def engine(params: dict, capacity: int, num_layers: int) -> tuple[str, str]:
    """The engines that run this strategy, and their settings."""
    return "Mixtral-offloading, MoE-Infinity (expert cache)", ""
