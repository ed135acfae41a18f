"""The synthetic generator and the trace statistics (checked against libcachesim's LRU)."""

import libcachesim as lcs
import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.tracegen.fit import compare, fit_locality
from moesim.tracegen.schema import TraceMeta
from moesim.tracegen.stats import trace_stats
from moesim.tracegen.synth import Locality, synth_trace
from moesim.tracegen.trace import Trace


def test_same_seed_same_trace_other_seed_other_trace():
    a = synth_trace(8, 32, 4, 3, 50, seed=11)
    assert np.array_equal(a.experts, synth_trace(8, 32, 4, 3, 50, seed=11).experts)
    assert not np.array_equal(a.experts, synth_trace(8, 32, 4, 3, 50, seed=12).experts)


def test_rows_hold_k_distinct_experts_in_range():
    t = synth_trace(4, 16, 6, 2, 100, seed=0, locality=Locality(seq_alpha=0.02, reuse=0.9))
    t.validate()  # distinct, in range
    assert t.experts.min() >= 0 and t.experts.max() < 16


def test_the_generators_permutation_and_search_are_numpys():
    # the generator writes out numpy's permutation and search (numba compiles numpy's slowly): they must draw and find
    # what numpy's do under numba, or every seeded trace changes
    from numba import njit

    from moesim.tracegen.synth import _first_above, _permutation

    @njit
    def both(seed, n):
        np.random.seed(seed)
        numpys = np.random.permutation(n)
        np.random.seed(seed)
        ours = np.empty(n, np.int64)
        _permutation(ours)
        return numpys, ours

    for seed, n in ((0, 1), (1, 2), (7, 64), (123, 160)):
        numpys, ours = both(seed, n)
        assert np.array_equal(numpys, ours)
    cdf = np.cumsum(np.random.default_rng(0).integers(0, 3, 50)).astype(np.float64)  # ties and flat runs
    for u in np.r_[cdf, cdf - 0.5, cdf + 0.5, -1.0, 1e9]:
        assert _first_above(cdf, u) == np.searchsorted(cdf, u, side="right")


@pytest.mark.parametrize("shape, digest", [
    ((4, 64, 8, 3, 50, 1, 5), "4453580ce668f3cfd8d3c613946f1dbd92d2c8c668fb5086dfc4c7255d99fed5"),
    ((3, 160, 6, 2, 40, 7, 0), "d5fc2fb230b5387f5aabb1651d6bc7a5fd8efe736284c934aad380f56fa0e23e"),
])
def test_seeded_traces_are_those_of_the_generator_before_its_loops_were_written_out(shape, digest):
    # golden: the SHA-256 of the experts the generator drew (layers, experts, top-k, sequences, tokens, seed, prompt
    # tokens) when it still called numpy's permutation, search and cumulative sum; any change to the order of its
    # draws or of its sums changes every seeded trace, and the figures quoted from them
    import hashlib

    layers, experts, k, sequences, tokens, seed, prompt = shape
    trace = synth_trace(layers, experts, k, sequences, tokens, seed=seed, prompt_tokens=prompt)
    assert hashlib.sha256(trace.experts.tobytes()).hexdigest() == digest


def test_olmoe_shaped_defaults_match_melinoe_concentration():
    # MELINOE: the top 8 of OLMoE's 64 experts take about 31% of a sequence's activations.
    stats = trace_stats(synth_trace(16, 64, 8, 20, 256, seed=3), capacities=())
    assert stats.concentration == pytest.approx(0.31, abs=0.03)


def test_knobs_move_the_statistics_they_name():
    base = Locality(reuse=0.0, cross_layer=0.0)
    measure = lambda loc: trace_stats(synth_trace(16, 64, 8, 20, 200, seed=4, locality=loc), capacities=(16,))
    plain = measure(base)
    # reuse: each slot repeats one of the previous token's experts with chance >= reuse
    assert measure(Locality(reuse=0.6, cross_layer=0.0)).reuse_histogram[0] >= 0.6
    assert plain.reuse_histogram[0] < 0.45
    # lower seq_alpha: sequences concentrate on fewer experts, and LRU hits more
    focused = measure(Locality(seq_alpha=0.1, reuse=0.0, cross_layer=0.0))
    assert focused.concentration > plain.concentration + 0.15
    assert focused.lru_hit_rate[16] > plain.lru_hit_rate[16] + 0.1
    # cross_layer: a fixed map between layers makes the next layer predictable
    flat = Locality(layer_alpha=50.0, seq_alpha=50.0, reuse=0.0)
    assert (measure(Locality(**{**flat.as_dict(), "cross_layer": 0.8})).cross_layer_predictability
            > measure(Locality(**{**flat.as_dict(), "cross_layer": 0.0})).cross_layer_predictability + 0.5)


def test_bad_knobs_are_refused():
    with pytest.raises(MoesimError, match="reuse must be in"):
        Locality(reuse=1.5)
    with pytest.raises(MoesimError, match="top-k 9 exceeds"):
        synth_trace(2, 8, 9, 1, 1, seed=0)


def _lcs_lru_hits(trace, capacity):
    """Per-layer LRU in libcachesim, requests one by one in rank order (sequential semantics)."""
    hits = 0
    for layer in range(trace.meta.num_layers):
        cache = lcs.LRU(cache_size=capacity)
        for e in trace.experts[:, layer, :].ravel():
            req = lcs.Request()
            req.obj_id, req.obj_size = int(e) + 1, 1
            hits += cache.get(req)
    return hits


@pytest.mark.parametrize("capacity", [2, 3, 4, 5, 6])
def test_lru_hit_rate_from_stack_distances_equals_libcachesim_on_the_real_trace(mixtral, capacity):
    rate = trace_stats(mixtral, (capacity,)).lru_hit_rate[capacity]
    assert round(rate * mixtral.accesses) == _lcs_lru_hits(mixtral, capacity)


def test_lru_hit_rate_equals_libcachesim_on_a_synthetic_trace():
    trace = synth_trace(4, 32, 4, 3, 120, seed=9)
    stats = trace_stats(trace, (4, 8, 16))
    for capacity, rate in stats.lru_hit_rate.items():
        assert round(rate * trace.accesses) == _lcs_lru_hits(trace, capacity)


def test_reuse_distance_and_concentration_by_hand():
    # one layer, E=4, k=1; experts over 6 tokens of one sequence: 0 1 0 0 2 1
    experts = np.array([0, 1, 0, 0, 2, 1], dtype=np.int16).reshape(6, 1, 1)
    t = Trace(TraceMeta(num_layers=1, num_experts=4, top_k=1), experts, np.array([0], np.int32),
              np.array([0, 6]), np.arange(6, dtype=np.int32), np.ones(6, np.int8))
    s = trace_stats(t, (1, 2))
    # distances: first, first, 2, 1, first, 4 -> buckets 1:1, 2:1, 3-4:1, first:3
    np.testing.assert_allclose(s.reuse_histogram, np.array([1, 1, 1, 0, 0, 0, 0, 3]) / 6)
    assert s.mean_reuse_distance == pytest.approx(7 / 3)
    assert s.concentration == pytest.approx(3 / 6)  # top ceil(4/8)=1 expert: expert 0, 3 of 6
    # LRU, C=1: only the second 0 of "0 0" hits; C=2: both repeats of 0 hit, 1 was evicted by 2
    assert s.lru_hit_rate == {1: pytest.approx(1 / 6), 2: pytest.approx(2 / 6)}


def test_fit_to_the_real_trace_reproduces_its_statistics(mixtral):
    locality = fit_locality(mixtral, seed=0)
    real = trace_stats(mixtral)
    synthetic = trace_stats(synth_trace(32, 8, 2, 8, 122, seed=1, locality=locality), tuple(real.lru_hit_rate))
    rows = {name: (r, s) for name, r, s in compare(real, synthetic)}
    assert rows["reuse histogram distance (TV)"][1] < 0.05
    for capacity in real.lru_hit_rate:  # C = 2 and 4 for Mixtral
        r, s = rows[f"LRU hit rate, C={capacity} per layer"]
        assert s == pytest.approx(r, abs=0.03)
    r, s = rows["concentration (top E/8 share)"]
    assert s == pytest.approx(r, abs=0.03)
