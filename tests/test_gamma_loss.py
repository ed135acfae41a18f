"""MELINOE's cache-simulation loss: the hard form (eq. 10) is the simulator's γ-cache miss count, the
soft form (eq. 11) follows its definition computed step by step and is differentiable (gradcheck)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference
from moesim.sim.config import CacheConfig
from moesim.sim.hitrate import simulate
from generated import traces

torch = pytest.importorskip("torch")
from moesim.policies.gamma_loss import hard_loss, hard_misses, requests, soft_loss  # noqa: E402


def per_sequence_misses(trace, capacity, gamma):
    total = np.zeros(trace.meta.num_layers, np.int64)
    for a, b in zip(trace.seq_offsets[:-1], trace.seq_offsets[1:]):
        total += hard_misses(torch.from_numpy(trace.experts[a:b].astype(np.int64)), trace.meta.num_experts,
                             capacity, gamma).numpy()
    return total


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("capacity", [2, 5])
def test_the_hard_loss_counts_the_simulators_misses_on_the_bundled_trace(mixtral, gamma, capacity):
    ours = simulate(mixtral, CacheConfig(policy="gamma", capacity=capacity, reset=True, params={"gamma": gamma}))
    misses = per_sequence_misses(mixtral, capacity, gamma)
    assert misses.tolist() == [a - h for a, h in zip(ours.per_layer_accesses, ours.per_layer_hits)]
    if mixtral.num_sequences == 1:
        assert float(hard_loss(torch.from_numpy(mixtral.experts.astype(np.int64)), 8, capacity, gamma)) == \
            misses.sum() / (mixtral.num_rows * 32)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), trace=traces(), gamma=st.sampled_from([0.0, 0.25, 0.5, 1.0]))
def test_the_hard_loss_equals_the_exact_reference(data, trace, gamma):
    """Dyadic decays keep every count exact, so the reference's fractions and the floats agree."""
    c = data.draw(st.integers(trace.meta.top_k, trace.meta.num_experts))
    hits, _ = reference.hitrate(trace.experts, trace.seq_offsets, trace.meta.num_experts, "gamma", c, reset=True,
                                gamma=gamma)
    accesses = trace.num_rows * trace.meta.top_k
    assert per_sequence_misses(trace, c, gamma).tolist() == [accesses - h for h in hits]


def soft_by_recursion(mask, capacity, gamma):
    """eq. 8 step by step, the soft cache of eq. 11 after the fill phase, the miss proxy of eq. 4."""
    n, n_layers, e = mask.shape
    count, total = np.zeros((n_layers, e)), 0.0
    for t in range(n):
        mass = count.sum(1, keepdims=True)
        cache = count * capacity / np.maximum(mass, capacity)
        total += (mask[t] * (1 - cache)).sum()
        count = gamma * count + mask[t]
    return total / (n * n_layers)


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.9, 1.0])
def test_the_soft_loss_follows_its_definition(gamma):
    rng = np.random.default_rng(0)
    mask = rng.random((12, 3, 6))
    got = float(soft_loss(torch.from_numpy(mask), 3, gamma))
    assert got == pytest.approx(soft_by_recursion(mask, 3, gamma), rel=1e-12)


def test_the_soft_loss_closed_form_at_gamma_zero():
    """γ = 0 and C >= K: the soft cache is the previous token's requests, so the proxy of a token is
    K − |r_t ∩ r_{t−1}|: tokens (0,1) (1,2) (1,2) give 2 + 1 + 0 over 3 tokens."""
    mask = torch.zeros(3, 1, 4, dtype=torch.float64)
    for t, pair in enumerate([(0, 1), (1, 2), (1, 2)]):
        mask[t, 0, list(pair)] = 1.0
    assert float(soft_loss(mask, 2, 0.0)) == 1.0


def test_the_soft_loss_is_differentiable():
    rng = np.random.default_rng(1)
    relaxed = torch.tensor(rng.random((6, 2, 5)), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda r: soft_loss(r, 2, 0.9), (relaxed,))


def test_requests_are_the_top_k_with_a_gradient_to_the_router():
    logits = torch.tensor(np.random.default_rng(2).normal(size=(5, 2, 6)), requires_grad=True)
    probs = logits.softmax(-1)
    ranked, mask = requests(probs, 2)
    assert ranked.tolist() == torch.topk(probs, 2, dim=-1).indices.tolist()
    assert set(mask.detach().unique().tolist()) == {0.0, 1.0} and mask.detach().sum(-1).eq(2).all()
    soft_loss(mask, 3).backward()
    assert logits.grad.abs().sum() > 0
