"""The per-layer budget split: the dynamic programme against every split there is, and never below
the uniform split on real and synthetic traces."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.sim.budget import allocate
from moesim.sim.config import CacheConfig
from moesim.sim.mrc import curve, hits_table
from moesim.tracegen.synth import synth_trace


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), layers=st.integers(1, 4), top=st.integers(1, 5), low=st.integers(0, 2),
       extra=st.integers(0, 12))
def test_the_split_is_the_best_of_every_split(seed, layers, top, low, extra):
    low = min(low, top)
    rng = np.random.default_rng(seed)
    curves = np.zeros((layers, top + 1), np.int64)
    curves[:, low:] = np.sort(rng.integers(0, 50, (layers, top + 1 - low)), axis=1)  # hits grow with slots
    budget = layers * low + extra
    got = allocate(curves, budget, low, 1000)
    best = max(sum(curves[l, c] for l, c in enumerate(split))
               for split in itertools.product(range(low, top + 1), repeat=layers) if sum(split) <= budget)
    assert got.hits == best == sum(curves[l, c] for l, c in enumerate(got.slots))
    assert sum(got.slots) <= budget and all(low <= c <= top for c in got.slots)


@pytest.mark.parametrize("name", ["bundled", "synthetic"])
@pytest.mark.parametrize("policy", ["lru", "lfu", "gamma"])
def test_the_split_never_loses_to_uniform(mixtral, name, policy):
    trace = mixtral if name == "bundled" else synth_trace(8, 64, 8, 2, 100, seed=3)
    rows = curve(trace, CacheConfig(policy=policy))
    table = hits_table(rows)
    for per in (trace.meta.top_k, trace.meta.top_k + 1, trace.meta.num_experts // 2):
        a = allocate(table, per * trace.meta.num_layers, trace.meta.top_k, rows[0].accesses)
        assert a.hits >= a.uniform_hits == int(table[:, per].sum())


def test_a_budget_below_the_minimum_is_refused():
    with pytest.raises(MoesimError, match="below 2 slots in each of the 3 layers"):
        allocate(np.zeros((3, 5), np.int64), 5, 2, 10)
