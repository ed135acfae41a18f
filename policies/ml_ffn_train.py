"""Training of the ml-ffn policy (FlashMoE §3.2): dataset from a trace, AdamW + MSE, npz export.

FlashMoE Table 1: MSE loss, AdamW, learning rate 1e-3, "learning rate decay 1e-2", 3 layers, hidden
128, SiLU. The decay is read as inverse-time decay, lr_e = 1e-3 / (1 + 1e-2 · e) after e epochs (the
convention of Keras' ``decay`` argument, which a bare "learning rate decay" value usually names),
applied per epoch so that its pace does not depend on the batch count. AdamW keeps PyTorch's default
weight decay (0.01); the table gives none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import njit

from moesim.errors import MoesimError, named
from moesim.files import atomic_output
from moesim.policies.ml_ffn import WEIGHTS, fill_features, new_history
from moesim.tracegen.trace import Trace

HIDDEN = 128
LEARNING_RATE, LR_DECAY = 1e-3, 1e-2


def dataset(experts: np.ndarray, seq_offsets: np.ndarray, num_experts: int, horizon: int) -> tuple:
    """Inputs X[layer, row, 2E] as the policy sees them, and targets Y[layer, row, E].

    Y is log(1 + d) / log(1 + horizon), d = tokens until the expert's next routing in the same
    sequence, capped at ``horizon`` (never again counts as the horizon).
    """
    n_rows, n_layers, _ = experts.shape
    x = np.empty((n_layers, n_rows, 2 * num_experts), np.float32)
    fill_features(experts, np.zeros(n_rows, np.bool_), num_experts, 0, n_rows, *new_history(n_layers, num_experts), x)
    return x, targets(experts, seq_offsets, num_experts, horizon)


@njit(cache=True)
def targets(experts, seq_offsets, num_experts, horizon):
    n_rows, n_layers, k = experts.shape
    y = np.empty((n_layers, n_rows, num_experts), np.float32)
    scale = np.log1p(horizon)
    nxt = np.empty(n_layers * num_experts, np.int64)
    for s in range(seq_offsets.shape[0] - 1):
        nxt[:] = -1
        for row in range(seq_offsets[s + 1] - 1, seq_offsets[s] - 1, -1):
            for layer in range(n_layers):
                for e in range(num_experts):
                    n = nxt[layer * num_experts + e]
                    d = horizon if n < 0 else min(n - row, horizon)
                    y[layer, row, e] = np.log1p(d) / scale
                for j in range(k):
                    nxt[layer * num_experts + experts[row, layer, j]] = row
    return y


def split(trace: Trace, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Train and validation sequence indices: the last ceil(fraction * S) sequences validate (a fraction above 0 and
    below 1: ``val_fraction`` of both trainers, ml-ffn's and the learned prefetcher's)."""
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) or not 0 < val_fraction < 1:
        raise MoesimError(f"{named('val_fraction', val_fraction)}: the share of sequences held out must be above 0 "
                          "and below 1")  # NaN too
    s = trace.num_sequences
    if s < 2:
        raise MoesimError(f"training needs at least 2 sequences for a train/validation split; the trace has {s}")
    n_val = min(s - 1, max(1, int(np.ceil(val_fraction * s))))
    return np.arange(s - n_val), np.arange(s - n_val, s)


def train(trace: Trace, per_layer: bool, *, horizon: int = 64, val_fraction: float = 0.2, epochs: int = 400,
          patience: int = 30, batch: int = 256, seed: int = 0) -> tuple[dict, dict]:
    """Fit the FFN(s); return the exported arrays and a log (epochs run, best validation MSE)."""
    for name, value in (("horizon", horizon), ("epochs", epochs), ("patience", patience), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise MoesimError(f"{named(name, value)}: must be a whole number, 1 or more")
    train_seq, val_seq = split(trace, val_fraction)
    try:
        import torch
    except ImportError:
        raise MoesimError("training ml-ffn needs torch: pip install 'moesim[torch]'") from None
    torch.manual_seed(seed)
    e, n_layers = trace.meta.num_experts, trace.meta.num_layers
    x, y = dataset(trace.experts, trace.seq_offsets.astype(np.int64), e, horizon)
    rows = lambda seqs: np.concatenate([np.arange(trace.seq_offsets[s], trace.seq_offsets[s + 1]) for s in seqs])

    def stack(idx):  # -> [models, samples, features]
        xs, ys = torch.from_numpy(x[:, idx]), torch.from_numpy(y[:, idx])
        if per_layer:
            return xs, ys
        return xs.reshape(1, -1, 2 * e), ys.reshape(1, -1, e)

    xt, yt = stack(rows(train_seq))
    xv, yv = stack(rows(val_seq))
    m = n_layers if per_layer else 1
    gen = torch.Generator().manual_seed(seed)

    def init(fan_in, shape):
        return torch.nn.Parameter((torch.rand(shape, generator=gen) * 2 - 1) / fan_in ** 0.5)

    params = [init(2 * e, (m, 2 * e, HIDDEN)), init(2 * e, (m, 1, HIDDEN)), init(HIDDEN, (m, HIDDEN, HIDDEN)),
              init(HIDDEN, (m, 1, HIDDEN)), init(HIDDEN, (m, HIDDEN, e)), init(HIDDEN, (m, 1, e))]

    def net(inp):
        w1, b1, w2, b2, w3, b3 = params
        h = torch.nn.functional.silu(torch.bmm(inp, w1) + b1)
        h = torch.nn.functional.silu(torch.bmm(h, w2) + b2)
        return torch.bmm(h, w3) + b3

    opt = torch.optim.AdamW(params, lr=LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 1.0 / (1.0 + LR_DECAY * e))
    best, best_state, since, epoch = float("inf"), None, 0, 0
    n = xt.shape[1]
    for epoch in range(1, epochs + 1):
        order = torch.randperm(n, generator=gen)
        for start in range(0, n, batch):
            idx = order[start:start + batch]
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(net(xt[:, idx]), yt[:, idx])
            loss.backward()
            opt.step()
        schedule.step()
        with torch.no_grad():
            val = torch.nn.functional.mse_loss(net(xv), yv).item()
        if val < best - 1e-6:
            best, since = val, 0
            best_state = [p.detach().clone() for p in params]
        else:
            since += 1
            if since >= patience:
                break
    arrays = {name: t.numpy().astype(np.float32) for name, t in zip(WEIGHTS, best_state)}
    for name in ("b1", "b2", "b3"):
        arrays[name] = arrays[name][:, 0, :]
    arrays.update(num_experts=np.int64(e), horizon=np.int64(horizon), per_layer=np.bool_(per_layer))
    return arrays, {"epochs": epoch, "val_mse": best, "final_lr": schedule.get_last_lr()[0],
                    "train_sequences": train_seq.tolist(), "val_sequences": val_seq.tolist()}


def save_model(arrays: dict, path: Path) -> None:
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
