"""The engines against the independent reference (tests/reference.py) on generated traces: the
hit-rate engine gives identical hits per layer and eviction logs, the discrete-event engine the
identical decision log (every hit, load, bypass, prefetch and preload, with its slot), for every
policy the reference defines, both scopes, both semantics, resets, batches, every prefetcher, and
capacities given per layer."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference
from generated import traces
from moesim import simulate
from moesim.sim.config import CacheConfig, PrefetchConfig
from moesim.sim.des import predictions
from moesim.sim.hardware import get_hardware
from moesim import hitrate
from moesim.tracegen.models import ModelSpec
from moesim.tracegen.schema import DECODE, PREFILL

# "lru+gamma": LRU behind the γ admission; "gamma-admit+gamma" is the γ-cache, composed. The discrete-event engine
# compiles a loop for each composition (about 12 s on 2 cores): it plays one of them
POLICIES = ("lru", "fifo", "lifo", "lfu", "arc", "lecar", "belady", "gamma", "gamma-admit", "static", "lru+gamma",
            "arc+gamma", "belady+gamma", "gamma-admit+gamma")
DES_POLICIES = tuple(p for p in POLICIES if p not in ("arc+gamma", "belady+gamma", "gamma-admit+gamma"))
# dyadic decays keep the engine's float counts exact on short traces, 0.9 is the paper's value
GAMMAS = (0.0, 0.25, 0.5, 0.9, 1.0)


def composed(policy: str) -> tuple:
    """A reference name as the API's arguments: the policy, and ``{"admission": ...}`` for one behind an admission."""
    name, _, admission = policy.partition("+")
    return name, ({"admission": admission} if admission else {})


def capacity_for(draw, trace, scope, lowest):
    """Slots per layer, in one pool, or (per-layer scope, half the time) a list of each layer's own."""
    per = draw(st.integers(lowest, trace.meta.num_experts))
    if scope == "per-layer" and draw(st.booleans()):
        return draw(st.lists(st.integers(lowest, trace.meta.num_experts), min_size=trace.meta.num_layers,
                             max_size=trace.meta.num_layers))
    return per if scope == "per-layer" else draw(st.integers(lowest, per * trace.meta.num_layers))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), trace=traces(), policy=st.sampled_from(POLICIES),
       scope=st.sampled_from(["per-layer", "global"]), semantics=st.sampled_from(["step", "sequential"]),
       reset=st.booleans(), gamma=st.sampled_from(GAMMAS))
def test_hit_rate_engine_equals_the_reference(data, trace, policy, scope, semantics, reset, gamma):
    c = capacity_for(data.draw, trace, scope, trace.meta.top_k if semantics == "step" else 1)
    params = {"gamma": gamma} if "gamma" in policy else {}
    name, admission = composed(policy)
    ours = hitrate(trace, name, c, scope, semantics, reset, log_evictions=10 ** 6, **admission, **params)
    hits, evictions = reference.hitrate(trace.experts, trace.seq_offsets, trace.meta.num_experts, policy, c,
                                        scope == "per-layer", semantics == "sequential", reset, **params)
    assert ours.per_layer_hits == hits
    assert [tuple(e) for e in ours.evictions.tolist()] == evictions


PREFETCH = [("none", "fallback"), ("oracle", "fallback"), ("speculative", "fallback"), ("history", "fallback"),
            ("speculative", "commit"), ("history", "commit"), ("prompt", "fallback"), ("popular", "fallback")]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), trace=traces(prompt=True), policy=st.sampled_from(DES_POLICIES),
       scope=st.sampled_from(["per-layer", "global"]), prefetch=st.sampled_from(PREFETCH),
       batch=st.integers(1, 3), reset=st.booleans(), gamma=st.sampled_from(GAMMAS))
def test_des_decisions_equal_the_reference(data, trace, policy, scope, prefetch, batch, reset, gamma):
    prefetch, mode = prefetch
    batch = min(batch, trace.num_sequences)
    if prefetch == "prompt" and not (trace.phase == PREFILL).any():
        prefetch = "popular"
    c = capacity_for(data.draw, trace, scope, trace.meta.top_k)
    params = {"gamma": gamma} if "gamma" in policy else {}
    name, admission = composed(policy)
    m = trace.meta
    model = ModelSpec("toy", "", "toy", num_layers=m.num_layers, num_experts=m.num_experts, top_k=m.top_k,
                      d_model=64, d_expert=64)
    ours = simulate(trace, model=model, hardware=get_hardware("rtx4090"), policy=name, capacity=c, scope=scope, prefetch=prefetch, mode=mode, batch=batch, reset=reset, decisions=True, **admission, **params)
    req = ours.requests
    slots = CacheConfig(capacity=c, scope=scope).slots(m.num_layers)
    pred, _, preload, preload_at = predictions(trace, req, PrefetchConfig(prefetch, mode), slots, scope)
    log = reference.des_decisions(req.experts, pred, preload, preload_at, req.group_offsets, req.kind,
                                  m.num_experts, policy, c, scope == "per-layer", reset, mode == "commit", **params)
    assert [tuple(d) for d in ours.decisions.tolist()] == log
    decode_rows = {r for r in np.flatnonzero(req.kind == DECODE)}
    assert ours.hits == sum(1 for row, _, event, _, _ in log if event == reference.HIT and row in decode_rows)


@pytest.mark.parametrize("policy", POLICIES)
def test_bundled_trace_equals_the_reference(mixtral, policy):
    # exact fractions make γ's global pool slow here; generated traces cover it
    for scope, c in (("per-layer", 4),) + ((("global", 128),) if "gamma" not in policy else ()):
        ours = hitrate(mixtral, composed(policy)[0], c, scope, log_evictions=10 ** 6, **composed(policy)[1])
        hits, evictions = reference.hitrate(mixtral.experts, mixtral.seq_offsets, 8, policy, c, scope == "per-layer")
        assert ours.per_layer_hits == hits and [tuple(e) for e in ours.evictions.tolist()] == evictions
