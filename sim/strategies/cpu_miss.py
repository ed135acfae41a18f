"""cpu-miss: Fiddler (Kamahori et al., ICLR 2025). A GPU cache as the policy keeps it (Fiddler's own
is ``static``: the most popular experts pinned); an expert that misses runs on the CPU when that is
faster than copying it and computing it on the GPU, judged per expert and token count:

    CPU  iff  cpu_expert_s(T_e) < copy_s + gpu_expert_s(T_e)

Fiddler's estimate (its ``latency_cpu · tokens`` against a constant ``latency_gpu``) leaves out the
activations' trip to the host, and so does this rule; the simulation charges that trip. A miss run
on the CPU is not cached (the cache does not change), though the policy sees it (``on_miss``: ARC's ghosts,
LeCaR's history learn from it); one copied is placed as under ``gpu-cache``.
CPU and GPU work on a layer's experts at once; the layer ends when both are done. Prefetchers
combine with it (Fiddler has none): a prefetched expert is a GPU hit, or, while its copy is still in flight at
its layer's routing, runs on the CPU where the CPU would hand it back before the copy lands and the GPU runs it
(the same rule on the remaining copy, the CPU's queue included; ``des_loop.load_misses``).
"""

import numpy as np

from moesim.sim.strategies.base import A_CPU, A_LOAD, Cells, StrategySpec, all_cached


def miss_actions(cells: Cells, params: dict) -> np.ndarray:
    """Fiddler's rule, per executed expert: the CPU where it beats the copy and the GPU's kernel (decided once per
    token count, then looked up)."""
    by_tokens = np.where(cells.cpu_s < cells.copy_s + cells.gpu_s, A_CPU, A_LOAD).astype(np.int8)
    return by_tokens[cells.tokens]


SPEC = StrategySpec("cpu-miss", "a GPU cache; a miss on the CPU where that is faster than its copy", all_cached,
                    miss_actions, (A_LOAD, A_CPU), cache=True, cpu=True, prefetch=True)
