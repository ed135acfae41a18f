"""The moesim command as a user runs it: exit codes, JSON keys, files written."""

import json
import subprocess
import sys

import polars as pl

import pytest

from moesim import __version__


def test_version_and_help_on_every_command(cli):
    code, out, _ = cli("--version")
    assert code == 0 and __version__ in out
    for args in (["--help"], ["models", "--help"], ["demo", "--help"], ["trace", "--help"],
                 ["trace", "import", "--help"], ["trace", "synth", "--help"], ["trace", "info", "--help"]):
        code, out, _ = cli(*args)
        assert code == 0 and "Usage" in out, args


def test_import_then_info_json(cli, tmp_path, shared_jsonl):
    out = tmp_path / "t.parquet"
    code, _, err = cli("trace", "import", shared_jsonl, "--format", "vllm-jsonl", "--model", "mixtral-8x7b", "--out", out)
    assert code == 0 and "dropped 3 incomplete token(s)" in err
    code, text, _ = cli("trace", "info", out, "--json")
    info = json.loads(text)
    assert code == 0
    assert {k: info[k] for k in ("layers", "experts", "top_k", "sequences", "decode_steps", "prefill_steps",
                                 "accesses", "model")} == {
        "layers": 32, "experts": 8, "top_k": 2, "sequences": 2, "decode_steps": 244, "prefill_steps": 0,
        "accesses": 244 * 32 * 2, "model": "mixtral-8x7b"}
    assert len(info["layer_skew_gini"]) == 32 and info["dropped_tokens"] == 3


@pytest.mark.parametrize("args, message", [
    (["trace", "import", "nope.jsonl", "--out", "x.parquet"], "nope.jsonl: no such file"),
    (["trace", "import", "{bad}", "--format", "xml", "--out", "x.parquet"], "unknown format 'xml'"),
    (["trace", "import", "{bad}", "--out", "x.parquet"], "bad.jsonl:2: not JSON"),
    (["trace", "import", "{bad}", "--model", "gpt-5", "--out", "x.parquet"], "unknown model 'gpt-5'"),
    (["trace", "info", "{bad}"], "bad.jsonl: not a Parquet file"),
    (["trace", "synth", "--top-k", "9", "--experts", "8", "--out", "x.parquet"], "top-k 9 exceeds"),
])
def test_bad_input_is_one_line_and_non_zero(cli, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem_id": 0, "layer": 0, "experts": [1, 2], "token_idx": 0}\n{"problem_id": 0,\n')
    code, out, err = cli(*[a.replace("{bad}", str(bad)) for a in args])
    assert code == 1 and message in err
    assert err.count("\n") == 1 and err.startswith("moesim: error: ")
    assert not (tmp_path / "x.parquet").exists()


def test_usage_errors_exit_non_zero(cli):
    code, _, _ = cli("trace", "import")
    assert code == 2


def test_synth_then_info(cli, tmp_path, monkeypatch):
    out = tmp_path / "s.parquet"
    code, _, _ = cli("trace", "synth", "--model", "olmoe-1b-7b", "--sequences", "2", "--tokens", "20",
                     "--prompt-tokens", "4", "--seed", "3", "--out", out)
    assert code == 0
    info = json.loads(cli("trace", "info", out, "--json")[1])
    assert (info["layers"], info["experts"], info["top_k"]) == (16, 64, 8)
    assert (info["decode_steps"], info["prefill_steps"]) == (40, 8)
    assert info["model"] == "synthetic-olmoe-1b-7b" and info["expert_bytes"] == 3 * 2048 * 1024 * 2
    from moesim.cli.console import console

    monkeypatch.setattr(console, "_width", 200)  # one line a field (without a terminal it is 80 wide)
    table = cli("trace", "info", out)[1]  # the table gives the bytes in MB and names what each number counts
    assert "bytes per expert" in table and f"{3 * 2048 * 1024 * 2 / 1e6:.1f} MB" in table
    assert "mean reuse distance (tokens)" in table and "optional columns" in table and "None" not in table


def test_the_readme_forms_run_on_a_synthetic_trace_made_with_no_model(cli, tmp_path):
    """``trace synth`` with nothing said of the model makes an OLMoE-1B-7B trace (the README's form), whose widths
    ``sim run`` reads without --model, and the README's hit-rate capacities are at least its top-k."""
    out = tmp_path / "t.parquet"
    code, _, err = cli("trace", "synth", "--sequences", "2", "--tokens", "16", "--out", out)
    assert code == 0, err
    assert json.loads(cli("trace", "info", out, "--json")[1])["model"] == "synthetic-olmoe-1b-7b"
    code, _, err = cli("sim", "hitrate", out, "--policy", "lru,belady", "--capacity", "8,16,32")
    assert code == 0, err
    code, text, err = cli("sim", "run", out, "--hardware", "rtx4090", "--policy", "lru", "--capacity", "8", "--json")
    assert code == 0 and json.loads(text)["results"][0]["model"] == "olmoe-1b-7b", err


def test_synth_like_reports_the_comparison(cli, tmp_path):
    from moesim.tracegen.trace import bundled_trace_path

    code, out, _ = cli("trace", "synth", "--like", bundled_trace_path(), "--seed", "1", "--out", tmp_path / "s.parquet")
    assert code == 0 and "fitted: layer_alpha=" in out and "LRU hit rate, C=2" in out


def test_models_json(cli):
    rows = {r["name"]: r for r in json.loads(cli("models", "--json")[1])}
    assert len(rows) == 20  # 11 MoE models, MoLE's 3 sizes x (MoE-10E, MoLE-4E, MoLE-16E)
    assert rows["mole-160m-4e"]["kind"] == "mole"
    assert rows["mixtral-8x7b"]["expert_params"] == 3 * 4096 * 14336
    assert (rows["qwen3-30b-a3b"]["layers"], rows["qwen3-30b-a3b"]["experts"], rows["qwen3-30b-a3b"]["top_k"]) == (48, 128, 8)


def test_demo_writes_its_table_and_plots(cli, tmp_path):
    code, out, _ = cli("demo", "--out", tmp_path / "demo")
    assert code == 0
    for name in ("expert_activations.png", "hitrate_vs_capacity.png", "tpot_vs_capacity.png",
                 "plan-mixtral-8x7b.png", "plan-qwen3-30b-a3b.png"):
        assert (tmp_path / "demo" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "244" in out and "TPOT" in out and "belady" in out and "--n-cpu-moe" in out
    # the file Qwen3's kTransformers command reads, written beside the figures: a row of counts per layer
    counts = json.loads((tmp_path / "demo" / "expert-counts-qwen3-30b-a3b.json").read_text())["logical_count"]
    assert len(counts) == 48 and all(len(row) == 128 for row in counts)
    named = f"--init-expert-location {tmp_path / 'demo' / 'expert-counts-qwen3-30b-a3b.json'} "
    assert sum(counts[0]) == sum(counts[47]) > 0 and named in " ".join(out.split())
    results = pl.read_parquet(tmp_path / "demo" / "demo-results.parquet")
    assert results.height == 30 and results["error"].is_null().all()
    assert (results["vram_gb"] <= 24).all()  # only what fits the card
    lru4 = results.filter((pl.col("policy") == "lru") & (pl.col("capacity") == 4))
    assert lru4["hits"][0] == 9389  # the golden hit-rate table's number (step semantics)


def test_bundled_names_the_shipped_trace_wherever_a_trace_is_asked_for(cli, mixtral):
    """``bundled`` is the shipped trace on the command line as in sweep specs and the API."""
    import moesim

    code, out, err = cli("sim", "hitrate", "bundled", "--policy", "lru", "--capacity", "4", "--json")
    assert code == 0, err
    assert json.loads(out)["results"][0]["hits"] == moesim.hitrate(mixtral, policy="lru", capacity=4).hits
    code, out, err = cli("trace", "info", "bundled", "--json")
    assert code == 0 and json.loads(out)["accesses"] == mixtral.accesses, err
    assert (moesim.load_trace("bundled").experts == mixtral.experts).all()


def test_the_command_line_and_a_plans_synthetic_trace_start_without_polars():
    """polars (0.1 s to import) is imported by what reads or writes a table, not by every command."""
    code = ("import sys; import moesim.cli.app; from moesim.experiments.plan import plan_trace; "
            "from moesim.tracegen.models import get_model; plan_trace(get_model('olmoe-1b-7b'), None, 1); "
            "print('polars' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
