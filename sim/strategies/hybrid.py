"""hybrid: kTransformers / HybriMoE. Experts resident in the GPU cache run on the GPU; every other expert
runs on the CPU at the same time, and its weights never wait on the link.

The cache is static with policy ``static`` (kTransformers places hot experts on the GPU once) or
dynamic with any other policy: a missed expert the policy admits is also copied into the slot it
frees, in the background, for later tokens (HybriMoE's cache updates), and the layer does not wait
for that copy. A fill starts only on a copy engine idle at the layer's routing time: HybriMoE does not
say what its updates do when misses outrun the link; queued behind one another they fall ever further
behind, and a later hit waiting on its fill made more GPU memory slower than none (docs/simulator.md).
A static cache's pins come in the same way, as the engine frees, inside the measured run unless a warm-up
(``warmup``) runs first (kTransformers loads them before decoding). A prefetcher's copies take the engines too.
An expert resident (or prefetched into staging) whose copy is still in flight when its layer routes runs on the
CPU where the CPU would hand it back before the copy lands and the GPU runs it (``des_loop.load_misses``, the
simulator's rule in the spirit of HybriMoE's intra-layer scheduling, which balances a layer's experts between
CPU and GPU by their ready times; it gives no formula to copy). Before 2026-11-27 such an expert waited for its
copy, and a prefetcher made hybrid slower than none (the bundled trace at Q4_K on an RTX 4090, LRU, 2 slots a
layer: 12.6 tokens/s without, 8.4 with ``history``; now 10.1, and at 4 and 6 slots ``history`` is faster than
none, 19.8 and 33.8 against 18.7 and 31.8). An aggressive prefetcher still costs where copies are slower than
the CPU: ``oracle`` at 2, 4 and 6 slots runs at 9.0, 10.4 and 21.7 (6.1, 9.7 and 18.6 before), its copies
evicting residents that would have hit for experts the CPU computes anyway. With capacity 0 every routed expert
runs on the CPU (kTransformers' DeepSeek setup: attention and shared experts on the GPU, routed experts on the
CPU). HybriMoE also splits a layer's misses between CPU and GPU by cost; that is ``cpu-miss``'s rule, not
modelled here. How the engine uses the CPU (its layout over the sockets, its shared experts beside the routed
ones) is the engine's (``moesim.sim.engines``).
"""

import numpy as np

from moesim.sim.strategies.base import A_CPU_FILL, Cells, StrategySpec, all_cached


def miss_actions(cells: Cells, params: dict) -> np.ndarray:
    """Every miss on the CPU, its slot filled in the background (where there is a cache)."""
    return np.full(cells.tokens.shape, A_CPU_FILL, np.int8)


SPEC = StrategySpec("hybrid", "a GPU cache; every miss on the CPU", all_cached, miss_actions, (A_CPU_FILL,), cache=True,
                    cpu=True, prefetch=True)
