"""Miss-ratio curves equal the hit-rate engine at every capacity: LRU's one pass of stack distances
against the independent reference on generated traces and against the engine on the bundled and
synthetic traces; the threaded per-capacity runs of the other policies against single runs."""

import json
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference
from moesim.errors import MoesimError
from moesim.sim.config import CacheConfig
from moesim.sim.hitrate import simulate
from moesim.sim import mrc
from moesim.sim.mrc import capacities, curve
from moesim.tracegen.schema import DECODE, TraceMeta
from moesim.tracegen.synth import synth_trace
from moesim.tracegen.trace import Trace
from generated import traces

SCOPES, SEMANTICS = ("per-layer", "global"), ("step", "sequential")


def rows_trace(rows, experts) -> Trace:
    routed = np.array(rows, np.int16)[:, None, :]
    n = len(rows)
    meta = TraceMeta(num_layers=1, num_experts=experts, top_k=routed.shape[2], model="toy")
    return Trace(meta, routed, np.zeros(1, np.int32), np.array([0, n], np.int64), np.arange(n, dtype=np.int32),
                 np.full(n, DECODE, np.int8))


@settings(max_examples=300, deadline=None)
@given(trace=traces(), policy=st.sampled_from(["lru", "belady", "gamma"]), scope=st.sampled_from(SCOPES),
       reset=st.booleans(), tree=st.booleans(), gamma=st.sampled_from([0.0, 0.25, 0.5, 0.9, 1.0]),
       step=st.booleans())
def test_one_pass_curves_equal_the_reference_at_every_capacity(trace, policy, scope, reset, tree, gamma, step):
    """LRU's two ways of finding stack distances (the scan of the recency order and the Fenwick tree),
    OPT's stack update for Belady under both semantics, the γ-cache's order (dyadic decays and the
    paper's 0.9)."""
    params = {"gamma": gamma} if policy == "gamma" else {}
    semantics = "step" if step and policy == "belady" else "sequential"
    cache = CacheConfig(policy=policy, scope=scope, semantics=semantics, reset=reset, params=params)
    with mock.patch.object(mrc, "SCAN_LIMIT", 0 if tree else mrc.SCAN_LIMIT):
        rows = curve(trace, cache)
    assert rows[0].capacity == (trace.meta.top_k if step and policy == "belady" else 1)
    for r in rows:
        hits, _ = reference.hitrate(trace.experts, trace.seq_offsets, trace.meta.num_experts, policy, r.capacity,
                                    scope == "per-layer", semantics == "sequential", reset, **params)
        assert r.per_layer_hits == hits


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("policy", ["lru", "belady", "gamma", "lfu"])
def test_the_bundled_curve_equals_sim_hitrate_at_every_capacity(mixtral, policy, scope, semantics):
    cache = CacheConfig(policy=policy, scope=scope, semantics=semantics)
    rows = curve(mixtral, cache, capacities(mixtral, cache))
    assert [r.capacity for r in rows] == list(range(2 if semantics == "step" else 1, (8 if scope == "per-layer"
                                                                                        else 256) + 1))
    # every capacity of a layer's 8 experts; in the 256-expert pool, every 15th and the ends
    check = rows if scope == "per-layer" else rows[::15] + rows[-1:]
    for r in check:
        single = simulate(mixtral, CacheConfig(policy=policy, capacity=r.capacity, scope=scope, semantics=semantics))
        assert (r.hits, r.per_layer_hits) == (single.hits, single.per_layer_hits)


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("policy,tree,semantics", [("lru", False, "sequential"), ("lru", True, "sequential"),
                                                   ("belady", False, "sequential"), ("belady", False, "step"),
                                                   ("gamma", False, "sequential")])
def test_one_pass_curves_equal_the_engine_on_a_synthetic_olmoe_trace(scope, policy, tree, semantics):
    """Against the hooked engine (``log_evictions`` keeps LRU off its rank path, which the curve shares)."""
    trace = synth_trace(4, 64, 8, 3, 60, seed=5)
    cache = CacheConfig(policy=policy, scope=scope, semantics=semantics, reset=True)
    with mock.patch.object(mrc, "SCAN_LIMIT", 0 if tree else mrc.SCAN_LIMIT):
        rows = curve(trace, cache)
    for r in rows[::7] + rows[-1:]:
        single = simulate(trace, CacheConfig(policy=policy, capacity=r.capacity, scope=scope, semantics=semantics,
                                             reset=True), log_evictions=1)
        assert r.per_layer_hits == single.per_layer_hits


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), layers=st.integers(1, 10), experts=st.sampled_from([2, 63, 64, 65, 254, 255,
                                                                                              256, 300]),
       top_k=st.integers(1, 5), reset=st.booleans(), data=st.data())
def test_lru_by_recency_ranks_equals_the_reference(seed, layers, experts, top_k, reset, data):
    """The rank path (``moesim.policies.lru_ranks``: one byte a rank below 255 experts, two from 255, layers
    eight at a time, a cell's accesses two at a time and an odd one alone) against the plain-Python LRU, per
    layer, at capacities drawn per layer."""
    k = min(top_k, experts)
    trace = synth_trace(layers, experts, k, 2, 40, seed=seed % 1000)
    slots = tuple(data.draw(st.lists(st.integers(1, experts), min_size=layers, max_size=layers)))
    got = simulate(trace, CacheConfig(policy="lru", capacity=slots, semantics="sequential", reset=reset))
    want = [reference.hitrate(trace.experts[:, [layer]], trace.seq_offsets, experts, "lru", slots[layer],
                              True, True, reset)[0][0] for layer in range(layers)]
    assert got.per_layer_hits == want


def test_lru_ranks_take_an_expert_repeated_in_a_cell_as_two_accesses():
    """A trace built in code and not validated may repeat an expert in a cell: the second access hits at rank 0, as
    the plain-Python LRU has it (the pass over two accesses at once first counted the first one's rank twice)."""
    from moesim.policies.lru_ranks import rank_counts

    rng = np.random.default_rng(7)
    experts = rng.integers(0, 3, size=(30, 3, 4)).astype(np.int16)  # three experts: most cells repeat one
    offsets = np.array([0, 17, 30], np.int64)
    for reset in (False, True):
        hist = rank_counts(experts, offsets, 5, reset)
        for layer in range(3):
            for capacity in (1, 2, 3):
                want = reference.hitrate(experts[:, [layer]], offsets, 5, "lru", capacity, True, True, reset)[0][0]
                assert hist[layer, :capacity].sum() == want, (reset, layer, capacity)


def test_with_every_expert_cached_only_first_uses_miss(mixtral):
    for semantics in SEMANTICS:
        last = curve(mixtral, CacheConfig(policy="lru", semantics=semantics))[-1]
        first_uses = sum(len(np.unique(mixtral.experts[:, layer])) for layer in range(mixtral.meta.num_layers))
        assert last.misses == first_uses


def test_lru_under_step_semantics_follows_the_engine_where_inclusion_fails():
    """The docstring's example: a step's hits are served before its misses, so expert 3 of the last
    row is resident with 4 slots and evicted with 5 (6 and 8 hits in all); the curve is the engine's."""
    trace = rows_trace([[3, 1, 5], [1, 0, 2], [3, 0, 5], [2, 4, 1], [0, 3, 1]], 6)
    rows = curve(trace, CacheConfig(policy="lru"))
    for r in rows:
        assert r.per_layer_hits == reference.hitrate(trace.experts, trace.seq_offsets, 6, "lru", r.capacity)[0]
    assert [r.hits for r in rows if r.capacity in (4, 5)] == [6, 8]


def test_gamma_under_step_semantics_follows_the_engine_where_inclusion_fails():
    """The docstring's example: experts 0 and 1 always come together and tie in count; with 4 slots 1
    hit in row 2 and was served before 0, so it ranks lower and is evicted in row 3; with 3 slots it
    missed, was served last and stays. In the last row 1 hits with 3 slots, 0 and 5 with 4."""
    trace = rows_trace([[5, 0, 1], [6, 4, 2], [5, 0, 1], [3, 6, 2], [0, 1, 5]], 7)
    rows = curve(trace, CacheConfig(policy="gamma"))
    for r in rows:
        assert r.per_layer_hits == reference.hitrate(trace.experts, trace.seq_offsets, 7, "gamma", r.capacity)[0]
    row3 = {c: [obj for t, obj in simulate(trace, CacheConfig(policy="gamma", capacity=c), log_evictions=99).evictions
                if t // 3 == 3] for c in (3, 4)}
    assert row3 == {3: [5, 0], 4: [1]}  # after row 3, expert 1 is resident with 3 slots, not with 4


def test_a_large_pool_takes_max_runs_capacities_by_default(mixtral):
    rows = curve(mixtral, CacheConfig(policy="fifo", scope="global"))
    assert len(rows) == mrc.MAX_RUNS and (rows[0].capacity, rows[-1].capacity) == (2, 256)
    assert len(curve(mixtral, CacheConfig(policy="lru", scope="global", semantics="sequential"))) == 256


def test_capacities_and_refusals(mixtral):
    assert list(capacities(mixtral, CacheConfig(semantics="step"))) == list(range(2, 9))
    assert list(capacities(mixtral, CacheConfig(semantics="sequential", scope="global"))) == list(range(1, 257))
    with pytest.raises(MoesimError, match="below top_k"):
        curve(mixtral, CacheConfig(), sizes=[1])
    with pytest.raises(MoesimError, match="more than the 8 experts"):
        curve(mixtral, CacheConfig(policy="lru", semantics="sequential"), sizes=[9])


@pytest.mark.parametrize("scope,semantics", [("per-layer", "step"), ("global", "sequential")])
def test_mrc_json_equals_sim_hitrate_json_at_every_capacity(cli, scope, semantics):
    from moesim.tracegen.trace import bundled_trace_path

    args = ["--scope", scope, "--semantics", semantics, "--json"]
    code, out, _ = cli("sim", "mrc", bundled_trace_path(), "--policy", "lru,belady,gamma,lfu", "--no-reference", *args)
    assert code == 0
    rows = json.loads(out)["results"]
    every = list(range(2 if semantics == "step" else 1, (8 if scope == "per-layer" else 256) + 1))
    caps = sorted({r["capacity"] for r in rows})
    assert caps == every  # every capacity for the one-pass curves; lfu's 64 runs spread over the pool
    assert len([r for r in rows if r["policy"] == "lfu"]) == (len(every) if scope == "per-layer" else 64)
    assert {r["policy"] for r in rows} == {"lru", "belady", "gamma", "lfu"}
    # sim hitrate at a spread of capacities (every one per layer; the ends and a few in the pool)
    check = caps if scope == "per-layer" else [1, 2, 3, 64, 100, 255, 256]
    code, out, _ = cli("sim", "hitrate", bundled_trace_path(), "--policy", "lru,belady,gamma,lfu",
                       "--capacity", ",".join(map(str, check)), *args)
    single = {(r["policy"], r["capacity"]): r for r in json.loads(out)["results"]}
    for r in rows:
        if r["capacity"] in check:
            s = single[(r["policy"], r["capacity"])]
            assert (r["hits"], r["misses"], r["hit_rate"], r["per_layer_hit_rate"]) == \
                (s["hits"], s["misses"], s["hit_rate"], s["per_layer_hit_rate"])
            assert sum(r["per_layer_hits"]) == r["hits"]


def test_mrc_budget_and_errors(cli, tmp_path):
    from moesim.tracegen.trace import bundled_trace_path

    code, out, _ = cli("sim", "mrc", bundled_trace_path(), "--policy", "lru", "--budget", "96", "--json")
    assert code == 0
    split = json.loads(out)["budget"]["allocations"]
    assert set(split) == {"lru", "belady", "static"}
    assert all(sum(a["slots"]) <= 96 and a["hit_rate"] >= a["uniform_hit_rate"] for a in split.values())
    code, _, err = cli("sim", "mrc", bundled_trace_path(), "--budget", "96", "--scope", "global")
    assert code == 1 and "needs --scope per-layer" in err
    code, _, err = cli("sim", "mrc", bundled_trace_path(), "--capacity", "1")
    assert code == 1 and err.count("\n") == 1 and "below top_k" in err
    code, _, err = cli("sim", "mrc", tmp_path / "missing.parquet")
    assert code == 1 and "missing.parquet" in err


def test_a_policy_behind_an_admission_has_its_curve_beside_the_plain_bounds(cli):
    """``--admission gamma``: each listed policy's curve is the composition's, point for point what ``sim hitrate``
    gives it, and the references stay the bounds they are (Belady and the popularity pin with no admission)."""
    from moesim import hitrate, load_trace
    from moesim.tracegen.trace import bundled_trace_path

    code, out, err = cli("sim", "mrc", bundled_trace_path(), "--policy", "fifo,lru", "--admission", "gamma",
                         "--semantics", "sequential", "--capacity", "2,4", "--budget", "96", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert list(result["budget"]["allocations"]) == ["fifo+gamma", "lru+gamma", "belady", "static"]
    trace = load_trace(bundled_trace_path())
    for r in result["results"]:
        name, _, admission = r["policy"].partition("+")
        alone = hitrate(trace, name, r["capacity"], semantics="sequential", admission=admission or "all")
        assert (r["policy"], r["hits"]) == (alone.policy, alone.hits)


def test_a_budget_below_the_least_a_run_takes_is_refused_before_any_curve(cli, monkeypatch):
    """Under step semantics each layer takes top-k slots at least: a budget below that over the layers is refused
    before a curve is simulated (it took 17 s on OLMoE); under sequential semantics one slot a layer is enough."""
    import moesim
    from moesim.tracegen.trace import bundled_trace_path

    def no_curve(*args, **kwargs):
        raise AssertionError("a curve was simulated")

    with monkeypatch.context() as patched:
        patched.setattr(moesim, "mrc", no_curve)
        code, _, err = cli("sim", "mrc", bundled_trace_path(), "--budget", "63")
    assert code == 1 and err == ("moesim: error: --budget 63 is below 2 slots (the least a step run takes) in each of "
                                 "the trace's 32 layers\n")
    code, _, err = cli("sim", "mrc", bundled_trace_path(), "--budget", "40", "--semantics", "sequential", "--json")
    assert code == 0, err


def test_mrc_figure_says_the_trace_scope_and_semantics_once(cli, drawn, tmp_path):
    from moesim.tracegen.trace import bundled_trace_path

    code, _, err = cli("sim", "mrc", bundled_trace_path(), "--policy", "lru", "--plot", tmp_path / "mrc.png")
    assert code == 0, err
    (fig,) = drawn
    title = " ".join(fig._suptitle.get_text().split())
    assert "mixtral-8x7b routing (mixtral-8x7b-gsm8k.parquet)" in title, title
    assert title.count("per-layer") == 1 and title.count("step semantics") == 1, title
