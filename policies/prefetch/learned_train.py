"""Training of the learned prefetcher (``moesim.policies.prefetch.learned``) with scikit-learn, and its held-out score.

The sequences split as ml-ffn's do (``moesim.policies.ml_ffn_train.split``: the last ceil(fraction x S) validate).
For each layer and expert, a logistic regression (``LogisticRegression``, L2 with strength ``c``, lbfgs) is fitted on
every row of the training sequences: the features of ``learned.features``, the label whether the expert was routed.
The held-out score is what a cache would gain, per layer, over the decode rows of the validation sequences: precision
|P ∩ R| / |P| and recall |P ∩ R| / |R| of the predicted set P against the routed set R (as ``moesim.sim.des`` judges
a run's predictions), for the learned model beside ``history`` trained on the same sequences. A layer's regressions
see every training row at once: N rows x 2E features of 4 bytes (a training trace of 100,000 tokens of a 256-expert
model: 205 MB a layer); predicting takes chunks of rows whatever the trace.
"""

from __future__ import annotations

import numpy as np

from moesim.errors import MoesimError, named
from moesim.policies.ml_ffn_train import split
from moesim.policies.prefetch import history, learned
from moesim.tracegen.schema import DECODE
from moesim.tracegen.trace import Trace


def feature_kind(trace: Trace) -> str:
    """What the features hold: the router's whole distribution where the trace records it for every token and layer,
    else the chosen experts' gate weights where it records those, else the chosen experts."""
    for kind, recorded in (("probs", trace.probs), ("weights", trace.weights)):
        if recorded is not None and not np.isnan(recorded).any():
            return kind
    return "chosen"


def fit(trace: Trace, c: float = 1.0) -> dict:
    """The model's arrays (``learned.load_model``'s) fitted on every row of ``trace``."""
    try:
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        raise MoesimError("training the learned prefetcher needs scikit-learn: pip install 'moesim[fit]' (or "
                          "pip install scikit-learn)") from None
    kind = feature_kind(trace)
    n, layers, e = trace.num_rows, trace.meta.num_layers, trace.meta.num_experts
    coef, intercept = np.zeros((layers, e, 2 * e), np.float32), np.zeros((layers, e), np.float32)
    for layer in range(layers):
        x = learned.features(trace, kind, layer)
        routed = np.zeros((n, e), np.bool_)
        np.put_along_axis(routed, trace.experts[:, layer].astype(np.int64), True, axis=1)
        for expert in range(e):
            y = routed[:, expert]
            if y.all() or not y.any():  # one class: no regression, its smoothed frequency
                p = (y.sum() + 0.5) / (n + 1)
                intercept[layer, expert] = np.log(p / (1 - p))
                continue
            model = LogisticRegression(C=c, max_iter=1000).fit(x, y)
            coef[layer, expert], intercept[layer, expert] = model.coef_[0], model.intercept_[0]
    return {"coef": coef, "intercept": intercept, "features": np.int64(learned.FEATURES.index(kind))}


def quality(pred: np.ndarray, trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, precision and recall of ``pred`` (int [N, L, P], -1 padding) against ``trace``'s routing over its
    decode rows (NaN where a layer has none)."""
    rows = trace.phase == DECODE
    p, r = pred[rows].astype(np.int64), trace.experts[rows].astype(np.int64)
    both = ((p[..., :, None] == r[..., None, :]).any(axis=3) & (p >= 0)).sum(axis=(0, 2))
    predicted, actual = (p >= 0).sum(axis=(0, 2)), r.shape[0] * r.shape[2]
    with np.errstate(invalid="ignore", divide="ignore"):
        return both / predicted, both / np.full(both.shape, actual, float)


def train(trace: Trace, *, val_fraction: float = 0.2, c: float = 1.0) -> tuple[dict, dict]:
    """The model fitted on the training sequences, and the log: which sequences trained and validated, what the
    features hold, and per layer the held-out precision and recall of the model and of ``history`` (trained on the
    same sequences)."""
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not np.isfinite(c) or c <= 0:
        raise MoesimError(f"{named('c', c)}: the inverse regularisation strength must be a number above 0")
    train_idx, val_idx = split(trace, val_fraction)  # (its fraction checked, before any fit)
    train_trace, val = trace.select(train_idx), trace.select(val_idx)
    arrays = fit(train_trace, float(c))
    kind = learned.FEATURES[int(arrays["features"])]
    scores = {"learned": learned.predictions(val, {**arrays, "features": kind}),
              "history": history.predict(val, {"train_trace": train_trace})}
    log = {"train_sequences": train_idx.tolist(), "val_sequences": val_idx.tolist(), "features": kind}
    for name, pred in scores.items():
        precision, recall = quality(pred, val)
        log[name] = {"precision": _mean(precision), "recall": _mean(recall),
                     "per_layer_precision": precision.tolist(), "per_layer_recall": recall.tolist()}
    return arrays, log


def _mean(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else None
