"""ml-ffn: FlashMoE's learned eviction (§3.2, Algorithm 1) — evict the largest predicted distance.

Features, per expert of a layer at token t (FlashMoE's definitions): recency r (1 if routed at t,
else one more than at t−1; never routed → 1/r = 0) and frequency f (routings so far), fed as
[1/r_1..1/r_E ‖ f_1/max f .. f_E/max f] — the concatenated score vector of Algorithm 1. A 3-layer
FFN (hidden 128, SiLU) maps it to one predicted distance-to-next-use per expert of the layer, and
the resident expert outside the request set with the largest prediction is evicted. Training
(``moesim train ml-ffn``, see ``ml_ffn_train``) regresses Belady's quantity, the tokens until each
expert's next routing, with MSE and AdamW (lr 1e-3, weight decay 1e-2 from FlashMoE Table 1).

Where this differs: the paper masks the loss to the experts Belady would evict; here every expert's
distance is a target (log-scaled and capped at a horizon) because which experts are candidates
depends on the policy running. Features count from the start of the trace (or the last reset).
Inference runs inside the compiled engine, once per (token, layer) that needs a victim, from the
exported weights (parameter ``ml_model``: the .npz path). One model per layer, or one shared.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import njit

from moesim import MoesimError
from moesim.policies.base import min_key_slot, no_access, no_miss
from moesim.sim.engine import compile_engine

NAME = "ml-ffn"
WEIGHTS = ("w1", "b1", "w2", "b2", "w3", "b3")


def load_model(path: str | Path) -> dict:
    """The arrays of a model file written by ``moesim train ml-ffn`` (plain npz, no pickles)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            model = {k: f[k] for k in f.files}
    except (OSError, ValueError) as exc:
        raise MoesimError(f"{path}: not a readable ml-ffn model file ({exc})") from None
    missing = [k for k in WEIGHTS + ("num_experts",) if k not in model]
    if missing:
        raise MoesimError(f"{path}: not an ml-ffn model file (missing {', '.join(missing)})")
    return model


def make_state(ctx):
    path = ctx.params.get("ml_model")
    if path is None:
        raise MoesimError("policy ml-ffn needs a model: pass --ml-model MODEL.npz (from 'moesim train ml-ffn')")
    model = load_model(path)
    num_models = model["w1"].shape[0]
    if int(model["num_experts"]) != ctx.num_experts or num_models not in (1, ctx.num_layers):
        raise MoesimError(f"{path}: model is for {int(model['num_experts'])} experts and {num_models} layer "
                          f"model(s); the trace has {ctx.num_experts} experts and {ctx.num_layers} layers")
    w = tuple(np.ascontiguousarray(model[k], np.float32) for k in WEIGHTS)
    n, hidden = ctx.num_objects, w[0].shape[2]
    scratch = (np.zeros(2 * ctx.num_experts, np.float32), np.zeros(hidden, np.float32),
               np.zeros(hidden, np.float32), np.zeros(ctx.num_experts, np.float32))
    # weights; last routed row per object; count per object; max count per layer; -prediction per
    # object; row each layer's prediction is for; [experts per layer, current row]; scratch
    return (w, np.zeros(n, np.int64), np.zeros(n), np.zeros(ctx.num_layers), np.zeros(n),
            np.zeros(ctx.num_layers, np.int64), np.array([ctx.num_experts, 0], np.int64), scratch)


@njit(cache=True)
def features(last_row, count, max_count, row, layer, num_experts, out):
    """FlashMoE's input for one layer at token ``row``: [1/r ‖ f / max f] (r = row − last + 1)."""
    base = layer * num_experts
    for e in range(num_experts):
        last = last_row[base + e]
        out[e] = 0.0 if last < 0 else 1.0 / (row - last + 1)
        out[num_experts + e] = 0.0 if max_count == 0.0 else count[base + e] / max_count


@njit(cache=True, fastmath=True)
def forward(w, m, x, h1, h2, out):
    """One pass of the 3-layer FFN number ``m``: SiLU(x W1 + b1) -> SiLU(h W2 + b2) -> h W3 + b3."""
    w1, b1, w2, b2, w3, b3 = w
    _dense(x, w1[m], b1[m], h1, True)
    _dense(h1, w2[m], b2[m], h2, True)
    _dense(h2, w3[m], b3[m], out, False)


@njit(cache=True, fastmath=True, inline="always")
def _dense(x, w, b, out, silu):
    out[:] = b
    for i in range(x.shape[0]):
        xi = x[i]
        if xi != 0.0:
            for j in range(out.shape[0]):
                out[j] += xi * w[i, j]
    if silu:
        for j in range(out.shape[0]):
            out[j] = out[j] / (1.0 + np.exp(-out[j]))


@njit(cache=True)
def reset(st):
    st[1][:] = -1
    st[2][:] = 0.0
    st[3][:] = 0.0
    st[5][:] = -1


@njit(cache=True)
def on_step(st, part, layer, row, ranked, t):
    last_row, count, max_count, ctl = st[1], st[2], st[3], st[6]
    ctl[1] = row
    for j in range(ranked.shape[0]):
        obj = layer * ctl[0] + ranked[j]
        last_row[obj] = row
        count[obj] += 1.0
        max_count[layer] = max(max_count[layer], count[obj])


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    w, last_row, count, max_count, neg_pred, pred_row, ctl, scratch = st
    num_experts, row = ctl[0], ctl[1]
    x, h1, h2, out = scratch
    for slot in range(lo, hi):
        layer = obj_of[slot] // num_experts
        if pred_row[layer] != row:
            pred_row[layer] = row
            features(last_row, count, max_count[layer], row, layer, num_experts, x)
            forward(w, 0 if w[0].shape[0] == 1 else layer, x, h1, h2, out)
            for e in range(num_experts):
                neg_pred[layer * num_experts + e] = -out[e]
    return min_key_slot(neg_pred, neg_pred, lo, hi, obj_of, mark, stamp)


simulate = compile_engine(__name__, reset=reset, on_step=on_step, on_hit=no_access, on_miss=no_miss,
                          choose_victim=choose_victim, on_evict=no_access, on_insert=no_access)
