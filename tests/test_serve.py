"""Serving: the scheduler's steps worked out by hand, the limits where a served stream is a known run
(a lone request is `sim run`'s batch 1; a burst of equal requests is its static batch B), queueing
against M/D/1, speculative decoding against its closed form, and the command, sweep and plots."""

import json
import re

import numpy as np
import polars as pl
import pytest

from figures import labels_off_the_data, overlapping_texts
from moesim.errors import MoesimError
from moesim.sim.config import Config
from moesim.sim.des import simulate_des
from moesim.sim.memory import GIB, Footprint, account
from moesim.sim.serve import simulate_serve
from moesim.tracegen.trace import bundled_trace_path
from moesim.tracegen.schema import TraceMeta
from moesim.tracegen.synth import synth_trace

MIXTRAL = dict(hardware="rtx4090", dtype="q4_k", capacity="auto")


def small(sequences=1, tokens=4, layers=2, experts=8, k=2, seed=0, d_expert=2048):
    """A synthetic trace of a small model of its own (1024 wide, bf16)."""
    meta = TraceMeta(num_layers=layers, num_experts=experts, top_k=k, model="toy", d_model=1024, d_expert=d_expert,
                     bytes_per_param=2.0)
    return synth_trace(layers, experts, k, sequences, tokens, seed, meta=meta)


def step_tokens(result):
    return result.steps["tokens"].to_list(), result.steps["running"].to_list()


@pytest.mark.parametrize("chunked, max_batch, tokens, running", [
    # 3 requests at once, 10-token prompts, 3 decode rows each, 16 tokens per step
    (True, 8, [16, 15, 3, 3, 2], [2, 3, 3, 3, 2]),  # r0 10 + r1 6 | r0 1 + r1 4 + r2 10 | ...
    (False, 8, [10, 11, 12, 3, 2, 1], [1, 2, 3, 3, 2, 1]),  # a prompt that does not fit waits, whole
    (True, 2, [16, 5, 2, 2, 11, 1, 1, 1], [2, 2, 2, 2, 2, 1, 1, 1]),  # r2 waits for r0 to finish
])
def test_the_scheduler_forms_the_steps_vllm_would(chunked, max_batch, tokens, running):
    trace = small(sequences=3, tokens=3)
    result = simulate_serve(trace, Config.build(arrivals="burst", prompt=10, max_batch_tokens=16, max_batch=max_batch,
                                                chunked_prefill=chunked, capacity=2))
    assert step_tokens(result) == (tokens, running)
    ends = (result.steps["start_s"] + result.steps["time_s"]).to_numpy()
    assert result.requests["ttft_s"][0] == pytest.approx(ends[0], rel=1e-12)  # its whole prompt ran in step 1
    assert (result.requests["output_tokens"] == 4).all()  # the prefill's token and 3 decode rows


@pytest.mark.parametrize("policy", ["lru", "lfu", "fifo", "arc", "gamma", "static"])
def test_a_lone_request_gets_sim_runs_batch_1_tpot(mixtral, policy):
    settings = dict(MIXTRAL, policy=policy)
    alone = simulate_des(mixtral, Config.build(**settings))
    served = simulate_serve(mixtral, Config.build(**settings, rate=0.01, max_batch=8))
    req = served.requests
    # at 0.01 requests/s neither request meets the other
    assert (req["queue_s"] == 0).all() and req["arrival_s"][1] > req["finish_s"][0]
    assert served.summary["tpot_s"] == pytest.approx(alone.tpot_s, rel=1e-12)
    first = np.diff(mixtral.seq_offsets)[0]
    assert req["tpot_s"][0] == pytest.approx(alone.step_times[:first].mean(), rel=1e-12)
    assert served.summary["hit_rate"] == alone.hit_rate
    assert served.summary["capacity"] == alone.capacity


def test_a_lone_request_with_a_prompt_gets_sim_runs_ttft(mixtral):
    alone = simulate_des(mixtral, Config.build(**MIXTRAL, prompt=32))
    served = simulate_serve(mixtral, Config.build(**MIXTRAL, prompt=32, rate=0.01))
    assert (served.requests["queue_s"] == 0).all()
    assert served.summary["ttft_mean_s"] == pytest.approx(alone.ttft_s, rel=1e-12)
    assert served.summary["tpot_s"] == pytest.approx(alone.tpot_s, rel=1e-12)


@pytest.mark.parametrize("batch", [2, 4])
def test_a_burst_of_equal_requests_runs_sim_runs_static_batch(batch):
    trace = small(sequences=8, tokens=6, layers=4, experts=16, k=4, seed=2)
    static = simulate_des(trace, Config.build(batch=batch, capacity=6))
    served = simulate_serve(trace, Config.build(arrivals="burst", max_batch=batch, capacity=6))
    assert served.steps["running"].to_list() == [batch] * (8 // batch * 6)
    assert np.allclose(served.steps["time_s"].to_numpy(), static.step_times, rtol=1e-12)
    # saturation: the throughput is the batch-B step time's
    assert served.summary["tokens_per_s"] == pytest.approx(static.tokens_per_s, rel=1e-12)
    assert served.summary["tpot_s"] == pytest.approx(static.tpot_s, rel=1e-12)


@pytest.mark.parametrize("load", [0.3, 0.6])
def test_queueing_delay_is_m_d_1(load):
    """Poisson arrivals, one request at a time, every request the same work on no cache (a deterministic
    service time S): the mean wait is Pollaczek–Khinchine's λS²/(2(1 − ρ)), within sampling error."""
    trace = small(tokens=3)
    one = simulate_serve(trace, Config.build(arrivals="burst", capacity=0, max_batch=1))
    service = float(one.requests["e2e_s"][0])
    rate = load / service
    served = simulate_serve(trace, Config.build(rate=rate, requests=3000, capacity=0, max_batch=1, arrival_seed=7))
    req = served.requests
    assert np.allclose((req["e2e_s"] - req["queue_s"]).to_numpy(), service, rtol=1e-9)  # deterministic service
    theory = rate * service ** 2 / (2 * (1 - load))
    waits = req["queue_s"].to_numpy()
    means = waits.reshape(30, 100).mean(axis=1)  # batch means: the waits are correlated
    error = means.std(ddof=1) / np.sqrt(means.size)
    assert abs(waits.mean() - theory) < 3 * error


def test_speculative_decoding_gains_the_closed_form_tokens_per_step():
    """Verifying d drafts accepted with probability a gives Σ_{i=0..d} a^i tokens per step on average."""
    draft, accept, rows = 3, 0.6, 6001
    trace = small(tokens=rows, layers=1)
    served = simulate_serve(trace, Config.build(arrivals="burst", draft_tokens=draft, acceptance=accept, capacity=2))
    per_step = np.array([accept ** i for i in range(draft + 1)])
    mean = per_step.sum()
    probs = np.append(accept ** np.arange(draft) * (1 - accept), accept ** draft)  # P(T = 1 .. d + 1)
    sd = np.sqrt((probs * (np.arange(1, draft + 2) - mean) ** 2).sum())
    steps = served.steps.height
    assert abs(rows / steps - mean) < 4 * sd / np.sqrt(steps)
    assert served.summary["output_tokens"] == rows


def test_a_verification_routes_the_union_of_its_positions():
    draft, rows = 3, 40
    trace = small(tokens=rows, layers=3, experts=16, k=2, seed=4)
    served = simulate_serve(trace, Config.build(arrivals="burst", draft_tokens=draft, acceptance=1.0, capacity=4))
    assert served.steps["tokens"].to_list() == [draft + 1] * (rows // (draft + 1))
    union = sum(len(set(trace.experts[r:r + draft + 1, layer].ravel()))
                for r in range(0, rows, draft + 1) for layer in range(3))
    assert served.summary["accesses"] == union


def kv_trace():
    """Two 1500-token sequences of a model whose KV cache (8 KiB a token) outgrows its small experts (1.5 MiB)."""
    return small(sequences=2, tokens=1500, layers=2, experts=64, k=2, d_expert=256)


KV = dict(arrivals="burst", max_batch=2, max_batch_tokens=2, vram=1.06, capacity="auto")


def test_dynamic_kv_gives_the_experts_what_the_kv_cache_leaves():
    trace = kv_trace()
    static = simulate_serve(trace, Config.build(**KV))
    shared = simulate_serve(trace, Config.build(**KV, dynamic_kv=True))
    config = Config.build(**KV)
    model, hw = config.model.spec(trace.meta), config.hardware.spec()
    least = static.summary["capacity"]  # what the KV cache of both requests at full length leaves

    def fits(kv_tokens, capacity):
        fp = Footprint(model, 2.0, model.expert_params * 2.0, kv_tokens, 4, False, hw.gpu.hbm_gb * GIB,
                       hw.cpu.ram_gb * GIB)
        return account(fp, config.replace(capacity=capacity)).fits

    most = max(c for c in range(65) if fits(0, c))
    assert shared.summary["capacity"] == most > least and shared.summary["slots_min"] == least
    # step i: both requests hold i + 1 tokens
    want = [max(c for c in range(least, most + 1) if fits(2 * (i + 1), c)) for i in range(1500)]
    assert shared.steps["slots"].to_list() == want
    assert shared.summary["slots_mean"] == pytest.approx(sum(want) / len(want), rel=1e-12)  # one partition
    assert shared.summary["hit_rate"] > static.summary["hit_rate"]
    assert shared.summary["vram_gb"] <= 1.06


def test_a_split_caches_slots_are_counted_per_layer(mixtral):
    """A --split best cache's layers hold different slots: slots_min is the fewest a layer had, slots_mean a layer's on
    average (it was the fewest a layer had, on average over the steps)."""
    config = Config.build(dtype="q4_k", rate=1.0, requests=2, split="best", capacity=6)
    s = simulate_serve(mixtral, config).summary
    slots = s["capacity"]
    assert isinstance(slots, tuple) and len(set(slots)) > 1
    assert (s["slots_min"], s["slots_mean"]) == (min(slots), pytest.approx(sum(slots) / len(slots), rel=1e-12))


@pytest.mark.parametrize("policy", ["lru", "fifo", "lifo"])
def test_dynamic_kv_gives_back_the_policys_victims(policy):
    """The served hits equal the policy written from its definition (LRU: a hit moves to the most recent end;
    FIFO and LIFO: in load order, the victim the oldest or the newest load) whose capacity drops to each step's
    slots. The three keep their order per slot, and a slot given back moves its resident (``on_move``)."""
    trace = kv_trace()
    shared = simulate_serve(trace, Config.build(**{**KV, "policy": policy}, dynamic_kv=True))
    offsets = trace.seq_offsets
    hits = 0
    caches = [[] for _ in range(2)]  # per layer, least recent (LRU) or first loaded (FIFO, LIFO) first
    for i, cap in enumerate(shared.steps["slots"].to_list()):
        for layer, cache in enumerate(caches):
            for _ in range(max(len(cache) - cap, 0)):  # the victims of the slots given back
                cache.remove(cache[-1] if policy == "lifo" else cache[0])
            want = list(dict.fromkeys(int(e) for s in range(2) for e in trace.experts[offsets[s] + i, layer]))
            for e in want:
                if e in cache:
                    hits += 1
                    if policy == "lru":
                        cache.remove(e)
                        cache.append(e)
            for e in want:
                if e in cache:
                    continue
                if len(cache) >= cap:
                    order = reversed(cache) if policy == "lifo" else cache
                    cache.remove(next(x for x in order if x not in want))
                cache.append(e)
    assert shared.summary["hits"] == hits and shared.summary["reclaimed"] > 0


def test_an_arrivals_file_gives_the_requests(tmp_path):
    trace = small(sequences=2, tokens=3)
    path = tmp_path / "arrivals.csv"
    path.write_text("arrival_s,seq\n5.0,1\n0.0,1\n100.0,0\n")
    served = simulate_serve(trace, Config.build(arrivals=str(path), capacity=2, max_batch=1))
    req = served.requests
    assert req["seq"].to_list() == [1, 1, 0] and req["arrival_s"].to_list() == [5.0, 0.0, 100.0]
    # first come, first served: the request at 0 runs first, the one at 5 s waits if it is still running
    assert req["queue_s"][1] == 0 and req["queue_s"][0] == pytest.approx(max(req["finish_s"][1] - 5.0, 0.0))
    for text, message in [("t\n1\n", "no arrival_s column"), ("arrival_s\n-1\n", "row 1: arrival_s -1.0"),
                          ("arrival_s\nnan\n", "not a time"), ("arrival_s,seq\n1,2\n", "seq 2 is not one"),
                          ("arrival_s,seq\n1,0.5\n", "not a whole number"), ("arrival_s\nsoon\n", "not a number"),
                          ("arrival_s\n", "no requests")]:
        path.write_text(text)
        with pytest.raises(MoesimError, match=message):
            simulate_serve(trace, Config.build(arrivals=str(path), capacity=2))
    with pytest.raises(MoesimError, match="leave requests unset"):
        simulate_serve(trace, Config.build(arrivals=str(path), capacity=2, requests=3))


def test_more_requests_reuse_the_sequences_shuffled_and_seeded():
    trace = small(sequences=3, tokens=2)
    a = simulate_serve(trace, Config.build(rate=5.0, requests=9, capacity=2))
    b = simulate_serve(trace, Config.build(rate=5.0, requests=9, capacity=2))
    seqs = a.requests["seq"].to_list()
    assert seqs[:3] == [0, 1, 2] and sorted(seqs[3:6]) == sorted(seqs[6:]) == [0, 1, 2]
    assert a.requests.equals(b.requests)
    c = simulate_serve(trace, Config.build(rate=5.0, requests=9, capacity=2, arrival_seed=1))
    assert not c.requests["arrival_s"].equals(a.requests["arrival_s"])


@pytest.mark.parametrize("settings, message", [
    (dict(rate=1.0, policy="belady"), "reads the rows it will serve"),
    (dict(rate=1.0, prefetch="popular"), "has no batches"),
    (dict(rate=1.0, reset=True), "share the cache"),
    (dict(rate=1.0, batch=2), "forms its own batches"),
    (dict(), "need a rate"),
    (dict(rate=1.0, arrivals="burst"), "arrivals='burst' takes no rate"),
    (dict(arrivals="missing.csv"), "no such arrivals file"),
    (dict(rate=1.0, prompt=64, max_batch_tokens=32, max_batch=4, chunked_prefill=False), "without chunked prefill"),
    (dict(rate=1.0, dynamic_kv=True), "needs capacity auto"),
    (dict(rate=1.0, dynamic_kv=True, capacity="auto", policy="arc"), "sized for its capacity"),
])
def test_what_a_served_stream_refuses(settings, message):
    trace = small(sequences=2)
    with pytest.raises(MoesimError, match=message):
        simulate_serve(trace, Config.build(**{"capacity": 2, **settings}))


def test_a_stream_that_never_fills_its_cache_is_refused(mixtral):
    """cpu-miss at the bundled trace's batches (no prompts) runs every miss on the CPU: the slots charged GPU memory
    would change nothing, as a batch run's do (sim run refuses that before it runs; a stream, formed as it runs,
    after it). With 512-token prompts their prefill copies experts in, and decoding hits them."""
    settings = dict(strategy="cpu-miss", capacity=4, dtype="q4_k", rate=0.05, requests=4)
    with pytest.raises(MoesimError, match="^strategy cpu-miss runs every miss of this stream on the CPU .* the cache "
                                          "of capacity=4 never fills and changes nothing"):
        simulate_serve(mixtral, Config.build(**settings))
    filled = simulate_serve(mixtral, Config.build(**settings, prompt=512)).summary
    assert filled["hits"] > 0 and filled["hit_rate"] > 0
    assert simulate_serve(mixtral, Config.build(**{**settings, "capacity": 0})).summary["hits"] == 0


@pytest.mark.parametrize("settings, message", [
    (dict(rate=0.0), "rate must be a finite number > 0 (requests/s), got 0.0"),
    (dict(rate=float("nan")), "rate must be a finite number > 0 (requests/s), got nan"),
    (dict(acceptance=1.5), "acceptance must be a finite number > 0 and at most 1, got 1.5"), (dict(max_batch=0), "at least 1"),
    (dict(arrivals="trace"), "arrivals must be one of poisson, burst or a CSV or Parquet file, got 'trace'"),
    (dict(arrivals="times.json"), "arrivals must be one of poisson, burst or a CSV or Parquet file"), (dict(max_batch=8, max_batch_tokens=4), "cannot hold"),
    (dict(slo_ttft_s=-1.0), "slo_ttft_s must be a finite number > 0 (s), got -1.0"),
])
def test_serve_settings_are_checked(settings, message):
    with pytest.raises(MoesimError, match=re.escape(message)):
        Config.build(**settings)


def test_sim_serve_json_has_the_documented_keys(cli, tmp_path):
    out = tmp_path / "requests.parquet"
    code, text, err = cli("sim", "serve", bundled_trace_path(), "--rate", "0.5", "--requests", "6", "--dtype", "q4_k",
                          "--prompt", "16", "--slo-ttft", "1", "--slo-tpot", "0.1", "--out", out, "--json")
    assert code == 0, err
    payload = json.loads(text)
    keys = {"tpot_s", "tokens_per_s", "requests_per_s", "ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "hit_rate",
            "e2e_p90_s", "queue_mean_s", "slo_attainment", "expert_bytes_per_token", "vram_gb"}
    assert keys <= set(payload["summary"]) and len(payload["requests"]) == 6
    assert {"running", "steps", "hit_rate"} <= set(payload["by_batch"][0])
    assert pl.read_parquet(out).height == 6
    code, text, _ = cli("sim", "serve", bundled_trace_path(), "--rate", "0.5", "--requests", "4", "--dtype", "q4_k")
    assert code == 0 and "TTFT" in text and "hit rate by running batch" in text
    assert "e+" not in text and " ms " in text  # latencies in the unit a person reads (not 1.318e+04 ms)
    code, _, err = cli("sim", "serve", bundled_trace_path(), "--dtype", "q4_k")
    assert code == 1 and "need a rate" in err


def test_a_stream_takes_the_same_default_capacity_everywhere(cli, tmp_path):
    """Without a capacity, a served stream gets ``auto`` on the command line, in ``moesim.serve`` and in a sweep (the
    command line's 6 slots were 4 in the other two, and 18.3 tokens/s 11.6)."""
    import moesim
    from moesim.experiments.sweep import load_spec, run_sweep

    settings = dict(rate=0.5, requests=4, dtype="q4_k", hardware="rtx4090")
    code, text, err = cli("sim", "serve", "bundled", *(f"--{k}={v}" for k, v in settings.items()), "--json")
    assert code == 0, err
    command_line = json.loads(text)["summary"]
    api = moesim.serve(moesim.load_trace("bundled"), **settings).summary
    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled"]\nkind = "serve"\n[fixed]\n'
                    + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in settings.items()))
    run_sweep(load_spec(spec), tmp_path / "r.parquet")
    row = pl.read_parquet(tmp_path / "r.parquet").row(0, named=True)
    explicit = moesim.serve(moesim.load_trace("bundled"), **settings, capacity="auto").summary
    assert command_line["capacity"] == api["capacity"] == explicit["capacity"] == 6 and row["capacity"] == "auto"
    assert command_line["tokens_per_s"] == api["tokens_per_s"] == row["tokens_per_s"] == explicit["tokens_per_s"]
    # the default is the base's, not a setting the user gave: a strategy without a cache takes no capacity
    placed = moesim.serve(moesim.load_trace("bundled"), **settings, strategy="cpu-experts").summary
    assert placed["tokens_per_s"] > 0


def test_a_rate_by_strategy_sweep_runs_and_plots(cli, drawn, tmp_path):
    spec = tmp_path / "serve.toml"
    spec.write_text('traces = ["bundled"]\nkind = "serve"\n[axes]\nrate = [0.05, 0.4, 3.2]\n'
                    'strategy = ["gpu-cache", "hybrid"]\n[fixed]\ndtype = "q4_k"\nrequests = 24\nprompt = 64\n')
    results = tmp_path / "serve.parquet"
    code, _, err = cli("sweep", spec, "--out", results)
    assert code == 0, err
    frame = pl.read_parquet(results).sort("rate")
    assert frame["error"].is_null().all()
    for strategy in ("gpu-cache", "hybrid"):
        rows = frame.filter(pl.col("strategy") == strategy)
        assert rows["tokens_per_s"].is_sorted() and rows["ttft_p99_s"].is_sorted()  # both rise with the rate
    for kind in ("latency-vs-throughput", "hitrate-vs-batch"):
        code, _, err = cli("plot", results, "--kind", kind, "--out", tmp_path / f"{kind}.png")
        assert code == 0 and (tmp_path / f"{kind}.png").stat().st_size > 0, err
        fig = drawn[-1]
        assert overlapping_texts(fig) == []
        axes = fig.axes
        if kind == "latency-vs-throughput":  # TPOT in ms, plain numbers on the log axes
            assert "(ms" in axes[1].get_ylabel() and "(s" in axes[0].get_ylabel()
            # each rate's label is beside its own point, on no other line's marker and inside its panel
            assert all(ax.texts and labels_off_the_data(ax) == [] for ax in axes[:2])
            assert not any("10^" in t.get_text() or "times" in t.get_text() for ax in axes
                           for t in ax.get_yticklabels())
        else:  # a hit rate from 0, not an axis cut to exaggerate
            assert axes[0].get_ylim()[0] == 0


def test_durations_print_in_the_unit_a_person_reads():
    from moesim.cli.console import seconds_text

    assert [seconds_text(x) for x in (13.18, 0.08717, 0.00045, 1.0, 0.001, float("nan"))] == [
        "13.18 s", "87.17 ms", "450 µs", "1 s", "1 ms", "-"]
