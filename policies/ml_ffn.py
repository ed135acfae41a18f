"""ml-ffn: FlashMoE's learned eviction (§3.2, Algorithm 1) — evict the largest predicted distance.

Features, per expert of a layer at token t (FlashMoE's definitions): recency r (1 if routed at t,
else one more than at t−1; never routed → 1/r = 0) and frequency f (routings so far), fed as
[1/r_1..1/r_E ‖ f_1/max f .. f_E/max f] — the concatenated score vector of Algorithm 1. A 3-layer
FFN (hidden 128, SiLU) maps it to one predicted distance-to-next-use per expert of the layer, and
the resident expert outside the request set with the largest prediction is evicted; equal
predictions go to the least recently served expert (LRU's order). Training (``moesim train ml-ffn``,
see ``ml_ffn_train``) regresses Belady's quantity, the tokens until each expert's next routing,
with MSE and AdamW at learning rate 1e-3 decayed as FlashMoE Table 1 says.

Where this differs: the paper masks the loss to the experts Belady would evict; here every expert's
distance is a target (log-scaled and capped at a horizon) because which experts are candidates
depends on the policy running. Features count from the start of the trace (or, with a reset per
sequence, from the sequence's start). The features depend on the routing alone, never on what is
cached, so the network runs before the engine, batched over tokens (float32 matrix products), and
the engine reads the prediction of (token, layer) when it needs a victim: the same numbers as
running it at each eviction, several times faster, for 4·E bytes per (token, layer). Under global
scope a resident expert of a layer not yet reached in this token is judged by that layer's
prediction at the previous token, the latest the policy could know. Parameter ``ml_model``: the
.npz path; one model per layer, or one shared. A network whose output is minus the recency
feature is LRU exactly, one whose output is the distance to the next use is Belady (tests).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
from numba import njit

from moesim.errors import MoesimError, named
from moesim.files import read_arrays
from moesim.params import Param
from moesim.policies.base import PolicySpec, hooks, min_key_slot

WEIGHTS = ("w1", "b1", "w2", "b2", "w3", "b3")


def load_model(path: str | Path) -> dict:
    """The arrays of a model file written by ``moesim train ml-ffn`` (plain npz, no pickles), checked: the
    networks' shapes fit each other and ``num_experts`` (m networks of 2E → H → H → E), the weights are
    finite floats."""
    model = read_arrays(path, "ml-ffn model", "moesim train ml-ffn", WEIGHTS + ("num_experts",))
    e = model["num_experts"]
    if e.shape != () or e.dtype.kind not in "iu" or not 1 <= int(e) < 2 ** 15:
        raise MoesimError(f"{path}: num_experts must be one integer in 1..32767, got {e.dtype} of shape {e.shape}")
    e, w1 = int(e), model["w1"]
    m, hidden = (w1.shape[0], w1.shape[2]) if w1.ndim == 3 else (0, 0)
    want = {"w1": (m, 2 * e, hidden), "b1": (m, hidden), "w2": (m, hidden, hidden), "b2": (m, hidden),
            "w3": (m, hidden, e), "b3": (m, e)}
    for name, shape in want.items():
        array = model[name]
        if array.shape != shape or min(shape) < 1 or array.dtype.kind != "f":
            raise MoesimError(f"{path}: {name} has shape {array.shape} and dtype {array.dtype}; a model of "
                              f"{e} experts needs float {shape}")
        if not np.isfinite(array).all():
            raise MoesimError(f"{path}: {name} holds NaN or infinite weights")
    return model


CHUNK_ROWS = 1024


C_E, C_ROW, C_LAYER, C_CLOCK = range(4)  # control words: experts per layer, current row and layer, service clock


class State(NamedTuple):
    neg_pred: np.ndarray  # float32 [rows, L, E]: minus the predicted distance to each expert's next use
    key: np.ndarray       # float64 [objects]: scratch: the victim's key
    ctl: np.ndarray       # int64 [4]: the control words
    served: np.ndarray    # float64 [objects]: the service clock when it was last served


def make_state(ctx) -> State:
    path = ctx.params["ml_model"]
    if path is None:
        raise MoesimError(f"{named('policy', 'ml-ffn')} needs a model: pass {named('ml_model', 'MODEL.npz')} (from 'moesim train "
                          f"ml-ffn' or moesim.train_ml_ffn)")
    model = load_model(path)
    num_models = model["w1"].shape[0]
    if int(model["num_experts"]) != ctx.num_experts or num_models not in (1, ctx.num_layers):
        raise MoesimError(f"{path}: model is for {int(model['num_experts'])} experts and {num_models} layer "
                          f"model(s); the trace has {ctx.num_experts} experts and {ctx.num_layers} layers")
    weights = tuple(np.ascontiguousarray(model[k], np.float32) for k in WEIGHTS)
    neg_pred = predictions(ctx.experts, ctx.seq_offsets, ctx.num_experts, ctx.reset_each_seq, weights, negate=True)
    return State(neg_pred, np.zeros(ctx.num_objects), np.array([ctx.num_experts, 0, 0, 0], np.int64),
                 np.zeros(ctx.num_objects))


def predictions(experts: np.ndarray, seq_offsets: np.ndarray, num_experts: int, reset_each_seq: bool,
                weights: tuple, negate: bool = False) -> np.ndarray:
    """The network's output for every (row, layer): float32 [rows, L, E], minus it when ``negate``."""
    n_rows, n_layers, _ = experts.shape
    w1, b1, w2, b2, w3, b3 = weights
    if negate:
        w3, b3 = -w3, -b3
    starts = np.zeros(n_rows, np.bool_)
    if reset_each_seq:
        starts[seq_offsets[:-1]] = True
    history = new_history(n_layers, num_experts)
    x = np.empty((n_layers, CHUNK_ROWS, 2 * num_experts), np.float32)
    y = np.empty((CHUNK_ROWS, num_experts), np.float32)
    scratch = np.empty((3, CHUNK_ROWS, w1.shape[2]), np.float32)
    out = np.empty((n_rows, n_layers, num_experts), np.float32)
    for lo in range(0, n_rows, CHUNK_ROWS):
        hi = min(n_rows, lo + CHUNK_ROWS)
        fill_features(experts, starts, num_experts, lo, hi, *history, x)
        for layer in range(n_layers):
            m = 0 if w1.shape[0] == 1 else layer
            _mlp(x[layer, :hi - lo], w1[m], b1[m], w2[m], b2[m], w3[m], b3[m], scratch, y[:hi - lo])
            out[lo:hi, layer] = y[:hi - lo]
    return out


def _mlp(x, w1, b1, w2, b2, w3, b3, scratch, out):
    """SiLU(SiLU(x W1 + b1) W2 + b2) W3 + b3 into ``out``. ``scratch`` is three [rows, hidden]
    buffers reused across calls: fresh arrays of this size would be mapped and faulted in every time."""
    h1, h2, e = (buf[:x.shape[0]] for buf in scratch)
    np.matmul(x, w1, out=h1)
    h1 += b1
    _silu(h1, e)
    np.matmul(h1, w2, out=h2)
    h2 += b2
    _silu(h2, e)
    np.matmul(h2, w3, out=out)
    out += b3


def _silu(h, e):
    """h · sigmoid(h), in place (``e`` is scratch of h's shape)."""
    np.negative(h, out=e)
    with np.errstate(over="ignore"):  # exp(-h) = inf for very negative h gives silu = -0, as it should
        np.exp(e, out=e)
    e += 1.0
    h /= e


def new_history(num_layers: int, num_experts: int) -> tuple:
    """Routing so far: last row each (layer, expert) was routed (-1: never), its count, max count per layer."""
    n = num_layers * num_experts
    return np.full(n, -1, np.int64), np.zeros(n), np.zeros(num_layers)


@njit(cache=True)
def fill_features(experts, starts, num_experts, lo, hi, last_row, count, max_count, out):
    """FlashMoE's input for rows lo..hi-1, after each row's routing: out[layer, row - lo] =
    [1/r ‖ f / max f] with r = 1 + rows since the last routing. The history carries over between
    calls and is cleared at rows where ``starts`` is set."""
    n_layers, k = experts.shape[1], experts.shape[2]
    for row in range(lo, hi):
        if starts[row]:
            last_row[:] = -1
            count[:] = 0.0
            max_count[:] = 0.0
        for layer in range(n_layers):
            base = layer * num_experts
            for j in range(k):
                if experts[row, layer, j] < 0:
                    continue
                obj = base + experts[row, layer, j]
                last_row[obj] = row
                count[obj] += 1.0
                max_count[layer] = max(max_count[layer], count[obj])
            x = out[layer, row - lo]
            for e in range(num_experts):
                last = last_row[base + e]
                x[e] = 0.0 if last < 0 else 1.0 / (row - last + 1)
                x[num_experts + e] = count[base + e] / max_count[layer] if max_count[layer] > 0 else 0.0


@njit(cache=True)
def on_step(st, part, layer, row, ranked, t):
    st.ctl[C_ROW] = row
    st.ctl[C_LAYER] = layer


@njit(cache=True)
def served(st, part, slot, obj, t):
    st.ctl[C_CLOCK] += 1
    st.served[obj] = st.ctl[C_CLOCK]


@njit(cache=True)
def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
    neg_pred, key, ctl = st.neg_pred, st.key, st.ctl
    num_experts, row, layer = ctl[C_E], ctl[C_ROW], ctl[C_LAYER]
    for slot in range(lo, hi):
        o = obj_of[slot]
        other = o // num_experts
        key[o] = neg_pred[row if other <= layer else row - 1, other, o - other * num_experts]
    return min_key_slot(key, st.served, lo, hi, obj_of, mark, stamp)


SPEC = PolicySpec("ml-ffn", make_state,
                  hooks(on_step=on_step, on_hit=served, choose_victim=choose_victim, on_insert=served),
                  params={"ml_model": Param(None, "file", "Model file from 'moesim train ml-ffn' (needed by ml-ffn).")},
                  reads_rows=True)
