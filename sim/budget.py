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
byte budget is ``B = bytes // expert_bytes``. Of splits with equal hits the one that spends the most
slots is kept (a slot the trace does not use may serve another prompt).

``best_slots`` is what ``split = "best"`` runs: the split of a configuration's own slots (L·C, or
the sum of its per-layer list) from the policy's curves on the simulated trace. It is the best split
for that trace (in-sample); for a batch of B sequences in the discrete-event engine it is the best
split of their batch-1 accesses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from moesim.errors import MoesimError, argument, named, whole
from moesim.frames import Tabular
from moesim.sim.config import CacheConfig
from moesim.sim.mrc import capacities, curve, hits_table
from moesim.tracegen.trace import Trace


@dataclass
class Allocation(Tabular):
    slots: list        # per layer
    hits: int          # the total hits it gives
    uniform_hits: int  # hits of budget // L slots in every layer
    accesses: int

    def table_rows(self) -> list[dict]:
        """A row per layer: its slots."""
        return [{"layer": layer, "slots": int(n)} for layer, n in enumerate(self.slots)]

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
    b = budget - int(np.argmax(best[::-1]))  # the most slots among the best
    total = int(best[b])
    slots = []
    for layer in range(n_layers - 1, -1, -1):
        slots.append(int(choice[layer, b]))
        b -= slots[-1]
    uniform = min(budget // n_layers, top)
    return Allocation(slots[::-1], total, int(curves[:, uniform].sum()), accesses)


_TABLES: dict = {}  # (id of a trace, its uniform cache) -> (the trace, hits table, smallest capacity, accesses)


def check_budget(trace: Trace, cache: CacheConfig, budget: int) -> None:
    """A budget is a whole number of slots, not above every expert of the trace's layers (then every expert fits,
    there is nothing to split: ``allocate`` would split fewer slots than asked) and not below the smallest capacity a
    run of ``cache`` takes in each layer (``moesim.sim.mrc.capacities``): refused before any curve is simulated."""
    meta = trace.meta
    argument(budget, "budget", "a whole number of slots", whole(budget))
    most, low = meta.num_layers * meta.num_experts, capacities(trace, cache)[0]
    if budget > most:
        raise MoesimError(f"{named('budget', budget)} is more than the {most} experts of the trace's "
                          f"{meta.num_layers} layers")
    if budget < meta.num_layers * low:
        raise MoesimError(f"{named('budget', budget)} is below {low} slots (the least a {cache.semantics} run takes) "
                          f"in each of the trace's {meta.num_layers} layers")


def best_split(trace: Trace, cache: CacheConfig, budget: int, low: int | None = None) -> Allocation:
    """The best split of ``budget`` slots over the layers for ``cache``'s policy, semantics and reset,
    from its exact hits at every per-layer capacity, each layer given at least ``low`` (default: the
    smallest capacity a run takes). The curves of the last few (trace, policy) pairs are kept, so a
    plan's rows and figure points split the same trace without simulating its curves again."""
    check_budget(trace, cache, budget)
    every = replace(cache, capacity=4, scope="per-layer", split="uniform")
    entry = _TABLES.get((id(trace), every))
    if entry is None or entry[0] is not trace:
        rows = curve(trace, every, capacities(trace, every))
        entry = (trace, hits_table(rows), rows[0].capacity, rows[0].accesses)
        while len(_TABLES) >= 4:
            _TABLES.pop(next(iter(_TABLES)))
        _TABLES[(id(trace), every)] = entry
    _, table, smallest, accesses = entry
    return allocate(table, budget, smallest if low is None else max(low, smallest), accesses)


def best_slots(trace: Trace, cache: CacheConfig, low: int | None = None) -> CacheConfig:
    """``cache`` with its slots (a per-layer capacity, L·C in all, or its list's sum) split the best way,
    each layer given at least ``low``: its capacity becomes the list of each layer's slots."""
    total = int(cache.slots(trace.meta.num_layers).sum())
    return replace(cache, capacity=tuple(best_split(trace, cache, total, low).slots))
