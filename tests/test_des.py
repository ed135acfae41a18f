"""The discrete-event simulator: closed-form cases that must come out exactly, and behaviour.

The machine (tests/dyadic.py) has powers of two for every rate (HBM 2^40 B/s, link 2^30 B/s, 2^50
FLOP/s, latencies and launches of 2^-20 s) and the model small power-of-two dims, so every duration is
a dyadic rational and every sum the engine forms is exact: the tests compare with ``==``.
"""

from dataclasses import replace

import numpy as np
import pytest

from dyadic import COPY, EXPERT_BYTES, GPU_, HW, LAT, LINK, LINK_BW, MEM_BW, MODEL, US, experts_s, pre_s, trace_of
from moesim import hitrate, simulate
from moesim.errors import MoesimError
from moesim.sim.machine import SSD, Hardware, MeasuredCompute
from moesim.tracegen.models import get_model, model_for_trace
from moesim.tracegen.schema import PREFILL
from moesim.tracegen.synth import synth_trace


def random_trace(rows=6, seed=0):
    rng = np.random.default_rng(seed)
    return trace_of([[rng.choice(4, 2, replace=False) for _ in range(2)] for _ in range(rows)])


def test_all_misses_on_demand_is_the_sum_of_the_parts():
    trace = random_trace()
    r = simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=0)
    expected = [2 * (pre_s(step + 1) + 2 * COPY + experts_s(2)) for step in range(trace.num_rows)]
    assert r.step_times.tolist() == expected
    assert r.hit_rate == 0.0 and r.loads == trace.accesses
    assert r.bytes_h2d == trace.accesses * EXPERT_BYTES
    assert r.stall_s == pytest.approx(2 * 2 * COPY, rel=1e-15)  # compute waits for every copy


def test_all_hits_cost_compute_only():
    trace = trace_of([[[0, 1], [2, 3]]] * 5)
    r = simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=2)
    assert r.step_times[0] == 2 * (pre_s(1) + 2 * COPY + experts_s(2))
    assert r.step_times[1:].tolist() == [2 * (pre_s(s + 1) + experts_s(2)) for s in range(1, 5)]
    assert r.hits == 16 and r.loads == 4


@pytest.mark.filterwarnings("ignore::moesim.errors.MoesimWarning")  # compute-bound: a link of 1.1 TB/s
@pytest.mark.parametrize("bound", ["copy", "compute"])
def test_oracle_prefetch_with_room_for_two_layers_is_sum_of_max(bound):
    """Speculating Experts §5.1: TPOT = Σ_l max(t_compute,l, t_copy(E_l+1)) once the pipeline is full."""
    hw = HW if bound == "copy" else replace(HW, link=replace(LINK, gbps=LINK.gbps * 2 ** 10))
    copy = LAT + EXPERT_BYTES / (LINK_BW * (1 if bound == "copy" else 2 ** 10))
    trace = random_trace(rows=5)
    r = simulate(trace, model=MODEL, hardware=hw, policy="lru", capacity=0, prefetch="oracle")
    for step in range(1, 5):
        compute = pre_s(step + 1) + experts_s(2)
        assert (compute < 2 * copy) == (bound == "copy")
        assert r.step_times[step] == 2 * max(compute, 2 * copy)
    assert r.prefetch_precision == r.prefetch_recall == 1.0


def test_one_copy_engine_serialises_two_overlap():
    trace = random_trace()
    one = simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=0)
    two = simulate(trace, model=MODEL, hardware=replace(HW, link=replace(LINK, engines=2)), policy="lru", capacity=0)
    for step in range(trace.num_rows):
        assert one.step_times[step] == 2 * (pre_s(step + 1) + 2 * COPY + experts_s(2))
        assert two.step_times[step] == 2 * (pre_s(step + 1) + COPY + experts_s(2))


def test_misprediction_under_fallback_costs_the_wasted_transfer_plus_the_right_one():
    model = replace(MODEL, top_k=1)
    experts = [[[0], [1]]] * 3
    right = trace_of(experts, spec=[[[1], [-1]]] * 3)
    wrong = trace_of(experts, spec=[[[2], [-1]]] * 3)
    r_right = simulate(right, model=model, hardware=HW, policy="lru", capacity=0, prefetch="speculative")
    r_wrong = simulate(wrong, model=model, hardware=HW, policy="lru", capacity=0, prefetch="speculative")
    none = simulate(right, model=model, hardware=HW, policy="lru", capacity=0)
    for step in range(3):
        pre, run = pre_s(step + 1), experts_s(1)
        assert COPY > pre + run  # copy-bound, so the wasted copy is still running when layer 1 routes
        assert none.step_times[step] == 2 * (pre + COPY + run)
        assert r_right.step_times[step] == pre + 2 * COPY + run  # layer 1's copy hid behind layer 0
        assert r_wrong.step_times[step] == pre + 3 * COPY + run  # wasted copy, then the right one
    assert r_wrong.prefetch_precision == 0.0 and r_wrong.prefetch_used == 0


def test_commit_runs_the_prediction_and_counts_substitutions():
    model = replace(MODEL, top_k=1)
    experts = [[[0], [1]]] * 3
    wrong = trace_of(experts, spec=[[[2], [-1]]] * 3)
    wrong.weights = np.full((3, 2, 1), 0.75, np.float32)
    r = simulate(wrong, model=model, hardware=HW, policy="lru", capacity=0, prefetch="speculative", mode="commit")
    for step in range(3):
        assert r.step_times[step] == pre_s(step + 1) + 2 * COPY + experts_s(1)  # no copy after the guess
    assert r.substitutions == 3  # layer 1 of every step ran expert 2 instead of 1
    assert r.substituted_weight == 3 * 0.75 / (3 * 2)


def test_des_hits_equal_the_hit_rate_engine(mixtral):
    hw = Hardware("test", GPU_, LINK)
    spec = model_for_trace(mixtral.meta)
    for policy in ("lru", "belady", "lfu", "fifo", "lifo", "arc", "lecar", "gamma", "gamma-admit", "random", "static"):
        for scope in ("per-layer", "global"):
            capacity = 4 if scope == "per-layer" else 96
            des = simulate(mixtral, model=spec, hardware=hw, policy=policy, capacity=capacity, scope=scope)
            assert des.hits == hitrate(mixtral, policy, capacity, scope).hits, (policy, scope)


def test_policies_rank_by_tpot_as_by_misses_on_the_real_trace(mixtral):
    """Acceptance: under on-demand loading, fewer misses is a shorter TPOT, on real routing."""
    spec = model_for_trace(mixtral.meta)
    from moesim.sim.hardware import get_hardware

    for capacity in (3, 4, 6):
        runs = [simulate(mixtral, model=spec, hardware=get_hardware("rtx4090", vram=80), policy=p, capacity=capacity)
                for p in ("belady", "lru", "lfu", "fifo", "arc", "lecar")]
        by_misses = sorted(runs, key=lambda r: (r.accesses - r.hits, r.policy))
        by_tpot = sorted(runs, key=lambda r: (r.tpot_s, r.policy))
        assert [r.policy for r in by_misses] == [r.policy for r in by_tpot], capacity
        assert by_tpot[0].policy == "belady"


def test_prefetch_and_commit_move_tpot_the_expected_way_on_the_real_trace(mixtral):
    from moesim.sim.hardware import get_hardware

    spec, hw = model_for_trace(mixtral.meta), get_hardware("rtx4090", vram=80)
    base = simulate(mixtral, model=spec, hardware=hw, policy="lru", capacity=4)
    oracle = simulate(mixtral, model=spec, hardware=hw, policy="lru", capacity=4, prefetch="oracle")
    history = simulate(mixtral, model=spec, hardware=hw, policy="lru", capacity=4, prefetch="history")
    commit = simulate(mixtral, model=spec, hardware=hw, policy="lru", capacity=4, prefetch="history", mode="commit")
    assert oracle.tpot_s < base.tpot_s  # a perfect prefetch only helps
    assert oracle.prefetch_precision == 1.0
    # wrong guesses cost copies and slots under fallback; commit never fetches after a guess
    assert history.tpot_s > oracle.tpot_s
    assert commit.tpot_s < history.tpot_s and commit.tpot_s < base.tpot_s
    assert commit.substitutions > 0 and 0 < commit.substituted_weight < 1
    assert 0 < history.prefetch_precision < 1
    # Belady judges a prefetched expert by the access it was fetched for
    assert simulate(mixtral, model=spec, hardware=hw, policy="belady", capacity=4, prefetch="oracle").tpot_s < oracle.tpot_s


@pytest.mark.parametrize("experts, prompt, options", [(8, 0, {}), (8, 0, {"mode": "commit"}), (8, 0, {"prompt": 16}),
                                                      (8, 0, {"batch": 2}), (2, 1, {})])
def test_the_oracle_prefetches_from_the_trace_and_never_writes_it(experts, prompt, options):
    # the oracle's predictions are the trace's own array, not a copy: every run reads it, none writes it. With two
    # experts, both routed, and one recorded prompt token, the request rows are the trace's rows, prompt rows too,
    # and their predictions are copied before the prompt rows' are dropped. (Not made read-only to show it: a
    # read-only array is another type to numba, and the loop would compile again.)
    trace = synth_trace(layers=2, experts=experts, top_k=2, sequences=2, tokens=6, seed=5, prompt_tokens=prompt,
                        model="toy")
    before = trace.experts.copy()
    result = simulate(trace, model=replace(MODEL, num_experts=experts), hardware=HW, policy="lru",
                      capacity=min(experts, 3), prefetch="oracle", **options)
    assert np.array_equal(trace.experts, before)
    assert result.prefetch_precision == 1.0 and result.prefetch_recall == 1.0


def test_batching_loads_the_union_once_and_decodes_in_lockstep():
    trace = synth_trace(layers=2, experts=4, top_k=2, sequences=2, tokens=3, seed=3, model="toy")
    one = simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=0)
    two = simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=0, batch=2)
    assert one.decode_steps == 6 and two.decode_steps == 3 and two.decode_tokens == 6
    union = sum(len(set(trace.experts[s, layer]) | set(trace.experts[3 + s, layer]))
                for s in range(3) for layer in range(2))
    assert two.loads == union < one.loads
    assert two.tokens_per_s > one.tokens_per_s


def test_prefill_is_the_prompt_union_and_reported_as_ttft():
    trace = synth_trace(layers=2, experts=4, top_k=2, sequences=1, tokens=3, seed=1, prompt_tokens=5, model="toy")
    r = simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=4)
    union = sum(len(set(trace.experts[:5, layer].ravel())) for layer in range(2))
    assert r.prefill_loads == union and r.ttft_s > 0 and r.decode_steps == 3
    prompt = simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=2, prefetch="prompt")
    assert prompt.prefetch_precision is not None
    with pytest.raises(MoesimError, match="prefill rows"):
        simulate(random_trace(), model=MODEL, hardware=HW, policy="lru", capacity=2, prefetch="prompt")


def test_a_prompt_row_outputs_one_token_per_sequence():
    """A prefill row's head runs on each sequence's last prompt token (recorded prompts, or given ones); a decode
    row's on every token."""
    from moesim.sim.requests import build_requests

    recorded = synth_trace(layers=2, experts=4, top_k=2, sequences=5, tokens=3, seed=1, prompt_tokens=70, model="toy")
    req = build_requests(recorded, batch=2)
    prefill = req.kind == PREFILL
    assert req.tokens[prefill].tolist() == [140, 140, 70] and req.outputs[prefill].tolist() == [2, 2, 1]
    assert np.array_equal(req.outputs[~prefill], req.tokens[~prefill])
    given = build_requests(trace_of([[[0, 1], [2, 3]]] * 4), batch=1, prompt=7)
    assert given.tokens.tolist() == [7, 1, 1, 1, 1] and given.outputs.tolist() == [1, 1, 1, 1, 1]


def test_a_prompt_asked_for_where_every_sequence_records_one_is_refused(tmp_path):
    """``prompt`` is given to the sequences recorded without one: where every sequence records its own it would
    change nothing, and is refused (a run, a served stream); where some do, the others get it."""
    from moesim import serve
    from moesim.sim.requests import build_requests
    from moesim.tracegen.trace import concat_traces

    recorded = synth_trace(layers=2, experts=4, top_k=2, sequences=2, tokens=3, seed=1, prompt_tokens=6, model="toy")
    for run in (simulate, lambda *a, **k: serve(*a, rate=1.0, requests=2, **k)):
        with pytest.raises(MoesimError, match=r"^prompt=9: every sequence (of the trace|served) records its own "
                                              r"prompt \(6 tokens, the median\)"):
            run(recorded, model=MODEL, hardware=HW, capacity=2, prompt=9)
    bare = synth_trace(layers=2, experts=4, top_k=2, sequences=1, tokens=3, seed=2, model="toy")
    mixed = concat_traces([recorded, bare])
    req = build_requests(mixed, prompt=9)
    assert req.tokens[req.kind == PREFILL].tolist() == [6, 6, 9]  # two recorded prompts, then the one given
    # a stream that serves only the sequences with prompts of their own reads it no more than a trace of them
    arrivals = tmp_path / "arrivals.csv"
    arrivals.write_text("arrival_s,seq\n0.0,0\n0.5,1\n")
    with pytest.raises(MoesimError, match="^prompt=9: every sequence"):
        serve(mixed, model=MODEL, hardware=HW, capacity=2, prompt=9, arrivals=str(arrivals))
    arrivals.write_text("arrival_s,seq\n0.0,0\n0.5,2\n")
    assert serve(mixed, model=MODEL, hardware=HW, capacity=2, prompt=9, arrivals=str(arrivals)).requests[
        "prompt_tokens"].to_list() == [6, 9]


def test_a_trace_with_no_decode_steps_is_refused():
    """An SGLang response of one generated token imports as prompt rows only: tokens/s and TPOT were NaN."""
    from moesim import serve

    trace = synth_trace(layers=2, experts=4, top_k=2, sequences=2, tokens=1, seed=1, prompt_tokens=6, model="toy")
    trace.phase[:] = PREFILL
    for run in (simulate, lambda *a, **k: serve(*a, rate=1.0, **k)):
        with pytest.raises(MoesimError, match="^the trace has no decode steps"):
            run(trace, model=MODEL, hardware=HW, capacity=2)


@pytest.mark.parametrize("width", [3, 8])
def test_gather_is_each_cells_distinct_experts_in_first_seen_order(width):
    """``requests.gather`` against its definition, written out: each request row's layer holds the distinct
    experts of its trace rows in first-seen order (padding skipped, those past ``width`` dropped), their
    summed weights and how many rows chose each."""
    from moesim.sim.requests import gather

    rng = np.random.default_rng(3)
    src = rng.integers(-1, 7, (12, 2, 3)).astype(np.int16)
    src_w = rng.random(src.shape).astype(np.float32)
    ptr, rows = np.array([0, 5, 5, 9, 12]), rng.permutation(12).astype(np.int64)
    out = np.full((4, 2, width), -1, np.int16)
    out_w, out_n = np.zeros(out.shape, np.float32), np.zeros(out.shape, np.int32)
    gather(src, src_w, ptr, rows, out, out_w, out_n)
    nothing = np.full((1, 2, width), -1, np.int16)  # no rows to gather, or none at all: the cells stay empty
    gather(src, src_w, np.zeros(2, np.int64), rows, nothing, np.zeros(nothing.shape, np.float32),
           np.zeros(nothing.shape, np.int32))
    gather(src[:0], src_w[:0], np.zeros(2, np.int64), rows[:0], nothing, np.zeros(nothing.shape, np.float32),
           np.zeros(nothing.shape, np.int32))
    assert (nothing == -1).all()
    for r in range(4):
        for layer in range(2):
            seen, weight, count = [], {}, {}
            for i in rows[ptr[r]:ptr[r + 1]]:
                for e, w in zip(src[i, layer], src_w[i, layer]):
                    if e >= 0 and (e in seen or len(seen) < width):
                        seen += [] if e in seen else [int(e)]
                        weight[e], count[e] = weight.get(e, np.float32(0)) + w, count.get(e, 0) + 1
            assert out[r, layer].tolist() == seen + [-1] * (width - len(seen))
            assert out_w[r, layer, :len(seen)].tolist() == [weight[e] for e in seen]
            assert out_n[r, layer].tolist() == [count[e] for e in seen] + [0] * (width - len(seen))


def test_ssd_tier_reads_what_dram_does_not_hold():
    trace = random_trace(rows=8)
    hw = replace(HW, ssd=SSD("test-ssd", gbps=1.073741824 / 4, latency_us=US))
    all_dram = simulate(trace, model=MODEL, hardware=hw, policy="lru", capacity=2)
    no_dram = simulate(trace, model=MODEL, hardware=hw, policy="lru", capacity=2, dram_capacity=0)
    big_dram = simulate(trace, model=MODEL, hardware=hw, policy="lru", capacity=2, dram_capacity=8)
    assert all_dram.bytes_ssd == 0
    assert no_dram.bytes_ssd == no_dram.loads * EXPERT_BYTES
    assert big_dram.bytes_ssd == 8 * EXPERT_BYTES  # each expert read once, then served from DRAM
    assert all_dram.tpot_s < big_dram.tpot_s < no_dram.tpot_s
    with pytest.raises(MoesimError, match="SSD"):
        simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=2, dram_capacity=4)


def test_mole_moves_lookup_rows_not_experts():
    """MoLE Table 1: per token and layer MoE moves k experts (worst case), MoLE d·N values."""
    moe, mole = get_model("moe-160m-10e"), get_model("mole-160m-4e")
    trace = synth_trace(layers=moe.num_layers, experts=10, top_k=2, sequences=1, tokens=8, seed=0, model=moe.name)
    hw = Hardware("test", GPU_, LINK)
    r_moe = simulate(trace, model=moe, hardware=hw, policy="lru", capacity=0)
    r_mole = simulate(trace, model=mole, hardware=hw)  # no cache settings: a MoLE model reads none
    per_token = r_moe.decode_tokens
    assert r_moe.bytes_h2d / per_token == moe.num_layers * 2 * moe.d_model * moe.top_k * moe.d_expert * 2
    assert r_mole.bytes_h2d / per_token == mole.num_layers * mole.d_model * mole.num_experts * 2
    assert r_mole.tpot_s < r_moe.tpot_s and r_mole.hit_rate != r_mole.hit_rate  # no expert accesses: nan


def test_usage_errors():
    trace = random_trace()
    with pytest.raises(MoesimError, match="below top_k"):
        simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=1)
    with pytest.raises(MoesimError, match="spec column"):
        simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=2, prefetch="speculative")
    with pytest.raises(MoesimError, match="mode commit runs next-layer predictions"):
        simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=2, mode="commit")
    with pytest.raises(MoesimError, match="layers"):
        simulate(trace, model=replace(MODEL, num_layers=3), hardware=HW, policy="lru", capacity=2)


def test_a_measured_compute_table_replaces_the_roofline(tmp_path):
    from moesim.sim.hardware import load_hardware, write_hardware

    measured = MeasuredCompute("toy", layer_s=2.0 ** -12, expert_s=2.0 ** -14, layer_ctx_s=2.0 ** -24,
                       expert_token_s=2.0 ** -30, moe_launch_s=2.0 ** -18, row_s=2.0 ** -10, row_token_s=2.0 ** -20)
    write_hardware(replace(HW, compute=measured), tmp_path / "hw.toml")
    hw = load_hardware(tmp_path / "hw.toml")
    assert hw.compute == measured
    trace = random_trace()
    r = simulate(trace, model=MODEL, hardware=hw, policy="lru", capacity=0)
    for step in range(trace.num_rows):
        layer = 2.0 ** -12 + 2.0 ** -24 * (step + 1)
        # then once a row of one token: the dense layers and the head
        assert r.step_times[step] == 2 * (layer + 2 * COPY + 2.0 ** -18 + 2 * 2.0 ** -14) + 2.0 ** -10 + 2.0 ** -20
    with pytest.raises(MoesimError, match="measured for toy, not other"):  # never a silent roofline
        simulate(trace, model=replace(MODEL, name="other"), hardware=hw, policy="lru", capacity=0)


def test_numpy_numbers_are_written_as_toml_numbers(tmp_path):
    """A fit's numbers are often numpy scalars (np.polyfit's): their repr, np.float64(...), is no TOML (the first
    CUDA calibration, on an H200, wrote a file that nothing could read)."""
    import numpy as np

    from moesim.sim.hardware import load_hardware, write_hardware

    link = replace(HW.link, gbps=np.float64(62.5), latency_us=np.float64(9.25), engines=np.int64(2))
    write_hardware(replace(HW, link=link), tmp_path / "hw.toml")
    back = load_hardware(tmp_path / "hw.toml").link
    assert (back.gbps, back.latency_us, back.engines) == (62.5, 9.25, 2) and type(back.engines) is int


def test_each_expert_computes_the_tokens_that_chose_it():
    """Batch 2, a measured table (expert_s + expert_token_s · (T − 1)): an expert both sequences chose
    computes 2 tokens, one only its sequence chose 1; the fused kernel sums them."""
    measured = MeasuredCompute("toy", layer_s=2.0 ** -12, expert_s=2.0 ** -14, expert_token_s=2.0 ** -16,
                       moe_launch_s=2.0 ** -18)
    hw = replace(HW, compute=measured)
    trace = trace_of([[[0, 1], [2, 3]], [[0, 2], [2, 3]]])
    trace.seq_offsets = np.array([0, 1, 2], np.int64)
    trace.seq_ids = np.arange(2, dtype=np.int32)
    trace.steps = np.zeros(2, np.int32)
    r = simulate(trace, model=MODEL, hardware=hw, policy="lru", capacity=0, batch=2)
    # layer 0: experts 0 (2 tokens), 1, 2 (1 each); layer 1: experts 2, 3 (2 tokens each)
    e1, e2 = 2.0 ** -14, 2.0 ** -14 + 2.0 ** -16
    layers = (2.0 ** -12 + 3 * COPY + 2.0 ** -18 + e2 + 2 * e1) + (2.0 ** -12 + 2 * COPY + 2.0 ** -18 + 2 * e2)
    assert r.step_times.tolist() == [layers]


@pytest.mark.filterwarnings("ignore::moesim.errors.MoesimWarning")  # compute-bound: a link of 1.1 TB/s
@pytest.mark.parametrize("bound", ["copy", "compute"])
def test_per_expert_kernels_run_each_expert_as_its_weights_land(bound):
    """No cache, two misses per layer on one copy engine: a per-expert kernel hides the first expert
    behind the second copy when copies are slower (layer = pre + 2·copy + expert), and runs the
    experts back to back once the first is in when they are faster (pre + copy + 2·expert); the
    fused kernel always waits for both copies (pre + 2·copy + the fused kernel)."""
    hw = HW if bound == "copy" else replace(HW, link=replace(LINK, gbps=LINK.gbps * 2 ** 10))
    copy = LAT + EXPERT_BYTES / (LINK_BW * (1 if bound == "copy" else 2 ** 10))
    expert = 4 * LAT + EXPERT_BYTES / MEM_BW  # one expert's own kernels: four launches
    assert (copy > expert) == (bound == "copy")
    trace = random_trace()
    per = simulate(trace, model=MODEL, hardware=hw, policy="lru", capacity=0, kernel="per-expert")
    fused = simulate(trace, model=MODEL, hardware=hw, policy="lru", capacity=0)
    for step in range(trace.num_rows):
        layer = pre_s(step + 1) + (2 * copy + expert if bound == "copy" else copy + 2 * expert)
        assert per.step_times[step] == 2 * layer
        assert fused.step_times[step] == 2 * (pre_s(step + 1) + 2 * copy + experts_s(2))
    with pytest.raises(MoesimError, match="kernel must be one of fused, per-expert"):
        simulate(trace, model=MODEL, hardware=hw, policy="lru", capacity=0, kernel="grouped")


def test_a_reset_per_sequence_empties_the_cache_as_in_the_hit_rate_engine(mixtral):
    spec = model_for_trace(mixtral.meta)
    for policy in ("lru", "belady"):
        des = simulate(mixtral, model=spec, hardware=HW, policy=policy, capacity=4, reset=True)
        assert des.hits == hitrate(mixtral, policy, 4, reset=True).hits


def test_runs_simulated_on_threads_give_each_run_its_own_result_in_order(mixtral):
    from moesim.sim.config import Config
    from moesim.sim.des import Shared, prepare_des, simulate_all, simulate_des

    hw, spec, shared = Hardware("test", GPU_, LINK), model_for_trace(mixtral.meta), Shared(mixtral)
    configs = [Config.build(policy=p, capacity=c, prefetch=f) for p, c, f in
               (("lru", 2, "none"), ("lfu", 4, "oracle"), ("lru", 6, "history"), ("fifo", 3, "popular"), ("lru", 0, "none"))]
    alone = [simulate_des(mixtral, c, spec, hw) for c in configs]
    together = simulate_all([prepare_des(mixtral, c, spec, hw, shared=shared) for c in configs])
    for a, b in zip(alone, together, strict=True):
        assert (a.hits, a.loads, a.prefetch_loads, a.tpot_s, a.prefetch_precision) == \
               (b.hits, b.loads, b.prefetch_loads, b.tpot_s, b.prefetch_precision)
    assert len({r.hits for r in together}) == len(configs)  # five different runs, each with its own numbers
