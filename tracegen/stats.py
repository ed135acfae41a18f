"""Trace statistics: the locality measures `trace info`, `trace synth --like` and the demo report.

Definitions (all per layer; an access is one (row, layer, slot) of the trace):
- reuse distance: tokens since the same expert was last selected at the same layer in the same
  sequence (1 = it was also selected by the previous token); the first use in a sequence has none.
- stack distance (Mattson): distinct experts of the layer requested since the last request of this
  one, with requests taken one by one in rank order and the cache kept across sequences. An LRU
  cache of C experts per layer, `sequential` semantics, hits exactly the accesses with distance < C.
- concentration: share of a sequence's activations at a layer taken by its top ceil(E/8) experts
  (MELINOE's top-8-of-64 measure), averaged over sequences and layers.
- skew: Gini coefficient of a layer's expert activation counts over the whole trace (0 uniform).
- cross-layer predictability: for each expert a selected at layer l-1, guess the expert most often
  selected together with a at layer l (same token, whole trace); the share of guesses that are in
  the token's layer-l set (the signal next-layer prefetch uses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba as nb
import numpy as np

from moesim.tracegen.trace import Trace

REUSE_BUCKETS = ("1", "2", "3-4", "5-8", "9-16", "17-64", ">64", "first")
_BUCKET_EDGES = np.array([1, 2, 4, 8, 16, 64])  # upper bounds of the finite buckets


@dataclass
class TraceStats:
    reuse_histogram: np.ndarray  # share of accesses per REUSE_BUCKETS entry
    mean_reuse_distance: float  # over accesses that have one
    layer_skew: np.ndarray  # Gini per layer
    concentration: float
    cross_layer_predictability: float
    lru_hit_rate: dict[int, float]  # capacity per layer -> hit rate, sequential semantics

    def vector(self) -> np.ndarray:
        """The statistics the synthetic fit matches, as one vector of comparable scale."""
        return np.r_[self.reuse_histogram, self.concentration, self.layer_skew.mean(),
                     self.cross_layer_predictability, list(self.lru_hit_rate.values())]


def trace_stats(trace: Trace, capacities: tuple[int, ...] | None = None) -> TraceStats:
    """All statistics; LRU hit rates at `capacities` (default: default_capacities; () skips them)."""
    m = trace.meta
    if capacities is None:
        capacities = default_capacities(m.num_experts, m.top_k)
    seq_of_row = trace.row_sequence()
    distances = _reuse_distances(trace.experts, seq_of_row, m.num_experts)
    finite = distances[distances > 0]
    buckets = np.searchsorted(_BUCKET_EDGES, finite, side="left")
    hist = np.r_[np.bincount(buckets, minlength=len(_BUCKET_EDGES) + 1), np.count_nonzero(distances == 0)]
    stack = _stack_distances(trace.experts, m.num_experts) if capacities else np.zeros(0, np.int64)
    counts = layer_counts(trace.experts, m.num_experts)
    return TraceStats(
        reuse_histogram=hist / max(distances.size, 1),
        mean_reuse_distance=float(finite.mean()) if finite.size else math.nan,
        layer_skew=np.array([_gini(c) for c in counts]),
        concentration=_concentration(trace.experts, trace.seq_offsets, m.num_experts),
        cross_layer_predictability=_cross_layer(trace.experts, m.num_experts),
        lru_hit_rate={c: float(np.count_nonzero(stack < c) / max(stack.size, 1)) for c in capacities},
    )


def default_capacities(num_experts: int, top_k: int) -> tuple[int, ...]:
    """A few per-layer capacities between k and E/2 that separate good caches from bad ones."""
    picks = {top_k, max(top_k, num_experts // 4), max(top_k, num_experts // 2)}
    return tuple(sorted(c for c in picks if c < num_experts))


@nb.njit(cache=True)
def _reuse_distances(experts, seq_of_row, num_experts):
    rows, layers, k = experts.shape
    last = np.full((layers, num_experts), -1, dtype=np.int64)
    out = np.zeros(rows * layers * k, dtype=np.int64)
    i = 0
    for r in range(rows):
        if r > 0 and seq_of_row[r] != seq_of_row[r - 1]:
            last[:] = -1
        for layer in range(layers):
            for j in range(k):
                e = experts[r, layer, j]
                if last[layer, e] >= 0:
                    out[i] = r - last[layer, e]
                i += 1
            for j in range(k):
                last[layer, experts[r, layer, j]] = r
    return out


@nb.njit(cache=True)
def _stack_distances(experts, num_experts):
    rows, layers, k = experts.shape
    stacks = np.full((layers, num_experts), -1, dtype=np.int64)  # most recent first
    depth = np.zeros(layers, dtype=np.int64)
    out = np.empty(rows * layers * k, dtype=np.int64)
    i = 0
    for r in range(rows):
        for layer in range(layers):
            stack = stacks[layer]
            for j in range(k):
                e = experts[r, layer, j]
                pos = depth[layer]  # first use: deeper than anything cached
                for p in range(depth[layer]):
                    if stack[p] == e:
                        pos = p
                        break
                out[i] = pos if pos < depth[layer] else num_experts
                if pos == depth[layer]:
                    depth[layer] += 1
                for p in range(pos, 0, -1):
                    stack[p] = stack[p - 1]
                stack[0] = e
                i += 1
    return out


@nb.njit(cache=True)
def layer_counts(experts, num_experts):
    """How often each expert is routed, per layer (int64 [L, E]), over rows of experts [R, L, k] (-1: none)."""
    rows, layers, k = experts.shape
    counts = np.zeros((layers, num_experts), dtype=np.int64)
    for r in range(rows):
        for layer in range(layers):
            for j in range(k):
                if experts[r, layer, j] >= 0:
                    counts[layer, experts[r, layer, j]] += 1
    return counts


def _gini(counts: np.ndarray) -> float:
    x = np.sort(counts.astype(np.float64))
    n = x.size
    if x.sum() == 0:
        return 0.0
    return float((2 * np.arange(1, n + 1) - n - 1) @ x / (n * x.sum()))


@nb.njit(cache=True)
def _concentration(experts, seq_offsets, num_experts):
    layers = experts.shape[1]
    top = (num_experts + 7) // 8
    total = 0.0
    for s in range(seq_offsets.shape[0] - 1):
        counts = layer_counts(experts[seq_offsets[s]:seq_offsets[s + 1]], num_experts)
        for layer in range(layers):  # the share of the top (E + 7) // 8: picked one at a time (no sort to compile)
            row = counts[layer]
            whole = 0
            for e in range(num_experts):
                whole += row[e]
            most = 0
            for _ in range(top):
                best = 0
                for e in range(1, num_experts):
                    if row[e] > row[best]:
                        best = e
                most += row[best]
                row[best] = -1
            total += most / whole
    return total / ((seq_offsets.shape[0] - 1) * layers)


@nb.njit(cache=True)
def _cross_layer(experts, num_experts):
    rows, layers, k = experts.shape
    if layers < 2:
        return 0.0
    pairs = np.zeros((layers, num_experts, num_experts), dtype=np.int64)
    for r in range(rows):
        for layer in range(1, layers):
            for a in range(k):
                for b in range(k):
                    pairs[layer, experts[r, layer - 1, a], experts[r, layer, b]] += 1
    hits = 0
    for r in range(rows):
        for layer in range(1, layers):
            for a in range(k):
                guess = np.argmax(pairs[layer, experts[r, layer - 1, a]])
                for b in range(k):
                    if experts[r, layer, b] == guess:
                        hits += 1
                        break
    return hits / (rows * (layers - 1) * k)


def summary(trace: Trace, stored: list[str]) -> dict:
    """What `moesim trace info` reports: dimensions, sizes and the cheap locality measures.

    `stored`: the optional columns the file holds (the trace may have been loaded without probs).
    """
    m = trace.meta
    st = trace_stats(trace, capacities=())
    return {
        "model": m.model, "layers": m.num_layers, "experts": m.num_experts, "top_k": m.top_k,
        "sequences": trace.num_sequences, "prefill_steps": trace.prefill_steps,
        "decode_steps": trace.decode_steps, "accesses": trace.accesses,
        "dropped_tokens": m.dropped_tokens, "source": m.source,
        "d_model": m.d_model, "d_expert": m.d_expert, "bytes_per_param": m.bytes_per_param,
        "expert_bytes": m.expert_bytes, "shared_experts": m.shared_experts, "d_shared": m.d_shared,
        "routing": m.routing,
        "has": stored,
        "mean_reuse_distance": st.mean_reuse_distance,
        "reuse_histogram": dict(zip(REUSE_BUCKETS, st.reuse_histogram.round(6).tolist())),
        "concentration": st.concentration,
        "cross_layer_predictability": st.cross_layer_predictability,
        "layer_skew_gini": st.layer_skew.round(6).tolist(),
    }
