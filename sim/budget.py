"""Per-layer cache budgets: the split of a total number of expert slots over the layers that
maximises hits, from the layers' miss-ratio curves (``moesim.sim.mrc``).

With per-layer scope each layer's cache sees only its own layer's accesses, so a layer's hits at C
slots do not depend on the other layers' sizes and the total is a sum of independent terms,
``hits(c_0, ..., c_{L-1}) = sum_l h_l(c_l)``. Maximising it subject to ``sum_l c_l <= B`` and
``low <= c_l <= E`` is a knapsack over layers, solved exactly by dynamic programming:
``best_l(b) = max_c best_{l-1}(b - c) + h_l(c)``, O(L * B * E). Greedy (give the next slot to the
layer it gains most in) is exact only when every h_l is concave, which LRU's is not in general
(a cyclic pattern over c+1 experts gains nothing until the c+1-th slot), so it is not used.
Slots rather than bytes: every layer's experts have the same size in the models moesim knows, so a
byte budget is ``B = bytes // expert_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.errors import MoesimError


@dataclass
class Allocation:
    slots: list        # per layer
    hits: int          # the total hits it gives
    uniform_hits: int  # hits of budget // L slots in every layer
    accesses: int

    @property
    def gain(self) -> float:
        """Hit-rate points gained over the uniform split."""
        return (self.hits - self.uniform_hits) / self.accesses


def allocate(curves: np.ndarray, budget: int, low: int, accesses: int) -> Allocation:
    """The best split of ``budget`` slots: ``curves[l, c]`` holds layer l's hits with c slots for
    ``low <= c < curves.shape[1]``."""
    n_layers, top = curves.shape[0], curves.shape[1] - 1
    if not n_layers * low <= budget:
        raise MoesimError(f"budget {budget} is below {low} slots in each of the {n_layers} layers")
    budget = min(budget, n_layers * top)
    neg = np.iinfo(np.int64).min // 2
    best = np.full(budget + 1, neg, np.int64)
    best[0] = 0
    choice = np.zeros((n_layers, budget + 1), np.int64)
    for layer in range(n_layers):
        nxt = np.full(budget + 1, neg, np.int64)
        for c in range(low, min(top, budget) + 1):
            cand = np.full(budget + 1, neg, np.int64)
            cand[c:] = best[:budget + 1 - c] + curves[layer, c]
            better = cand > nxt
            nxt[better], choice[layer, better] = cand[better], c
        best = nxt
    b = int(np.argmax(best))
    total = int(best[b])
    slots = []
    for layer in range(n_layers - 1, -1, -1):
        slots.append(int(choice[layer, b]))
        b -= slots[-1]
    uniform = min(budget // n_layers, top)
    return Allocation(slots[::-1], total, int(curves[:, uniform].sum()), accesses)
