"""`moesim plan`: every strategy ranked within the machine's memory, with engine settings (issue 18)."""

import json

import pytest

from moesim.experiments.plan import CANDIDATES

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def mixtral_plan(tmp_path_factory):
    from moesim.cli.app import app
    from typer.testing import CliRunner

    figure = tmp_path_factory.mktemp("plan") / "plan.png"
    result = CliRunner().invoke(app, ["plan", "--model", "mixtral-8x7b", "--hardware", "rtx4090", "--json",
                                      "--plot", str(figure)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), figure


def test_plan_ranks_every_strategy_within_the_gpu_memory(mixtral_plan):
    out, figure = mixtral_plan
    rows = out["rows"]
    assert {r["strategy"] for r in rows} == {s for s, _ in CANDIDATES}
    assert [r["tokens_per_s"] for r in rows] == sorted((r["tokens_per_s"] for r in rows), reverse=True)
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    for r in rows:
        assert {"strategy", "tokens_per_s", "ttft_s", "vram_gb", "ram_gb", "engine_flags"} <= set(r)
        assert 0 < r["vram_gb"] <= 24 and 0 < r["ram_gb"] <= 128 and r["ttft_s"] > 0
        assert r["tpot_s"] == pytest.approx(1 / r["tokens_per_s"])
    for r in (r for r in rows if r["strategy"] == "cpu-experts"):
        assert r["engine"] == "llama.cpp" and r["engine_flags"] == f"-ngl 99 --n-cpu-moe {r['cpu_layers']}"
    assert out["skipped"] == []  # the real trace has gate weights, every candidate fits some way
    assert figure.read_bytes()[:8] == PNG


def test_plan_for_a_model_without_a_trace_simulates_a_synthetic_one(cli):
    code, out, err = cli("plan", "--model", "olmoe-1b-7b", "--hardware", "rtx5070ti", "--dtype", "bf16", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["trace"].startswith("synthetic olmoe-1b-7b trace")
    assert all(r["vram_gb"] <= 16 for r in plan["rows"])
    assert [s["strategy"] for s in plan["skipped"]] == ["lowbit-miss"]  # no gate weights in a synthetic trace


def test_plan_errors_are_one_line(cli, tmp_path):
    for args, message in ((["--model", "nope"], "unknown model"), (["--model", "mixtral-8x7b", "--dtype", "fp7"],
                                                                    "unknown dtype"),
                          (["--model", "mole-160m-4e"], "MoLE"),
                          (["--model", "mixtral-8x7b", "--plot", tmp_path / "no" / "p.png"], "no such folder")):
        code, _, err = cli("plan", *args)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, (args, err)


def test_plan_with_the_best_split_spends_the_same_memory_better(mixtral_plan):
    """--split best: each per-layer cache's slots shared out over the layers, in the same GPU memory; on
    the plain GPU cache (whose hits are the curves' the split is chosen from) a hit rate no lower than
    the uniform row's."""
    import moesim

    split = moesim.plan("mixtral-8x7b", "rtx4090", dtypes=("q4_k",), split="best")
    uniform = {(r["strategy"], r["policy"], r["prefetch"], r["scope"]): r for r in mixtral_plan[0]["rows"]
               if r["dtype"] == "q4_k"}
    per_layer = [r for r in split.rows if r["scope"] == "per-layer"]
    assert per_layer
    for r in per_layer:
        before = uniform[(r["strategy"], r["policy"], r["prefetch"], r["scope"])]
        assert sum(r["capacity"]) == before["capacity"] * 32 and r["vram_gb"] == before["vram_gb"]
        if (r["strategy"], r["prefetch"]) == ("gpu-cache", "none"):
            assert r["hit_rate"] >= before["hit_rate"] and r["tokens_per_s"] >= before["tokens_per_s"]


def test_candidates_refused_for_one_reason_are_one_line(cli):
    """On a machine whose RAM cannot hold bf16 experts, gpu-cache's two candidates (with and without history
    prefetch) share a line; the hint names what applies (no SSD tier for a CPU strategy)."""
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hardware", "rtx5070ti", "--ram", "32", "--dtype", "bf16")
    assert code == 0, err
    text = " ".join(out.split())
    assert text.count("not run: gpu-cache (bf16: lru; lru + history):") == 1
    assert "or an SSD tier" in text.split("not run: gpu-cache")[1].split("not run:")[0]
    assert "or an SSD tier" not in text.split("not run: cpu-experts")[1].split("not run:")[0]


def test_threads_reach_the_cpu_model_and_the_engines_flags(cli):
    """--threads sets the CPU's threads as llama.cpp's -t (kTransformers' --cpu_infer) does: the same run as a
    machine whose [cpu] says so, and the row's flags carry it."""
    from dataclasses import replace

    import moesim
    from moesim.sim.hardware import get_hardware
    from moesim.tracegen.synth import synth_trace

    code, out, err = cli("plan", "--model", "olmoe-1b-7b", "--hardware", "rtx5070ti", "--dtype", "q4_k",
                         "--threads", "2", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert all(r["engine_flags"].endswith("-t 2") for r in rows if r["strategy"] == "cpu-experts")
    assert all(r["engine_flags"].endswith("--cpu_infer 2") for r in rows if r["engine"].startswith("kTransformers"))
    trace = synth_trace(16, 64, 8, 1, 4, seed=0, model="olmoe-1b-7b")
    hw = get_hardware("ryzen-7950x")
    two = moesim.simulate(trace, hardware=replace(hw, cpu=replace(hw.cpu, threads=2)), strategy="cpu-experts",
                          dtype="q4_k")
    assert moesim.simulate(trace, hardware="ryzen-7950x", threads=2, strategy="cpu-experts",
                           dtype="q4_k").tpot_s == two.tpot_s
    assert two.tpot_s > moesim.simulate(trace, hardware=hw, strategy="cpu-experts", dtype="q4_k").tpot_s
