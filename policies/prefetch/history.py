"""history: predict the next layer's experts from this layer's and from the previous token's.

Statistics learned on a training trace (MoE-Infinity / AdapMoE style activation history): for each
layer l ≥ 1, P_cross[l](j | i) — expert j routed at layer l when i was routed at layer l-1 of the
same token; for each layer, P_prev[l](j | i) — j routed at layer l when i was at layer l of the
previous token. The score of j for (token t, layer l) is
Σ_{i ∈ R(t, l-1)} P_cross[l](j | i) + Σ_{i ∈ R(t-1, l)} P_prev[l](j | i), and the k best are
prefetched (ties to the lower id); layer 0 uses the temporal term alone. Both terms are known when
layer l-1 has routed. Parameter ``train_trace``: a Trace (default: the simulated trace itself, which
makes the statistics optimistic).
"""

import numpy as np
from numba import njit

from moesim.errors import MoesimError
from moesim.policies.prefetch import PrefetcherSpec, TRAIN_TRACE


def predict(trace, params) -> np.ndarray:
    train = trace if params["train_trace"] is None else params["train_trace"]
    if (train.meta.num_layers, train.meta.num_experts) != (trace.meta.num_layers, trace.meta.num_experts):
        raise MoesimError(f"training trace has {train.meta.num_layers} layers x {train.meta.num_experts} experts, "
                          f"the simulated trace {trace.meta.num_layers} x {trace.meta.num_experts}")
    cross, prev = learn(train.experts, train.seq_offsets.astype(np.int64), trace.meta.num_experts)
    for table in (cross, prev):  # counts to conditional probabilities (the sums are of whole numbers: exact)
        totals = table.sum(axis=2, keepdims=True)
        np.divide(table, totals, out=table, where=totals > 0)
    return apply(trace.experts, trace.seq_offsets.astype(np.int64), cross, prev)


@njit(cache=True)
def learn(experts, seq_offsets, num_experts):
    """How often j followed i: at the next layer of the same token (``cross``), at the same layer of the next
    token (``prev``). Counted here, normalised by ``predict`` (in numpy: it compiles in a fraction of the time)."""
    n_layers, k = experts.shape[1], experts.shape[2]
    cross = np.zeros((n_layers, num_experts, num_experts))
    prev = np.zeros((n_layers, num_experts, num_experts))
    for s in range(seq_offsets.shape[0] - 1):
        for row in range(seq_offsets[s], seq_offsets[s + 1]):
            for layer in range(n_layers):
                for a in range(k):
                    i = experts[row, layer, a]
                    for b in range(k):
                        if layer + 1 < n_layers:
                            cross[layer + 1, i, experts[row, layer + 1, b]] += 1.0
                        if row + 1 < seq_offsets[s + 1]:
                            prev[layer, i, experts[row + 1, layer, b]] += 1.0
    return cross, prev


@njit(cache=True)
def apply(experts, seq_offsets, cross, prev):
    n_rows, n_layers, k = experts.shape
    num_experts = cross.shape[1]
    out = np.full((n_rows, n_layers, k), -1, np.int16)
    score = np.empty(num_experts)
    top_score = np.empty(k)
    for layer in range(n_layers):  # layer by layer: its two tables stay in cache while every row reads them
        for s in range(seq_offsets.shape[0] - 1):
            for row in range(seq_offsets[s], seq_offsets[s + 1]):
                for e in range(num_experts):
                    score[e] = 0.0
                if layer > 0:
                    for a in range(k):
                        add_row(score, cross[layer, experts[row, layer - 1, a]])
                if row > seq_offsets[s]:
                    for a in range(k):
                        add_row(score, prev[layer, experts[row - 1, layer, a]])
                top_k(score, k, top_score, out[row, layer])
    return out


@njit(cache=True)
def add_row(score, row):
    """score += row, over a 1-d view: a loop LLVM vectorises (indexing the 3-d table inside it, it did not)."""
    for e in range(score.shape[0]):
        score[e] += row[e]


@njit(cache=True)
def top_k(score, k, top_score, top):
    """The k best-scored ids (k >= 1: a trace routes at least one expert) with a score above 0 into ``top`` (best
    first, ties to the lower id; -1 past the last, as ``top`` came), in one pass: an id enters the sorted list
    only above its k-th, behind those that score the same."""
    n = 0
    for e in range(score.shape[0]):
        s = score[e]
        if s <= 0.0 or (n == k and s <= top_score[k - 1]):
            continue
        i = min(n, k - 1)
        while i > 0 and top_score[i - 1] < s:  # move the lower scores down a place
            top_score[i] = top_score[i - 1]
            top[i] = top[i - 1]
            i -= 1
        top_score[i] = s
        top[i] = e
        n = min(n + 1, k)


SPEC = PrefetcherSpec("history", "next", predict=predict, params={"train_trace": TRAIN_TRACE})
