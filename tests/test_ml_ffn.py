"""ml-ffn inside the engine: two hand-built networks that must be LRU and Belady hit for hit, and
FlashMoE Table 1's training schedule."""

import numpy as np
import pytest

from moesim.policies import ml_ffn
from moesim.policies.belady import NEVER, next_uses
from moesim import hitrate
from moesim.tracegen.synth import Locality, synth_trace

# its module-scoped fixtures are built once: its tests run on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_ml_ffn")


def lru_network(path, num_experts: int, hidden: int = 128):
    """Output = −SiLU(SiLU(1/r)) per expert: strictly decreasing in the recency feature 1/r, so the
    largest output (the victim) is the expert routed longest ago; ties (routed at the same token)
    fall to the engine's rule, least recently served."""
    w1 = np.zeros((1, 2 * num_experts, hidden), np.float32)
    w1[0, np.arange(num_experts), np.arange(num_experts)] = 1.0
    w2 = np.eye(hidden, dtype=np.float32)[None]
    w3 = np.zeros((1, hidden, num_experts), np.float32)
    w3[0, np.arange(num_experts), np.arange(num_experts)] = -1.0
    zeros = [np.zeros((1, n), np.float32) for n in (hidden, hidden, num_experts)]
    np.savez(path, w1=w1, b1=zeros[0], w2=w2, b2=zeros[1], w3=w3, b3=zeros[2], num_experts=np.int64(num_experts))
    return path


def next_use_network(experts, seq_offsets, num_experts, reset_each_seq, weights, negate=False):
    """An oracle in the network's place: for every (row, layer, expert), the clock of the expert's
    first routing after that row (within the sequence when the cache resets; never: 1e30)."""
    n_rows, n_layers, width = experts.shape
    nxt, _ = next_uses(experts, num_experts)
    out = np.full((n_rows, n_layers, num_experts), 1e30, np.float32)
    ends = np.repeat(seq_offsets[1:], np.diff(seq_offsets)) if reset_each_seq else np.full(n_rows, n_rows)
    pending = np.full((n_layers, num_experts), NEVER, np.int64)  # next routing at or after a row
    for row in range(n_rows - 1, -1, -1):
        for layer in range(n_layers):
            limit = ends[row] * n_layers * width
            out[row, layer] = np.where(pending[layer] < limit, pending[layer], 1e30)
            for j in range(width):
                pending[layer, experts[row, layer, j]] = (row * n_layers + layer) * width + j
    return -out if negate else out


@pytest.fixture(scope="module")
def trace():
    return synth_trace(layers=4, experts=8, top_k=2, sequences=3, tokens=80, seed=5, locality=Locality(reuse=0.3))


@pytest.mark.parametrize("scope,capacity", [("per-layer", 3), ("per-layer", 5), ("global", 12)])
@pytest.mark.parametrize("reset", [False, True])
def test_a_network_of_minus_recency_is_lru(trace, tmp_path, scope, capacity, reset):
    model = lru_network(tmp_path / "lru.npz", 8)
    ours = hitrate(trace, "ml-ffn", capacity, scope, reset=reset, ml_model=model, log_evictions=10 ** 5)
    lru = hitrate(trace, "lru", capacity, scope, reset=reset, log_evictions=10 ** 5)
    assert ours.hits == lru.hits
    assert ours.evictions.tolist() == lru.evictions.tolist()


@pytest.mark.parametrize("scope,capacity", [("per-layer", 3), ("per-layer", 5), ("global", 12)])
@pytest.mark.parametrize("reset", [False, True])
def test_a_network_of_next_use_is_belady(trace, tmp_path, monkeypatch, scope, capacity, reset):
    model = lru_network(tmp_path / "any.npz", 8)  # a valid file; its forward pass is replaced
    monkeypatch.setattr(ml_ffn, "predictions", next_use_network)
    ours = hitrate(trace, "ml-ffn", capacity, scope, reset=reset, ml_model=model)
    assert ours.hits == hitrate(trace, "belady", capacity, scope, reset=reset).hits


def test_training_decays_the_learning_rate_as_table_1(trace):
    pytest.importorskip("torch")
    from moesim.policies.ml_ffn_train import LEARNING_RATE, LR_DECAY, train

    _, log = train(trace, per_layer=False, epochs=5, patience=100)
    assert log["epochs"] == 5
    assert log["final_lr"] == pytest.approx(LEARNING_RATE / (1 + LR_DECAY * 5), rel=1e-12)
