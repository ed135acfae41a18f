"""A served stream's settings that nothing reads are refused, as only its trace, requests or resolved run show
(the seed where nothing is drawn, chunked prefill with no prompt, a prompt every sequence records, a kernel where
every expert runs on the CPU), one line and exit 1, nothing written; and a token budget far past what its steps
can hold sizes nothing by itself."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

import moesim
from moesim.errors import MoesimError
from moesim.sim.config import Config
from moesim.sim.scheduler import make_queue, most_step_tokens
from moesim.sim.serve import simulate_serve
from moesim.tracegen.schema import TraceMeta
from moesim.tracegen.synth import synth_trace


def one_line_error(cli, *args, code=1) -> str:
    status, _, err = cli(*args)
    assert status == code and err.count("\n") == 1 and err.startswith("moesim: error: "), (args, status, err)
    return err.removeprefix("moesim: error: ").rstrip("\n")


def runs(cli, *args) -> None:
    status, _, err = cli(*args)
    assert status == 0, (args, err)


@pytest.fixture
def prompted(cli, tmp_path):
    """A trace of 2 Mixtral sequences that record 6-token prompts (then 4 decode rows each)."""
    path = tmp_path / "prompted.parquet"
    runs(cli, "trace", "synth", "--model", "mixtral-8x7b", "--sequences", "2", "--tokens", "4", "--prompt-tokens", "6",
         "--out", path)
    return path


def small(sequences=2, tokens=3, prompt_tokens=0):
    """A synthetic trace of a small model of its own (2 layers of 8 experts, top 2; 1024 wide, bf16)."""
    meta = TraceMeta(num_layers=2, num_experts=8, top_k=2, model="toy", d_model=1024, d_expert=2048,
                     bytes_per_param=2.0)
    return synth_trace(2, 8, 2, sequences, tokens, 0, prompt_tokens=prompt_tokens, meta=meta)


def test_an_arrival_seed_where_nothing_is_drawn_is_refused(cli, tmp_path):
    """The seed draws Poisson arrivals, the shuffles of requests past the trace's sequences and the drafts'
    acceptances: an arrivals file that names every request's sequence, or gives no more requests than sequences
    (burst arrivals too), with no draft that can be rejected, draws nothing."""
    listed, plain, more = tmp_path / "listed.csv", tmp_path / "plain.csv", tmp_path / "more.csv"
    listed.write_text("arrival_s,seq\n0,0\n0.5,1\n1.0,0\n")
    plain.write_text("arrival_s\n0\n0.5\n")
    more.write_text("arrival_s\n0\n0.5\n1\n")
    out = tmp_path / "requests.parquet"
    assert one_line_error(cli, "sim", "serve", "bundled", "--arrivals", listed, "--arrival-seed", "3", "--out", out) \
        == (f"--arrival-seed: the arrivals file {listed} names the sequence each request serves (its seq column), and "
            "--draft-tokens is 0: nothing is drawn, so nothing reads it")
    assert not out.exists()
    assert one_line_error(cli, "sim", "serve", "bundled", "--arrivals", plain, "--arrival-seed", "3") == (
        f"--arrival-seed: the arrivals file {plain} gives every request's time and its 2 requests serve the trace's 2 "
        "sequences in order (only more than 2 would be shuffled), and --draft-tokens is 0: nothing is drawn, so "
        "nothing reads it")
    assert one_line_error(cli, "sim", "serve", "bundled", "--arrivals", "burst", "--requests", "1", "--arrival-seed",
                          "3") == (
        "--arrival-seed: --arrivals burst puts every request at time 0 and its 1 request serves the trace's 2 "
        "sequences in order (only more than 2 would be shuffled), and --draft-tokens is 0: nothing is drawn, so "
        "nothing reads it")
    # a draw in [0, 1) is always below acceptance 1: every draft is accepted, whatever the seed
    assert one_line_error(cli, "sim", "serve", "bundled", "--arrivals", listed, "--draft-tokens", "2", "--acceptance",
                          "1", "--arrival-seed", "3") == (
        f"--arrival-seed: the arrivals file {listed} names the sequence each request serves (its seq column), and "
        "every draft is accepted (--acceptance 1.0): nothing is drawn, so nothing reads it")
    # read: more requests than sequences are shuffled; drafts that may be rejected; Poisson arrivals
    for args in (["--arrivals", more], ["--arrivals", listed, "--draft-tokens", "2"],
                 ["--arrivals", "burst", "--requests", "3"], ["--rate", "1", "--requests", "2"]):
        runs(cli, "sim", "serve", "bundled", *args, "--arrival-seed", "3")
    # the API's names, where the settings given are passed on
    with pytest.raises(MoesimError, match=r"^arrival_seed: the arrivals file .*listed.csv names the sequence each "
                                          r"request serves \(its seq column\), and draft_tokens is 0: nothing is "
                                          r"drawn, so nothing reads it$"):
        simulate_serve(small(), Config.build(arrivals=str(listed), arrival_seed=3), given={"arrival_seed"})
    # nothing given: a loop over configurations passes the same settings to each
    simulate_serve(small(), Config.build(arrivals=str(listed), arrival_seed=3))


def test_a_kernel_where_every_expert_runs_on_the_cpu_is_refused(cli):
    """The kernel kind times the experts the GPU computes: hybrid with no slot and no prefetcher computes none, nor
    cpu-experts with every layer on the CPU and no step of the 32 tokens at which llama.cpp runs a CPU layer's experts
    on the GPU (known once the run is assembled, and a stream's requests are). The command line refuses it; the API
    takes it (a loop over capacities passes it to each), and cpu-miss reads it even where every expert ends on the
    CPU (its launches are part of what it weighs)."""
    assert one_line_error(cli, "sim", "run", "bundled", "--strategy", "hybrid", "--capacity", "0", "--kernel",
                          "per-expert") == (
        "--kernel: strategy hybrid with no expert slot (--capacity 0) and no prefetcher computes every expert on "
        "the CPU, so nothing reads it")
    trace = moesim.load_trace("bundled")
    assert moesim.simulate(trace, strategy="hybrid", capacity=0, kernel="per-expert").cpu_share == 1.0
    runs(cli, "sim", "run", "bundled", "--dtype", "q4_k", "--strategy", "cpu-miss", "--capacity", "0", "--kernel",
         "per-expert")  # every expert on the CPU here, by a choice that weighed the kernel's launches
    assert one_line_error(cli, "sim", "serve", "bundled", "--arrivals", "burst", "--strategy", "cpu-experts",
                          "--cpu-layers", "32", "--kernel", "per-expert") == (
        "--kernel: strategy cpu-experts puts all 32 layers' experts on the CPU (--cpu-layers 32) and no step holds "
        "the 32 tokens at which it runs them on the GPU (at most 2 here), so nothing reads it")
    assert one_line_error(cli, "sim", "run", "bundled", "--strategy", "cpu-experts", "--vram", "5", "--kernel",
                          "per-expert") == (
        "--kernel: strategy cpu-experts puts all 32 layers' experts on the CPU (--cpu-layers auto, resolved to 32) and "
        "no step holds the 32 tokens at which it runs them on the GPU (at most 1 here), so nothing reads it")
    # capacity auto with no room for a slot beside the KV cache: resolved to none
    assert one_line_error(cli, "sim", "serve", "bundled", "--arrivals", "burst", "--strategy", "hybrid",
                          "--hardware", "rtx2080", "--kernel", "per-expert") == (
        "--kernel: strategy hybrid with no expert slot (--capacity auto resolved to 0) and no prefetcher computes "
        "every expert on the CPU, so nothing reads it")
    # read: a prefetcher stages experts the GPU computes; a layer left on the GPU; a 40-token prompt's step, offloaded
    runs(cli, "sim", "run", "bundled", "--strategy", "hybrid", "--capacity", "0", "--prefetch", "oracle", "--kernel",
         "per-expert")
    runs(cli, "sim", "serve", "bundled", "--arrivals", "burst", "--strategy", "cpu-experts", "--cpu-layers", "31",
         "--kernel", "per-expert")
    runs(cli, "sim", "run", "bundled", "--strategy", "cpu-experts", "--cpu-layers", "32", "--prompt", "40",
         "--kernel", "per-expert")
    fused, per_expert = (simulate_serve(trace, Config.build(arrivals="burst", strategy="cpu-experts", cpu_layers=32,
                                                            prompt=40, kernel=k), given={"kernel"}).summary
                         for k in ("fused", "per-expert"))
    assert fused["ttft_mean_s"] != per_expert["ttft_mean_s"]


def test_chunked_prefill_with_no_prompt_is_refused(cli):
    for flag in ("--no-chunked-prefill", "--chunked-prefill"):
        assert one_line_error(cli, "sim", "serve", "bundled", "--arrivals", "burst", flag) == (
            f"{flag}: no request has a prompt to prefill (the sequences served record none, and --prompt is 0), so "
            "nothing reads it")
    runs(cli, "sim", "serve", "bundled", "--arrivals", "burst", "--prompt", "8", "--no-chunked-prefill")
    with pytest.raises(MoesimError, match=r"^chunked_prefill=False: no request has a prompt to prefill \(the "
                                          r"sequences served record none, and prompt is 0\), so nothing reads it$"):
        simulate_serve(small(), Config.build(arrivals="burst", chunked_prefill=False), given={"chunked_prefill"})


def test_a_prompt_every_sequence_records_is_refused(cli, prompted, tmp_path):
    """Each sequence's recorded prompt is what is prefilled: a prompt typed, 0 as well, is read by nothing (one > 0
    was refused already)."""
    message = ("every sequence served records its own prompt (6 tokens, the median), which is what is prefilled; a "
               "prompt is given only to sequences recorded without one")
    for prompt in ("0", "16"):
        assert one_line_error(cli, "sim", "serve", prompted, "--arrivals", "burst", "--prompt", prompt) == \
            f"--prompt {prompt}: {message}, so leave it out"
    assert one_line_error(cli, "sim", "run", prompted, "--prompt", "0") == \
        f"--prompt 0: {message.replace('served', 'of the trace')}, so leave it out"
    with pytest.raises(MoesimError, match=r"^prompt=0: every sequence served records its own prompt \(6 tokens"):
        simulate_serve(small(prompt_tokens=6), Config.build(arrivals="burst"), given={"prompt"})
    runs(cli, "sim", "serve", prompted, "--arrivals", "burst")
    runs(cli, "sim", "serve", "bundled", "--arrivals", "burst", "--prompt", "0")  # it gives none: read
    runs(cli, "sim", "run", "bundled", "--prompt", "0", "--dtype", "q4_k")


def test_a_token_budget_past_what_a_step_holds_changes_nothing(monkeypatch):
    """A step holds at most max_batch requests, each a prompt chunk or draft_tokens + 1 decode positions: the costs'
    table by tokens is sized by that, not by a budget of 2 billion tokens (which asked for a 16 GB table and was
    killed for memory)."""
    from moesim.sim.cost_model import SpecSheet

    sized, real = [], SpecSheet.costs

    def costs(self, tokens, ctx, max_expert_tokens, *rest):
        sized.append(max_expert_tokens)
        assert max_expert_tokens <= 15  # before the table is built: a regression fails here, not for memory
        return real(self, tokens, ctx, max_expert_tokens, *rest)

    monkeypatch.setattr(SpecSheet, "costs", costs)
    trace = small(sequences=3, tokens=3, prompt_tokens=5)
    queue = make_queue(trace, 3, 0, np.zeros(3), None)
    assert [most_step_tokens(queue, b, t, d) for b, t, d in
            ((8, 2048, 0), (2, 2048, 0), (8, 12, 0), (1, 2048, 0), (8, 2048, 9))] == [15, 10, 12, 5, 15]
    prompts = small(sequences=3, tokens=3, prompt_tokens=5)
    for tr, settings in ((moesim.load_trace("bundled"), {"capacity": "auto"}), (prompts, {"capacity": 2}),
                         (prompts, {"capacity": 2, "draft_tokens": 2, "max_batch": 2})):
        sufficient = simulate_serve(tr, Config.build(arrivals="burst", max_batch_tokens=15, **settings)).summary
        huge = simulate_serve(tr, Config.build(arrivals="burst", max_batch_tokens=2_000_000_000, **settings)).summary
        sufficient.pop("seconds"), huge.pop("seconds")
        assert huge == sufficient
    assert sized == [2, 2, 15, 15, 10, 10]  # bundled: 2 one-token requests; 3 prompts of 5; 2 of them at once


def test_a_machine_without_a_gpu_serves_on_its_cpu_as_sim_run_runs(cli):
    """With no strategy given, sim run ran llama.cpp's CPU build (cpu-experts) on a machine without a GPU, and serve
    refused; both run it now, every expert on the CPU."""
    code, out, err = cli("sim", "serve", "bundled", "--hardware", "ryzen-7950x", "--arrivals", "burst", "--dtype",
                         "q4_k", "--json")
    summary = json.loads(out)["summary"]
    assert code == 0 and (summary["strategy"], summary["cpu_layers"]) == ("cpu-experts", 32), err


def test_a_machine_without_a_gpu_runs_the_cpu_build_in_a_sweep_and_the_api_as_on_the_command_line(cli, tmp_path,
                                                                                                  monkeypatch):
    """A sweep's rows and the API's calls on ryzen-7950x failed (gpu-cache has no GPU) where sim run ran cpu-experts:
    the same configuration, the same number everywhere; a strategy given is kept."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text('traces = ["bundled"]\nkind = "des"\n[axes]\nthreads = [4, 8]\n[fixed]\n'
                                     'hardware = "ryzen-7950x"\ndtype = "q4_k"\n')
    assert cli("sweep", "s.toml", "--out", "r.parquet")[0] == 0
    rows = pl.read_parquet("r.parquet").sort("threads")
    trace = moesim.load_trace("bundled")
    for threads, strategy, tpot in rows.select("threads", "strategy", "tpot_s").iter_rows():
        code, out, err = cli("sim", "run", "bundled", "--hardware", "ryzen-7950x", "--dtype", "q4_k", "--threads",
                             str(threads), "--json")
        assert code == 0 and strategy == "cpu-experts", err
        assert tpot == json.loads(out)["results"][0]["tpot_s"] == \
            moesim.simulate(trace, hardware="ryzen-7950x", dtype="q4_k", threads=threads).tpot_s
    assert moesim.serve(trace, hardware="ryzen-7950x", dtype="q4_k", arrivals="burst").config.execution.strategy == \
        "cpu-experts"
    from moesim.sim.hardware import get_hardware

    cpu_build = moesim.simulate(trace, hardware="ryzen-7950x", dtype="q4_k").tpot_s
    assert moesim.simulate(trace, Config(), hardware="ryzen-7950x", dtype="q4_k").tpot_s == cpu_build
    assert moesim.simulate(trace, hardware=get_hardware("ryzen-7950x"), dtype="q4_k").tpot_s == cpu_build
    # a strategy or a cache's setting asked for (in the call or the configuration) is kept, and refused
    for call in (lambda: moesim.simulate(trace, hardware="ryzen-7950x", strategy="gpu-cache"),
                 lambda: moesim.simulate(trace, hardware="ryzen-7950x", capacity=4),
                 lambda: moesim.simulate(trace, Config.build(capacity=6), hardware="ryzen-7950x"),
                 lambda: moesim.simulate(trace, Config.build(dtype="q4_k"), hardware=get_hardware("ryzen-7950x"))):
        with pytest.raises(MoesimError, match="has no GPU: every expert runs on its CPU; use strategy cpu-experts"):
            call()
    code, _, err = cli("sim", "run", "bundled", "--hardware", "ryzen-7950x", "--capacity", "4")
    assert (code, err) == (1, "moesim: error: hardware 'ryzen-7950x' has no GPU: every expert runs on its CPU; use "
                              "--strategy cpu-experts, or hybrid with --capacity 0\n")
