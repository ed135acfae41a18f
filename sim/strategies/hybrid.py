"""hybrid: kTransformers / HybriMoE. Experts resident in the GPU cache run on the GPU; every other expert
runs on the CPU at the same time, and its weights never wait on the link.

The cache is static with policy ``static`` (kTransformers places hot experts on the GPU once) or
dynamic with any other policy: a missed expert the policy admits is also copied into the slot it
frees, in the background, for later tokens (HybriMoE's cache updates), and the layer does not wait
for that copy. A fill starts only on a copy engine idle at the layer's routing time: HybriMoE does not
say what its updates do when misses outrun the link; queued behind one another they fall ever further
behind, and a later hit waiting on its fill made more GPU memory slower than none (docs/simulator.md).
A static cache's pins come in the same way, as the engine frees, inside the measured run unless a warm-up
(``warmup``) runs first (kTransformers loads them before decoding). A prefetcher's copies take the engines too,
and a prefetched expert is a GPU hit that waits for its copy: with hybrid, a prefetcher can be slower than none
(a known limit: the bundled trace at Q4_K on an RTX 4090, LRU, 2 slots a layer: 12.3 tokens/s without, 8.3 with
``history``). With capacity 0 every routed expert runs on the CPU (kTransformers' DeepSeek setup:
attention and shared experts on the GPU, routed experts on the CPU). Prefetchers combine with it: a
prefetched expert is a GPU hit. HybriMoE also splits a layer's misses between CPU and GPU by cost;
that is ``cpu-miss``'s rule, not modelled here. kTransformers computes the shared experts on the GPU
while the CPU computes the routed ones (``SHARED_OVERLAP``), and its NUMA build keeps a thread pool and a
copy of the experts per socket, each reading its local DRAM (``NUMA``: every socket's bandwidth).
"""

import numpy as np

from moesim.sim.machine import PER_SOCKET
from moesim.sim.strategies.base import A_CPU_FILL, Cells, all_cached

NAME = "hybrid"
SUMMARY = "kTransformers"
PARAMS: dict = {}
CACHE, CPU, PREFETCH = True, True, True
NUMA, SHARED_OVERLAP = PER_SOCKET, True
CPU_OPS = (3, 0)  # kTransformers' MoE operator: one synchronisation per projection stage
ACTIONS = (A_CPU_FILL,)
placement = all_cached


def miss_actions(cells: Cells, params: dict) -> np.ndarray:
    """Every miss on the CPU, its slot filled in the background (where there is a cache)."""
    return np.full(cells.tokens.shape, A_CPU_FILL, np.int8)


def engine(params: dict, config, model) -> tuple[str, str]:
    """With no GPU cache every routed expert runs on the CPU: llama.cpp's --cpu-moe, kTransformers' default rule.
    Pinned experts are kTransformers' optimize rule (a YAML of ``match``/``replace`` entries: the experts it
    places on the GPU take ``generate_device: cuda``, the rest ``generate_device: cpu`` with ``KExpertsCPU``;
    its rules place whole layers, so a pin set is approximated by the layers that hold it). A cache that
    changes (any other policy) is HybriMoE's, research code with no settings to give."""
    cache = config.cache
    if not np.any(cache.capacity):  # 0, or every layer's 0
        return "llama.cpp, kTransformers", "-ngl 99 --cpu-moe"
    if cache.policy == "static":
        return "kTransformers", "--optimize_config_path rules.yaml"
    return "HybriMoE", "none: research code"
