"""The per-layer budget split: the dynamic programme against every split there is, and never below
the uniform split on real and synthetic traces."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import moesim
from moesim.errors import MoesimError
from moesim.sim.budget import allocate
from moesim.sim.config import CacheConfig
from moesim.sim.hitrate import simulate
from moesim.sim.mrc import curve, hits_table
from moesim.tracegen.models import get_model
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


@pytest.mark.parametrize("name", ["bundled", "synthetic"])
def test_the_des_runs_the_best_split_and_it_never_loses(mixtral, name):
    olmoe = get_model("olmoe-1b-7b")
    trace = mixtral if name == "bundled" else synth_trace(olmoe.num_layers, olmoe.num_experts, olmoe.top_k, 2, 100,
                                                          seed=3, model=olmoe.name, meta=olmoe.trace_meta())
    per = trace.meta.top_k + 1
    kw = dict(policy="lru", capacity=per, hardware="rtx4090", dtype="q4_k")
    uniform, best = moesim.simulate(trace, **kw), moesim.simulate(trace, split="best", **kw)
    slots = best.config.cache.capacity
    assert len(slots) == trace.meta.num_layers and sum(slots) == per * trace.meta.num_layers
    assert best.hit_rate >= uniform.hit_rate and best.vram_gb == uniform.vram_gb
    # the split it ran is the one the hit-rate engine finds, and the engines agree on it layer by layer
    alone = simulate(trace, CacheConfig(policy="lru", capacity=per, split="best"))
    assert alone.capacity == slots
    assert best.hits == alone.hits and best.per_layer_hit_rate == alone.per_layer_hit_rate


@pytest.mark.parametrize("policy", ["lru", "lfu", "fifo", "belady", "gamma", "arc", "static"])
def test_layers_of_a_per_layer_list_are_the_uniform_runs_of_their_size(mixtral, policy):
    """Per-layer caches are independent: a layer given c slots in a list hits exactly as it does when
    every layer has c (for every policy whose state is per layer; LeCaR and random share one
    generator)."""
    slots = tuple(int(c) for c in np.random.default_rng(5).integers(2, 9, mixtral.meta.num_layers))
    listed = simulate(mixtral, CacheConfig(policy=policy, capacity=slots))
    for c in set(slots):
        uniform = simulate(mixtral, CacheConfig(policy=policy, capacity=c))
        assert all(listed.per_layer_hits[l] == uniform.per_layer_hits[l] for l in range(len(slots)) if slots[l] == c)


def test_per_layer_lists_are_checked(mixtral):
    with pytest.raises(MoesimError, match="needs scope per-layer"):
        CacheConfig(capacity=[2, 3], scope="global")
    with pytest.raises(MoesimError, match=r"capacity per layer: each must be at least 0, got -1"):
        CacheConfig(capacity=[2, -1])
    with pytest.raises(MoesimError, match="split best .* needs scope per-layer"):
        CacheConfig(split="best", scope="global")
    with pytest.raises(MoesimError, match="lists 2 layers' slots, the trace has 32 layers"):
        simulate(mixtral, CacheConfig(capacity=[2, 3]))
    with pytest.raises(MoesimError, match="capacity 1 of layer 1 is below top_k 2"):
        simulate(mixtral, CacheConfig(capacity=[2, 1] + [2] * 30))
    with pytest.raises(MoesimError, match="capacity 9 of layer 0 is more than the 8 experts per layer"):
        simulate(mixtral, CacheConfig(capacity=[9] + [2] * 31))


def test_a_batch_split_keeps_every_layer_at_the_widest_row_so_the_memory_stays(mixtral):
    """Batch 2 of Mixtral routes up to 4 experts a layer: the uniform 5 slots hold every row, so the split
    gives no layer fewer than 4 (a smaller one would need a scratch buffer the uniform cache does not)."""
    kw = dict(policy="lru", capacity=5, hardware="rtx4090", dtype="q4_k", batch=2)
    uniform, best = moesim.simulate(mixtral, **kw), moesim.simulate(mixtral, split="best", **kw)
    assert min(best.config.cache.capacity) == 4 and sum(best.config.cache.capacity) == 5 * 32
    assert best.vram_gb == uniform.vram_gb
    free = moesim.best_split(mixtral, 5 * 32, "lru")  # with no floor but top-k, some layer gets fewer
    assert min(free.slots) < 4


def test_a_split_is_free_where_the_uniform_cache_already_had_a_scratch_buffer(mixtral):
    """A 512-token prompt row routes all 8 experts of a layer, more than the 7 slots: the uniform cache already
    streams through scratch, so the split may go down to top-k, in the same memory."""
    kw = dict(policy="lru", capacity=7, hardware="rtx4090", dtype="q4_k", other_dtype="q4_k", prompt=512)
    uniform, best = moesim.simulate(mixtral, **kw), moesim.simulate(mixtral, split="best", **kw)
    assert min(best.config.cache.capacity) < 7 and best.vram_gb == uniform.vram_gb


def test_a_split_of_a_sequential_curve_takes_its_own_least_capacity(mixtral):
    """A curve simulated under sequential semantics runs from one slot a layer: its split of 40 slots over the 32
    layers is taken (under step semantics, two a layer, it would be refused), as it was before the budget's check."""
    curve = moesim.mrc(mixtral, "lru", semantics="sequential")
    allocation = moesim.best_split(mixtral, 40, curve=curve)
    assert sum(allocation.slots) == 40 and min(allocation.slots) >= 1
