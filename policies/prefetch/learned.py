"""learned: predict the next layer's experts with a classifier trained on a routing trace (scikit-learn).

What it sees is what ``history`` sees (Pre-gated MoE and ProMoE predict the next layer from the routing known so
far): for (token t, layer l), the router's view of layer l−1 of the same token and of layer l at the previous token
of the sequence, each as a vector over the E experts, concatenated (2E features; zeros where there is none: layer 0
has no layer before it, a sequence's first token no token before it). Each vector holds the router probability of
each expert where the trace records the whole distribution (``probs``), else the gate weight of each chosen expert
(``weights``), else 1 for each chosen one: the training trace decides which, and a simulated trace must record the
same. Per layer, one logistic regression per expert (one-vs-rest, scikit-learn's ``LogisticRegression``, L2,
``C`` = 1) gives the probability that the expert is routed; the k most probable are prefetched (ties to the lower
id). An expert a layer never (or always) routed in training gets no weights and the log-odds of its smoothed
frequency, (n + ½) / (N + 1).

Where it differs from history: history scores by counts of co-occurrence, summed; this weighs each feature by
what it adds given the others, and so may learn that one predecessor matters more than another. The model is the
regressions' coefficients and intercepts in a plain ``.npz`` (no pickle), written by ``moesim train prefetcher``
(``moesim.policies.prefetch.learned_train``); predicting needs numpy only. Parameter ``prefetch_model``: that
file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from moesim.errors import MoesimError, named
from moesim.files import read_arrays
from moesim.params import Param
from moesim.policies.prefetch import PrefetcherSpec

FEATURES = ("chosen", "weights", "probs")  # what each feature vector holds, as the model file names it


def load_model(path: str | Path) -> dict:
    """The arrays of a model file ``moesim train prefetcher`` wrote, checked: ``coef`` float [L, E, 2E],
    ``intercept`` float [L, E], both finite, ``features`` an index of ``FEATURES``."""
    model = read_arrays(path, "prefetcher model", "moesim train prefetcher", ("coef", "intercept", "features"))
    coef, intercept, features = model["coef"], model["intercept"], model["features"]
    if coef.ndim != 3 or coef.dtype.kind != "f" or min(coef.shape, default=0) < 1 or coef.shape[2] != 2 * coef.shape[1]:
        raise MoesimError(f"{path}: coef has shape {coef.shape} and dtype {coef.dtype}; a model of L layers and E "
                          "experts needs float (L, E, 2E)")
    if intercept.shape != coef.shape[:2] or intercept.dtype.kind != "f":
        raise MoesimError(f"{path}: intercept has shape {intercept.shape} and dtype {intercept.dtype}; coef's layers "
                          f"and experts need float {coef.shape[:2]}")
    if not (np.isfinite(coef).all() and np.isfinite(intercept).all()):
        raise MoesimError(f"{path}: the model holds NaN or infinite weights")
    if features.shape != () or features.dtype.kind not in "iu" or not 0 <= int(features) < len(FEATURES):
        raise MoesimError(f"{path}: features must be one integer in 0..{len(FEATURES) - 1} ({', '.join(FEATURES)})")
    return {"coef": coef, "intercept": intercept, "features": FEATURES[int(features)]}


CHUNK_ROWS = 4096  # rows whose features are built at once: memory ~ CHUNK_ROWS x 2E floats, whatever the trace


def check_view(trace, kind: str) -> None:
    """Refuse a trace that lacks what the model's features hold (``kind``, one of ``FEATURES``) anywhere."""
    recorded = {"probs": trace.probs, "weights": trace.weights}.get(kind, trace.experts)
    if recorded is None or (recorded.dtype.kind == "f" and np.isnan(recorded).any()):
        what = {"probs": "router probabilities", "weights": "gate weights"}[kind]
        raise MoesimError(f"the model learned from {what}, and the trace does not record them for every token and "
                          "layer; train on a trace like the one simulated")


def router_view(trace, kind: str, lo: int, hi: int, layer: int) -> np.ndarray:
    """float32 [hi - lo, E]: rows lo..hi-1 of ``layer`` as a vector over the experts, as ``kind`` says."""
    if kind == "probs":
        return trace.probs[lo:hi, layer].astype(np.float32)
    chosen = trace.experts[lo:hi, layer].astype(np.int64)
    values = trace.weights[lo:hi, layer].astype(np.float32) if kind == "weights" else np.ones(chosen.shape, np.float32)
    view = np.zeros((hi - lo, trace.meta.num_experts), np.float32)
    np.put_along_axis(view, chosen, values, axis=1)
    return view


def features(trace, kind: str, layer: int, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """float32 [hi - lo, 2E]: for rows lo..hi-1 at ``layer``, the view of the layer before (same token) beside the
    view of this layer at the previous token of the sequence (zeros where there is none)."""
    hi = trace.num_rows if hi is None else hi
    e = trace.meta.num_experts
    out = np.zeros((hi - lo, 2 * e), np.float32)
    if layer > 0:
        out[:, :e] = router_view(trace, kind, lo, hi, layer - 1)
    start = max(lo, 1)
    if start < hi:
        out[start - lo:, e:] = router_view(trace, kind, start - 1, hi - 1, layer)
    first = trace.seq_offsets[:-1]
    out[first[(first >= lo) & (first < hi)] - lo, e:] = 0.0  # a sequence's first token has no token before it
    return out


def top_experts(scores: np.ndarray, k: int) -> np.ndarray:
    """int16 [N, k]: the k best-scored experts of each row, best first, ties to the lower id."""
    return np.argsort(-scores, axis=1, kind="stable")[:, :k].astype(np.int16)


def predict(trace, params) -> np.ndarray:
    path = params["prefetch_model"]
    if path is None:
        raise MoesimError(f"prefetcher learned needs a model: pass {named('prefetch_model', 'MODEL.npz')} (from "
                          "'moesim train prefetcher' or moesim.train_prefetcher)")
    model = load_model(path)
    coef = model["coef"]
    if coef.shape[:2] != (trace.meta.num_layers, trace.meta.num_experts):
        raise MoesimError(f"{path}: model is for {coef.shape[0]} layers x {coef.shape[1]} experts; the trace has "
                          f"{trace.meta.num_layers} x {trace.meta.num_experts}")
    try:
        check_view(trace, model["features"])
    except MoesimError as exc:
        raise MoesimError(f"{path}: {exc}") from None
    return predictions(trace, model)


def predictions(trace, model: dict) -> np.ndarray:
    """int16 [N, L, k]: the k most probable experts of every row and layer under ``model`` (``load_model``'s
    arrays), a chunk of rows at a time."""
    coef, intercept = model["coef"].astype(np.float32), model["intercept"].astype(np.float32)
    out = np.empty(trace.experts.shape, np.int16)
    for layer in range(trace.meta.num_layers):
        for lo in range(0, trace.num_rows, CHUNK_ROWS):
            hi = min(trace.num_rows, lo + CHUNK_ROWS)
            scores = features(trace, model["features"], layer, lo, hi) @ coef[layer].T + intercept[layer]
            out[lo:hi, layer] = top_experts(scores, trace.meta.top_k)
    return out


SPEC = PrefetcherSpec("learned", "next", predict=predict, params={
    "prefetch_model": Param(None, "file", "Model file from 'moesim train prefetcher' (needed by the learned "
                                          "prefetcher).")})
