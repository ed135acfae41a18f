"""Bad input is one line, exit 1, and nothing half-written: paths, outputs, values that would give
silently wrong numbers, what a person reads, and processes that are interrupted or killed."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.tracegen.trace import bundled_trace_path

SMALL = ("--layers", "2", "--experts", "4", "--top-k", "2", "--sequences", "2", "--tokens", "4")


def one_line_error(cli, *args, code=1) -> str:
    status, _, err = cli(*args)
    assert status == code and err.count("\n") == 1 and err.startswith("moesim: error: "), (args, status, err)
    return err


def test_a_file_name_with_brackets_is_a_name_not_a_pattern(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli("trace", "synth", *SMALL, "--out", "a[1].parquet")[0] == 0
    code, out, err = cli("trace", "info", "a[1].parquet", "--json")
    assert code == 0 and json.loads(out)["accesses"] == 2 * 4 * 2 * 2, err
    assert cli("sim", "hitrate", "a[1].parquet", "--capacity", "2")[0] == 0
    for name in ("b*.parquet", "c?.parquet"):
        assert cli("trace", "synth", *SMALL, "--out", name)[0] == 0 and cli("trace", "info", name)[0] == 0


def test_outputs_are_checked_before_any_work(cli, tmp_path):
    trace = tmp_path / "t.parquet"
    assert cli("trace", "synth", *SMALL, "--out", trace)[0] == 0
    before = trace.read_bytes()
    cases = [(("trace", "synth", *SMALL, "--out", tmp_path / "no" / "t.parquet"), "no such folder"),
             (("trace", "synth", *SMALL, "--out", trace / "x.parquet"), "is a file, not a folder"),
             (("trace", "synth", *SMALL, "--out", tmp_path), "is a folder"),
             (("trace", "synth", *SMALL, "--out", trace), "exists; pass --force"),
             (("trace", "synth", "--like", trace, "--out", trace, "--force"), "is also an input"),
             (("trace", "import", trace, "--format", "csv", "--out", trace, "--force"), "is also an input"),
             (("train", "ml-ffn", trace, "--out", trace, "--force"), "is also an input"),
             (("plot", trace, "--kind", "activation-heatmap", "--out", trace), "is also an input"),
             # a served stream's requests file replaced a trace it did not read, and took any name (2026-11-27)
             (("sim", "serve", "bundled", "--rate", "1", "--requests", "2", "--out", trace), "exists; pass --force"),
             (("sim", "serve", "bundled", "--rate", "1", "--requests", "2", "--out", tmp_path / "r.csv"),
              "unknown requests file format '.csv' (use .parquet)")]
    for args, message in cases:
        assert message in one_line_error(cli, *args)
    assert trace.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]
    assert cli("trace", "synth", *SMALL, "--seed", "2", "--out", trace, "--force")[0] == 0
    assert trace.read_bytes() != before


def test_a_toml_or_a_figure_never_replaces_an_input_or_a_trace(cli, tmp_path):
    """What a new user tried: ``--save-config`` and ``--save`` once wrote TOML over the command's own trace or
    hardware file, made missing folders, and ``--plot`` found a bad format or folder only after the work."""
    trace = tmp_path / "t.parquet"
    trace.write_bytes(bundled_trace_path().read_bytes())
    before = trace.read_bytes()
    config, box = tmp_path / "c.toml", tmp_path / "box.toml"
    assert cli("sim", "run", trace, "--dtype", "q4_k", "--capacity", "4", "--save-config", config)[0] == 0
    assert config.exists()
    code, template, _ = cli("hardware", "--template")
    box.write_text(template)
    other = tmp_path / "other.parquet"
    other.write_bytes(before)
    cases = [(("sim", "run", trace, "--save-config", trace), "is also an input"),
             (("sim", "run", trace, "--save-config", other), "unknown configuration file format '.parquet'"),
             (("sim", "run", trace, "--config", config, "--save-config", config), "is also an input"),
             (("sim", "run", trace, "--hardware", box, "--save-config", box), "is also an input"),
             (("sim", "run", trace, "--save-config", tmp_path / "no" / "c.toml"), "no such folder"),
             (("hardware", "--show", "rtx4090", "--save", trace), "unknown hardware file format '.parquet'"),
             (("hardware", "--show", box, "--save", box), "is also an input"),
             (("demo", "--out", trace), "is a file, not a folder"),
             (("sim", "mrc", trace, "--policy", "lru", "--capacity", "2", "--plot", tmp_path / "m.txt"),
              "unknown figure format '.txt' (use .png, .svg, .pdf)"),
             (("sim", "mrc", trace, "--policy", "lru", "--capacity", "2", "--plot", tmp_path / "no" / "m.png"),
              "no such folder"),
             (("plan", "--model", "qwen3-30b-a3b", "--hardware", "rtx4080", "--plot", tmp_path / "p.gif"),
              "unknown figure format '.gif'")]
    for args, message in cases:
        assert message in one_line_error(cli, *args), args
    assert trace.read_bytes() == before == other.read_bytes() and box.read_text() == template
    assert sorted(p.name for p in tmp_path.iterdir()) == ["box.toml", "c.toml", "other.parquet", "t.parquet"]


def test_serve_writes_no_input_and_prints_a_burst(cli, tmp_path):
    """``sim serve --out`` once wrote over its arrivals or configuration file, and its table raised a TypeError
    for arrivals that take no rate."""
    import polars as pl

    arrivals, config = tmp_path / "a.parquet", tmp_path / "c.toml"
    pl.DataFrame({"arrival_s": [0.0, 0.5]}).write_parquet(arrivals)
    before = arrivals.read_bytes()
    serve = ("sim", "serve", "bundled", "--dtype", "q4_k")
    assert cli("sim", "run", "bundled", "--dtype", "q4_k", "--capacity", "4", "--save-config", config)[0] == 0
    written = config.read_text()
    assert "is also an input" in one_line_error(cli, *serve, "--arrivals", arrivals, "--out", arrivals)
    assert "is also an input" in one_line_error(cli, *serve, "--config", config, "--arrivals", "burst",
                                                "--out", config)
    assert arrivals.read_bytes() == before and config.read_text() == written
    for given in ("burst", str(arrivals)):
        code, out, err = cli(*serve, "--arrivals", given)
        assert code == 0 and "TTFT" in out and not err, err


@pytest.mark.parametrize("args, message", [
    (("trace", "synth", *SMALL, "--seq-alpha", "inf", "--out", "t.parquet"), "--seq-alpha must be > 0 and at most 1e+06, got inf"),
    (("trace", "synth", *SMALL, "--layer-alpha", "1e300", "--out", "t.parquet"), "--layer-alpha must be > 0 and at most 1e+06"),
    (("sim", "serve", "bundled", "--rate", "1e-15", "--dtype", "q4_k"), "--rate 1e-15 requests/s is too low"),
    (("sim", "mrc", "bundled", "--policy", "lru", "--budget", "100000"), "--budget 100000 is more than the 256"),
    (("plot", "bundled", "--kind", "eviction-timeline", "--capacity", "0", "--out", "e.png"), "--capacity 0 is below"),
])
def test_values_a_new_user_tried_are_refused(cli, tmp_path, monkeypatch, args, message):
    """An infinite alpha drew forever; a rate of 1e-15 put arrivals where float64 seconds lose a step's
    milliseconds (TPOT 0); a budget above every expert and an eviction timeline of 0 slots ran something else."""
    monkeypatch.chdir(tmp_path)
    assert message in one_line_error(cli, *args)
    assert not list(tmp_path.iterdir())


def test_errors_a_new_user_met_name_the_file_and_the_line(cli, tmp_path, monkeypatch):
    """Each was one line before, but named no file, no line, or the wrong setting."""
    import polars as pl

    monkeypatch.chdir(tmp_path)
    bundled = bundled_trace_path()
    pl.read_parquet(bundled).drop("experts").write_parquet("nocol.parquet", metadata=pl.read_parquet_metadata(bundled))
    record = {"dataset": "d", "problem_id": 1, "experts": [0, 1], "gating_probs": [0.6, 0.4]}
    lines = [json.dumps({**record, "layer": layer, "token_idx": t}) for t in range(3) for layer in range(2)]
    lines[4] = lines[4].replace("0.6", "NaN")
    Path("nan.jsonl").write_text("\n".join(lines) + "\n")
    Path("cfg").mkdir()
    Path("cfg/cut.json").write_text('{"model_type": "mixtral",\n "num_local_experts": 8,\n')
    config = {"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2, "hidden_size": 10 ** 30,
              "num_hidden_layers": 32, "intermediate_size": 14336, "num_attention_heads": 32, "vocab_size": 32000}
    Path("cfg/huge.json").write_text(json.dumps(config))
    Path("cfg/cut.gguf").write_bytes(b"GGUF")
    Path("empty.parquet").write_bytes(b"")
    Path("ok.toml").write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru"]\ncapacity = [2]\n')
    Path("s.toml").write_text('traces = ["empty.parquet"]\nkind = "hitrate"\n[axes]\npolicy = ["lru"]\n'
                              'capacity = [2]\n')
    Path("folder.parquet").mkdir()
    Path("layers.toml").write_text("[cache]\ncapacity = [2, 3]\n")  # found wrong only against the trace
    Path("nine.toml").write_text("[cache]\ncapacity = 9\n[workload]\nbatch = 64\n")
    Path("text.npz").write_text("not a model")  # numpy reads it as a pickle and suggests unpickling it
    for args, message in [
        (("trace", "info", "nocol.parquet"), "nocol.parquet: no 'experts' column; a trace has seq, step, phase"),
        (("trace", "import", "nan.jsonl", "--format", "vllm-jsonl", "--out", "n.parquet"),
         "nan.jsonl:5: NaN is not JSON"),
        (("plan", "--model", "cfg/cut.json", "--hardware", "rtx4090"), "cfg/cut.json: line 3, column 1: not valid JSON"),
        (("plan", "--model", "cfg/huge.json", "--hardware", "rtx4090"),
         "cfg/huge.json: hidden_size must be a whole number in 1..2147483647"),
        (("plan", "--model", "cfg/cut.gguf", "--hardware", "rtx4090"), "error: cfg/cut.gguf: "),  # as given
        (("trace", "synth", *SMALL, "--prompt-tokens", "-3", "--out", "t.parquet"), "--prompt-tokens must be 0 or more"),
        (("sweep", "s.toml", "--out", "r.parquet"), "empty.parquet: not a Parquet file"),
        (("trace", "info", "folder.parquet"), "folder.parquet: a folder, not a trace file"),
        (("sim", "hitrate", "bundled", "--policy", "ml-ffn", "--ml-model", "text.npz", "--capacity", "4"),
         "text.npz: not a readable ml-ffn model file (an npz archive of arrays"),
        (("sim", "run", "bundled", "--dtype", "q4_k", "--strategy", "cpu-experts", "--cpu-layers", "20,,24"),
         "--cpu-layers 20,,24: an empty entry"),
        (("train", "ml-ffn", "bundled", "--capacity", "0", "--out", "m.npz"),
         "capacity 0 keeps no expert cache, and a hit rate counts a cache's hits: give at least 1 slot"),
        (("train", "ml-ffn", "bundled", "--capacity", "-2", "--out", "m.npz"), "--capacity must be at least 0, got -2"),
        (("hardware", "--show", "rtx4090", "--json", "--save", "h.txt"), "unknown hardware file format '.txt'"),
        (("trace", "synth", *SMALL, "--out", "t.csv"), "unknown trace format '.csv' (use .parquet)"),
        (("sweep", "ok.toml", "--out", "r.csv"), "unknown results format '.csv' (use .parquet)"),
        (("hardware", "--template", "--save", "h.toml"), "--template prints a commented hardware file to edit"),
        (("train", "ml-ffn", "bundled", "--out", "m.txt"), "unknown model format '.txt' (use .npz)"),
        (("calibrate", "--model", "olmoe-1b-7b", "--backend", "virtual", "--out", "c.toml"),
         "calibration measures a machine: backend cpu or cuda, not 'virtual'"),
        (("sim", "hitrate", "bundled", "--config", "layers.toml"),
         "layers.toml: [cache] capacity lists 2 layers' slots, the trace has 32 layers"),
        (("sim", "hitrate", "bundled", "--config", "nine.toml"), "nine.toml: capacity 9 is more than the 8 experts"),
        (("sim", "run", "bundled", "--config", "nine.toml", "--capacity", "4"),
         "nine.toml: batch 64 is more than the trace's 2 sequence(s)"),
        (("sim", "run", "bundled", "--config", "nine.toml", "--capacity", "4", "--batch", "64"),
         "error: --batch 64 is more than the trace's 2 sequence(s)"),  # typed here: no file named
        (("plan", "--model", "qwen3-30b-a3b", "--hardware", "rtx4080", "--batch", "10000000"),
         "a synthetic trace of 20000000 sequences, 128 tokens each, is what --batch 10000000 plans on"),
    ]:
        assert message in one_line_error(cli, *args), args
    assert not {"n.parquet", "t.parquet", "r.parquet", "m.npz"} & {p.name for p in tmp_path.iterdir()}
    code, out, _ = cli("hardware", "--show", "rtx4090", "--json")  # --show's JSON: the machine's fields
    shown = json.loads(out)
    assert code == 0 and shown["gpu"]["name"] == "RTX4090"
    # and the rates the tables derive from them: 1008 GB/s x 0.8 reached, PCIe 4's 32 GB/s x 0.8
    assert shown["gpu"]["hbm_reached_gbps"] == pytest.approx(806.4) and shown["link"]["effective_gbps"] == 25.6
    assert shown["cpu"]["workers"] == 16 and shown["cpu"]["dram_reached_gbps"] < shown["cpu"]["dram_gbps"] == 83.2


def test_the_api_takes_a_trace_or_its_file_and_names_what_it_cannot_take(mixtral):
    """A notebook user passed a path, None or a number where a Trace goes, and an int as the hardware: each was an
    AttributeError from deep inside; plan's dtypes as one string were split into characters."""
    import moesim

    assert moesim.hitrate("bundled", "lru", 4).hits == moesim.hitrate(mixtral, "lru", 4).hits
    for call, message in ((lambda: moesim.hitrate(5, "lru", 4), "trace must be a Trace .* got int"),
                          (lambda: moesim.simulate(None, capacity=4, dtype="q4_k"), "got NoneType"),
                          (lambda: moesim.simulate(mixtral, capacity=4, dtype="q4_k", hardware=123),
                           "hardware must be a name, a file or a Hardware, got int"),
                          (lambda: moesim.best_split(mixtral, float("nan"), "lru"), "budget must be a whole number"),
                          # a TypeError from deep inside before 2026-11-27
                          (lambda: moesim.load_trace(3), "a trace file is named by a path, got int 3"),
                          (lambda: moesim.synth_trace(2, 8, 2, "3", 10), "sequences must be an integer, got '3'"),
                          (lambda: moesim.synth_trace(2, 8, 2, 3, 10.0), "tokens must be an integer, got 10.0"),
                          (lambda: moesim.plan("mixtral-8x7b", "rtx4090", dtypes=4),
                           "dtypes must be a weight format's name or a list of them, got 4"),
                          (lambda: moesim.load_trace(None), "a trace file is named by a path, got None"),
                          (lambda: moesim.synth_trace(16, 64, 8, 2, 8, model=5), "a model is a preset's name"),
                          (lambda: moesim.synth_trace(16, 64, 8, 2, 8, locality="x"), "locality must be a moesim"),
                          # a trace labelled OLMoE with 4 layers of 8 experts ran as OLMoE: the command line refuses it
                          (lambda: moesim.synth_trace(4, 8, 2, 2, 32, model="olmoe-1b-7b"),
                           "olmoe-1b-7b has 16 layers, 64 experts and top-8; a trace of it cannot have 4, 8 and top-2")):
        with pytest.raises(MoesimError, match=message):
            call()
    one = moesim.plan("mixtral-8x7b", "rtx4090", dtypes="q4_k", trace=mixtral)
    assert {r.dtype for r in one.rows} == {"q4_k"}


def test_recording_refuses_sampling_values_that_are_no_numbers():
    from moesim.tracegen.record import RecordOptions

    for options, message in ((dict(temperature=float("nan")), "temperature must be a finite number >= 0"),
                             (dict(temperature=-1.0), "temperature must be"), (dict(top_p=2.0), "top_p must be"),
                             (dict(top_p=0.0), "top_p must be")):
        with pytest.raises(MoesimError, match=message):
            RecordOptions(**options)


def test_a_sweep_refuses_a_flush_interval_that_is_not_a_number_of_seconds(tmp_path):
    from moesim.experiments.sweep import SweepSpec, run_sweep

    spec = SweepSpec(tmp_path / "s.toml", "hitrate", ["bundled"], {"policy": ["lru"], "capacity": [2]}, {})
    for seconds in (float("nan"), -1.0, float("inf")):
        with pytest.raises(MoesimError, match="must be a number of seconds >= 0"):
            run_sweep(spec, tmp_path / "r.parquet", flush_seconds=seconds)
    assert not list(tmp_path.iterdir())


def test_an_output_the_system_refuses_is_one_line_and_leaves_nothing(cli, tmp_path, monkeypatch):
    """/proc passes the writability check as root and then refuses the temporary file; a rename can fail too (a
    full disk, a file system gone read-only): each is one line naming the output, nothing left behind."""
    err = one_line_error(cli, "trace", "synth", *SMALL, "--out", "/proc/moesim-test.parquet")
    assert err.startswith("moesim: error: /proc/moesim-test.parquet: ")
    from moesim.files import atomic_output

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(MoesimError, match=r"^.*out\.txt: cannot be written \(No space left on device\)$"):
        with atomic_output(tmp_path / "out.txt") as tmp:
            tmp.write_text("x")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_folder_is_refused(cli, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    assert "permission denied" in one_line_error(cli, "trace", "synth", *SMALL, "--out", locked / "t.parquet")


def test_json_has_null_where_a_number_is_undefined(cli, tmp_path):
    trace = tmp_path / "moe.parquet"
    assert cli("trace", "synth", "--model", "moe-160m-10e", "--sequences", "1", "--tokens", "4", "--out", trace)[0] == 0
    code, out, err = cli("sim", "run", trace, "--model", "mole-160m-4e", "--json")
    assert code == 0, err
    row = json.loads(out, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))["results"][0]
    assert row["hit_rate"] is None and row["tpot_s"] > 0  # MoLE has no expert accesses


def test_help_keeps_its_brackets_and_usage_errors_are_one_line(cli):
    import re

    _, out, _ = cli("sweep", "--help")
    assert "moesim[ray]" in re.sub(r"\s+", "", out)
    _, out, _ = cli("trace", "synth", "--help")
    assert "[default: --model's / --like's]" in re.sub(r"\s+", " ", out).replace("│ ", "")
    assert "Missing argument 'TRACE'" in one_line_error(cli, "sim", "run", code=2)
    assert "No such option" in one_line_error(cli, "sim", "run", bundled_trace_path(), "--capacityy", "4", code=2)
    assert "Invalid value for '--batch'" in one_line_error(cli, "sim", "run", bundled_trace_path(), "--batch", "x",
                                                           code=2)


def test_the_golden_command_outside_the_repository_says_the_file_is_missing(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "no golden table here" in one_line_error(cli, "sim", "golden")


def test_values_that_would_give_silently_wrong_numbers_are_refused(mixtral):
    from moesim import hitrate, simulate

    for call, message in ((lambda: simulate(mixtral, batch=3), "batch=3 is more than the trace's 2 sequence(s)"),
                          (lambda: simulate(mixtral, capacity=9), "capacity=9 is more than the 8 experts per layer"),
                          (lambda: hitrate(mixtral, "lru", 257, "global"), "more than the 256 experts in all 32"),
                          (lambda: simulate(mixtral, context=-1), "context must be at least 0")):
        with pytest.raises(MoesimError, match=message.replace("(", r"\(").replace(")", r"\)")):
            call()


@pytest.mark.parametrize("table, message", [
    ("[link]\ngbps = nan", "gbps must be a finite number > 0, got nan"),
    ("[link]\ngbps = inf", "gbps must be a finite number > 0, got inf"),
    ("[link]\ngbps = 0", "gbps must be a finite number > 0"),
    ("[link]\ngbps = 32\nefficiency = 1.5", "efficiency must be a fraction in (0, 1]"),
    ("[link]\ngbps = 32\nengines = 2.5", "engines must be a whole number of copy engines, 1..64"),
    ("[link]\ngbps = 32\nengines = 0", "engines must be a whole number"),
    ("[link]\ngbps = 32\nlatency_us = -1", "latency_us must be a finite number >= 0"),
    ("[link]\ngbps = true", "gbps must be a finite number > 0, got True"),
    ('[link]\ngbps = 32\n[compute]\nname = "olmoe-1b-7b"\nlayer_s = 1e-4\nexpert_s = -1e-5', "expert_s must be"),
])
def test_hardware_numbers_are_checked(cli, tmp_path, table, message):
    path = tmp_path / "hw.toml"
    path.write_text('gpu = "rtx4090"\n' + table + "\n")
    err = one_line_error(cli, "sim", "run", bundled_trace_path(), "--hardware", path)
    assert str(path) in err and message in err


def test_a_calibration_that_fitted_a_negative_bandwidth_is_not_written(tmp_path):
    from dataclasses import replace

    from moesim.sim.hardware import get_hardware, write_hardware

    hw = get_hardware("rtx4090")
    with pytest.raises(MoesimError, match="gbps must be a finite number > 0, got -3.0"):
        write_hardware(replace(hw, link=replace(hw.link, gbps=-3.0)), tmp_path / "hw.toml")
    assert not list(tmp_path.iterdir())


def test_trace_metadata_and_weights_are_checked(tmp_path):
    import polars as pl

    from moesim.tracegen.io import load_trace, write_trace
    from moesim.tracegen.schema import METADATA_KEY
    from moesim.tracegen.synth import synth_trace

    trace = synth_trace(2, 4, 2, 1, 3, seed=0)
    path = tmp_path / "t.parquet"
    write_trace(trace, path)
    frame = pl.read_parquet(path)
    meta = json.loads(pl.read_parquet_metadata(path)[METADATA_KEY])
    for change, message in (({"schema_version": "1"}, "schema_version must be a positive integer"),
                            ({"expert_bytes": 0}, "expert_bytes must be an integer in 1.."),
                            ({"num_experts": 10 ** 9}, "num_experts must be an integer in 1..32767"),
                            ({"bytes_per_param": float("nan")}, "bytes_per_param must be a finite number"),
                            ({"model": ["x"]}, "model must be a string")):
        frame.write_parquet(path, metadata={METADATA_KEY: json.dumps({**meta, **change})})
        with pytest.raises(MoesimError, match=message):
            load_trace(path)
    frame.write_parquet(path, metadata={METADATA_KEY: "[1, 2]"})
    with pytest.raises(MoesimError, match="must be a JSON object"):
        load_trace(path)
    weights = np.full(trace.experts.shape, 0.5, np.float32)
    weights[1, 0, 1] = -0.25
    with pytest.raises(MoesimError, match=r"row 2 \(seq 0, step 1, layer 0\): weights value -0.25 is not a gate"):
        write_trace(trace.__class__(**{**trace.__dict__, "weights": weights}), tmp_path / "w.parquet")
    assert not (tmp_path / "w.parquet").exists()
    weights[1, 0] = [np.nan, 0.5]  # a row's weights are all given or all missing (NaN): never in part
    with pytest.raises(MoesimError, match=r"row 2 \(seq 0, step 1, layer 0\): weights NaN in 1 of its 2 values"):
        write_trace(trace.__class__(**{**trace.__dict__, "weights": weights}), tmp_path / "w.parquet")
    weights[1, 0] = np.nan
    write_trace(trace.__class__(**{**trace.__dict__, "weights": weights}), tmp_path / "w.parquet")
    assert np.isnan(load_trace(tmp_path / "w.parquet").weights[1, 0]).all()


def _sweep(tmp_path, jobs: int) -> subprocess.Popen:
    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled"]\nkind = "des"\n[axes]\npolicy = ["lru", "fifo", "lfu"]\n'
                    f'capacity = [2, 3, 4, 5, 6, 7, 8]\ncontext = {list(range(0, 40000, 100))}\n')
    return subprocess.Popen([sys.executable, "-m", "moesim", "sweep", str(spec), "--out", str(tmp_path / "r.parquet"),
                             "--jobs", str(jobs), "--flush-seconds", "0.2"], stderr=subprocess.PIPE, text=True)


def _wait(condition, seconds=120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_kill_leaves_no_partial_output(tmp_path):
    """SIGTERM (``kill``, ``timeout``, a scheduler's stop) ended the process on the spot: a trace being written stayed
    as its hidden temporary file (and a llama.cpp calibration's scratch folder, 1-2 GB). The command unwinds now, as
    after Ctrl-C (``moesim.errors.unwind``), and the temporary file goes."""
    proc = subprocess.Popen([sys.executable, "-m", "moesim", "trace", "synth", "--layers", "16", "--experts", "64",
                             "--top-k", "8", "--sequences", "4", "--tokens", "100000", "--out",
                             str(tmp_path / "big.parquet")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _wait(lambda: any(tmp_path.iterdir()) or proc.poll() is not None)  # the write has begun
    assert proc.poll() is None, "the trace was written before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM and not list(tmp_path.iterdir())


def test_ctrl_c_stops_a_sweep_with_the_resume_hint(tmp_path):
    proc = _sweep(tmp_path, jobs=1)
    _wait(lambda: (tmp_path / "r.parquet").exists() or proc.poll() is not None)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "run it again with --resume" in err and err.count("\n") == 1, err


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def test_workers_exit_when_the_sweep_is_killed(tmp_path):
    proc = _sweep(tmp_path, jobs=2)
    _wait(lambda: (tmp_path / "r.parquet").exists() or proc.poll() is not None)
    workers = [p for p in _children(proc.pid) if "multiprocessing" in Path(f"/proc/{p}/cmdline").read_text()]
    assert proc.poll() is None and workers
    proc.kill()
    proc.wait()
    _wait(lambda: not any(Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split()[2]
                          for p in workers), seconds=30)


def test_a_killed_replays_folder_is_removed_by_the_next_one(tmp_path):
    from moesim.replay.scratch import scratch_folder

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"moesim-replay-{int(dead.stdout)}-abc"
    (stale / "layer0").mkdir(parents=True)
    mine = tmp_path / f"moesim-replay-{os.getpid()}-keep"
    mine.mkdir()
    fresh = scratch_folder(tmp_path, "replay")
    assert not stale.exists() and mine.exists() and fresh.name.startswith(f"moesim-replay-{os.getpid()}-")


def test_tables_wrap_rather_than_cut_numbers_on_a_narrow_terminal():
    env = {**os.environ, "COLUMNS": "60"}
    for args in (["trace", "info", str(bundled_trace_path())], ["models"], ["hardware"],
                 ["sim", "hitrate", str(bundled_trace_path()), "--policy", "belady,lru,gamma-admit"]):
        out = subprocess.run([sys.executable, "-m", "moesim", *args], env=env, capture_output=True, text=True,
                             check=True).stdout
        assert "…" not in out, args


def test_a_synthetic_trace_too_large_for_memory_is_refused_before_allocating(cli, tmp_path):
    err = one_line_error(cli, "trace", "synth", "--sequences", "100000", "--tokens", "100000",
                         "--out", tmp_path / "huge.parquet")
    assert "GB of memory is free" in err and not list(tmp_path.iterdir())


def test_free_memory_counts_the_page_cache_the_kernel_gives_back(tmp_path, monkeypatch):
    """Memory checks read MemAvailable, not MemFree: once files have been written the page cache holds most of the
    RAM and MemFree falls to little, and a replay refused itself for want of 100 MB on a 24 GB machine."""
    from moesim import host
    from moesim.replay.cpu import check_fits
    from moesim.tracegen.models import get_model

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\nMemFree:           51200 kB\nMemAvailable:   24117248 kB\n")
    monkeypatch.setattr(host, "MEMINFO", str(meminfo))
    assert host.available_ram() == 24117248 * 1024
    from dataclasses import replace

    # a cut model as a replay makes it: 8 buffers and one layer of 64 experts in RAM, 113 MB, more than MemFree's half
    model = replace(get_model("olmoe-1b-7b"), num_layers=2, d_model=512, d_expert=256)
    assert check_fits(model, 8, tmp_path) is None
    meminfo.write_text("MemTotal:       25165824 kB\nMemFree:           51200 kB\n")  # no MemAvailable (before Linux 3.14)
    assert host.available_ram() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    meminfo.unlink()
    assert host.available_ram() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def test_recording_on_a_device_torch_does_not_know_is_one_line(cli, tmp_path):
    pytest.importorskip("torch")
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\n")
    err = one_line_error(cli, "trace", "record", "--model", "tiny-olmoe", "--prompts", prompts, "--device", "tpu",
                         "--out", tmp_path / "r.parquet")
    assert "--device tpu: torch cannot compute on it here" in err and not (tmp_path / "r.parquet").exists()


def test_a_setting_no_run_reads_is_refused_not_ignored(cli, tmp_path):
    """A cache setting typed for a strategy without a cache, threads for one that computes nothing on the CPU, an
    acceptance with no draft tokens, a llama.cpp-only option without --engine, more threads than cores: each changed
    nothing the user saw, and is now one line."""
    import moesim

    for args, words in (
            (["--strategy", "cpu-experts", "--capacity", "16"], "--capacity: strategy cpu-experts keeps no expert "
                                                                "cache (it places experts: "
                                                                "--cpu-layers), so nothing reads it"),
            (["--strategy", "cpu-experts", "--policy", "lru,belady"], "--policy: strategy cpu-experts"),
            (["--capacity", "0", "--policy", "lru,belady"], "--policy: --capacity 0 keeps no expert cache"),
            (["--strategy", "cpu-experts", "--threads", "17"], "--threads 17: more threads than the Ryzen-7950X's 16 cores; the model computes "
                                  "with one thread a core at most (leave it out for every core)"),  # not 0: refused
            (["--threads", "2"], "--threads: strategy gpu-cache computes no expert on the host CPU (the strategies "
                                 "that do: cpu-experts, cpu-miss, hybrid), so nothing reads it"),
            (["--strategy", "lowbit-miss", "--threads", "2"], "--threads: strategy lowbit-miss computes no expert"),
            (["--ssd", "pcie5-nvme"], "--ssd: with no --dram-capacity (the experts host RAM holds in front of the "
                                      "SSD) every expert is in host RAM, so nothing reads it"),
            (["--hardware", "ryzen-7950x", "--kernel", "per-expert"], "--kernel: ryzen-7950x has no GPU (every expert "
                                                                      "runs on the CPU), so nothing reads it"),
            # more DRAM slots than experts: host RAM was charged for 1000, the times those of 256
            (["--dtype", "q4_k", "--capacity", "2", "--ssd", "pcie5-nvme", "--dram-capacity", "1000"],
             "--dram-capacity 1000 is more than the 256 experts of mixtral-8x7b (32 layers of 8)")):
        assert words in one_line_error(cli, "sim", "run", "bundled", *args), args
    # burst arrivals, one request per sequence and no drafts draw nothing: the seed of the draws is not read
    assert "--arrival-seed: --arrivals burst puts every request at time 0, one per sequence in order, and no run " \
        "drafts tokens: nothing is drawn, so nothing reads it" in one_line_error(
            cli, "sim", "serve", "bundled", "--arrivals", "burst", "--arrival-seed", "3")
    with pytest.raises(moesim.MoesimError, match="^arrival_seed: arrivals='burst' puts every request at time 0"):
        moesim.serve(moesim.load_trace("bundled"), arrivals="burst", arrival_seed=3)
    # --like fits the locality knobs and takes the trace's model: a knob or a model typed beside it is not read
    assert "--reuse, --model: --like fits the locality knobs to " in one_line_error(
        cli, "trace", "synth", "--like", "bundled", "--model", "olmoe-1b-7b", "--reuse", "0.9", "--out",
        tmp_path / "like.parquet")
    assert not (tmp_path / "like.parquet").exists()
    # a machine without a GPU computes everything on its CPU, with the threads given (and llama.cpp's CPU build)
    code, out, err = cli("sim", "run", "bundled", "--hardware", "ryzen-7950x", "--threads", "4", "--json")
    row = json.loads(out)["results"][0] if code == 0 else {}
    assert (row.get("strategy"), row.get("threads")) == ("cpu-experts", 4), err
    code, out, err = cli("sim", "run", "bundled", "--hardware", "ryzen-7950x", "--cpu-layers", "32", "--json")
    assert code == 0 and json.loads(out)["results"][0]["cpu_layers"] == 32, err  # cpu-experts' parameter, taken
    # a saved configuration holds every setting: its capacity is not the user's, and a strategy typed over it runs
    saved = tmp_path / "run.toml"
    assert cli("sim", "run", "bundled", "--capacity", "auto", "--dtype", "q4_k", "--save-config", saved)[0] == 0
    code, out, err = cli("sim", "run", "bundled", "--config", saved, "--strategy", "cpu-experts", "--json")
    assert code == 0 and json.loads(out)["results"][0]["strategy"] == "cpu-experts", err
    # typed over a saved file, whose settings are all there: still checked (the typed ones)
    cpu = tmp_path / "cpu.toml"
    assert cli("sim", "run", "bundled", "--strategy", "cpu-experts", "--save-config", cpu)[0] == 0
    assert "--capacity: strategy cpu-experts" in one_line_error(cli, "sim", "run", "bundled", "--config", cpu,
                                                                "--capacity", "16")
    # a CPU-only machine runs llama.cpp's CPU build (cpu-experts) unless a strategy or a cache is asked for: a typed
    # cache keeps gpu-cache, which such a machine refuses, naming the strategies it runs
    assert "has no GPU: every expert runs on its CPU; use --strategy cpu-experts, or hybrid with --capacity 0" in \
        one_line_error(cli, "sim", "run", "bundled", "--hardware", "ryzen-7950x", "--capacity", "16", "--policy",
                       "belady")
    # a file's cpu-experts does not stop the commands that never read the strategy from reading the cache
    for args in (["sim", "hitrate", "bundled", "--capacity", "2"], ["sim", "mrc", "bundled", "--policy", "lru"],
                 ["plan", "--model", "mixtral-8x7b", "--hardware", "rtx4090", "--split", "best"]):
        code, _, err = cli(*args, "--config", cpu, "--json")
        assert code == 0, (args, err)
    assert "--policy, --gamma: strategy cpu-experts" in one_line_error(cli, "sim", "run", "bundled", "--strategy",
                                                                       "cpu-experts", "--policy", "gamma", "--gamma",
                                                                       "0.5")
    assert "--acceptance: with --draft-tokens 0 no run drafts a token to accept, so nothing reads it" in one_line_error(
        cli, "sim", "serve", "bundled", "--rate", "1", "--requests", "2", "--acceptance", "0.5")
    assert "--acceptance: with --draft-tokens 0" in one_line_error(cli, "sim", "serve", "bundled", "--config", cpu, "--rate",
                                                          "1", "--requests", "2", "--acceptance", "0.5")
    assert "--threads: only with --engine llama.cpp" in one_line_error(
        cli, "calibrate", "--model", "olmoe-1b-7b", "--out", tmp_path / "hw.toml", "--threads", "2")
    assert "--threads, --runs: only with --engine llama.cpp" in one_line_error(
        cli, "validate", "bundled", "--threads", "1,2", "--runs", "3")
    trace = moesim.load_trace("bundled")
    with pytest.raises(moesim.MoesimError, match="^capacity: strategy cpu-experts keeps no expert cache"):
        moesim.simulate(trace, strategy="cpu-experts", capacity=16)
    with pytest.raises(moesim.MoesimError, match="^threads: strategy gpu-cache computes no expert"):
        moesim.serve(trace, rate=1, requests=2, threads=2)
    # read where the CPU computes experts: two threads unpack Q4_K weights at half one's time (not DRAM-bound)
    one, two = (moesim.simulate(trace, strategy="cpu-experts", threads=n, dtype="q4_k").cpu_s for n in (1, 2))
    assert two == pytest.approx(one / 2, rel=1e-12)
    with pytest.raises(moesim.MoesimError, match="^acceptance: with draft_tokens=0 no run drafts a token to accept"):
        moesim.serve(trace, rate=1, requests=2, acceptance=0.5)
    from moesim.sim.config import Config

    hits = moesim.hitrate(trace, "lru", 4).hits  # a hit-rate run reads the cache, whatever the strategy
    assert moesim.hitrate(trace, "lru", 4, config=Config.build(strategy="cpu-experts")).hits == hits
    hw = tmp_path / "many.toml"
    hw.write_text('[cpu]\nname = "x"\ncores = 8\nghz = 3.0\nisa = "avx2"\ndram_gbps = 50\nram_gb = 64\nthreads = 16\n')
    assert f"{hw}: [cpu] threads = 16: more threads than the x's 8 cores" in one_line_error(
        cli, "sim", "run", "bundled", "--hardware", hw)
    assert sorted(tmp_path.iterdir()) == sorted([saved, cpu, hw])


def test_a_stream_too_large_for_memory_is_one_line(cli, tmp_path, monkeypatch):
    """A billion requests were a numpy traceback; the queue is refused before it is allocated, and running out of
    memory past the checks made before allocating is one line too."""
    from moesim.sim import serve

    monkeypatch.setattr(serve, "available_ram", lambda: 24e9)  # as on CI; a larger machine would run it for days
    out = tmp_path / "s.parquet"
    err = one_line_error(cli, "sim", "serve", "bundled", "--rate", "1", "--requests", "1000000000", "--out", out)
    needed = re.search(r"--requests 1,000,000,000: their queue alone needs ([\d.]+) GB and 24.0 GB of memory is free",
                       err)
    assert needed and float(needed.group(1)) > 24, err  # a billion requests' arrival times alone take 8 GB
    assert not out.exists()

    def exhausted(*_, **__):
        raise MemoryError("Unable to allocate 7.45 GiB for an array with shape (1000000000,) and data type float64")

    monkeypatch.setattr(serve, "make_queue", exhausted)
    err = one_line_error(cli, "sim", "serve", "bundled", "--rate", "1", "--requests", "4", "--out", out)
    assert err.startswith("moesim: error: out of memory (Unable to allocate 7.45 GiB") and not out.exists()


def test_a_replay_folder_without_space_is_named(cli, tmp_path):
    """``--workdir /proc`` said the model's experts (0.0 GB) did not fit its 0.0 GB and to cut the model."""
    err = one_line_error(cli, "replay", "bundled", "--model", "mixtral-8x7b", "--layers", "1", "--scale", "0.01",
                         "--capacity", "2", "--workdir", "/proc")
    assert "/proc: no free space for the expert files; give --workdir a folder with free space" in err


def test_a_global_curve_of_several_policies_is_one_table(cli):
    """``sim mrc --scope global`` gave a KeyError traceback: a policy run per capacity (LRU and static under step
    semantics) takes 64 of the pool's 256 capacities, a stack algorithm (Belady) every one, and the table looked up
    capacities one of them lacked. The table now has the capacities every curve ran; the JSON each curve whole."""
    code, out, err = cli("sim", "mrc", "bundled", "--policy", "lru", "--scope", "global", "--json")
    assert code == 0, err
    by_policy: dict = {}
    for r in json.loads(out)["results"]:
        by_policy.setdefault(r["policy"], []).append(r["capacity"])
    assert set(by_policy) == {"lru", "belady", "static"} and len(by_policy["lru"]) == 64
    assert by_policy["lru"] == by_policy["static"] and set(by_policy["lru"]) < set(by_policy["belady"])
    code, out, err = cli("sim", "mrc", "bundled", "--policy", "lru", "--scope", "global")
    rows = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
    assert code == 0 and "the capacities every curve ran" in " ".join(out.split()), err
    assert sorted(map(int, rows)) == sorted(by_policy["lru"])


def test_the_api_makes_no_folders_and_checks_training_settings(tmp_path):
    import moesim

    trace = moesim.load_trace("bundled")
    with pytest.raises(moesim.MoesimError, match="absent/x.parquet: no such folder"):
        moesim.write_trace(trace, tmp_path / "absent" / "x.parquet")
    from moesim.tracegen.importers import import_trace

    log = tmp_path / "t.csv"
    log.write_text("seq,step,layer,e0\n0,0,0,1\n")
    with pytest.raises(moesim.MoesimError, match="absent/t.parquet: no such folder"):  # a FileNotFoundError
        import_trace(log, "csv", tmp_path / "absent" / "t.parquet")
    log.unlink()
    for options, message in (({"horizon": 0}, "horizon=0: must be a whole number, 1 or more"),
                             ({"val_fraction": math.nan}, "val_fraction=nan: the share of sequences held out"),
                             ({"epochs": 2.5}, "epochs=2.5: must be a whole number")):
        with pytest.raises(moesim.MoesimError, match=message):
            moesim.train_ml_ffn(trace, tmp_path / "m.npz", **options)
    with pytest.raises(moesim.MoesimError, match="no such folder"):
        moesim.train_ml_ffn(trace, tmp_path / "absent" / "m.npz")
    with pytest.raises(moesim.MoesimError, match="a plan needs at least one weight format"):
        moesim.plan("mixtral-8x7b", "rtx4090", dtypes=[])  # it said 'no strategy runs mixtral-8x7b: 
    assert list(tmp_path.iterdir()) == []


def test_validate_checks_every_configuration_before_it_measures(cli, monkeypatch):
    """An unknown policy among validate's was found only after calibration had timed the machine (seconds, and on a
    noisy host an error about its speed instead): every configuration is built first, the error naming the option
    as typed."""
    import moesim.replay.prepare as prepare

    def measured(*args, **kwargs):
        raise AssertionError("calibrated before the configurations were checked")

    monkeypatch.setattr(prepare, "prepare", measured)
    assert "--policies must be one of belady, lru, " in one_line_error(
        cli, "validate", "bundled", "--policies", "lru,nope", "--layers", "2", "--scale", "0.05")


def test_a_replay_that_will_not_fit_is_refused_before_calibration(cli, monkeypatch):
    """The README's replay without a hardware file calibrated this machine for minutes, then said the run needs more
    memory than the calibrated machine has: sized first on a machine with the memory calibration would give it (here
    half a GiB of host RAM for the cpu backend), it is refused before anything is measured or written, in the
    backend's words, naming the option as typed."""
    import moesim.replay.prepare as prepare

    def measured(*args, **kwargs):
        raise AssertionError("calibrated before the memory was checked")

    monkeypatch.setattr(prepare, "calibrate", measured)
    monkeypatch.setattr(prepare, "device_memory_gb", lambda backend: 0.5)
    line = one_line_error(cli, "replay", "bundled", "--policy", "lru", "--capacity", "8", "--backend", "cpu",
                          "--layers", "2", "--scale", "0.1")
    assert line.startswith("moesim: error: backend cpu (host RAM holds what the simulated GPU would): mixtral-8x7b@x0.1 "
                           "with 8 experts per layer on the GPU (gpu-cache) needs ")
    assert line.endswith("the GPU has 0.5 GiB; use --capacity auto, a smaller --dtype or another --strategy (see "
                         "'moesim plan')\n")


def test_a_replay_of_cpu_layers_that_fits_goes_on_to_calibrate(cli, monkeypatch):
    """The check before calibration sizes a strategy that computes on the CPU too (on this host's RAM): one that fits
    goes on to calibrate, as before the check was there."""
    import moesim.replay.prepare as prepare

    class Calibrating(Exception):
        pass

    def measured(*args, **kwargs):
        raise Calibrating

    monkeypatch.setattr(prepare, "calibrate", measured)
    with pytest.raises(Calibrating):
        cli("replay", "bundled", "--strategy", "cpu-experts", "--cpu-layers", "1", "--backend", "cpu", "--layers",
            "2", "--scale", "0.05")


def test_an_option_given_twice_is_refused_not_overwritten(cli, tmp_path, monkeypatch):
    """click keeps the last of an option given twice and says nothing: `--capacity 4 --capacity 8` ran at 8 alone.
    Refused as a usage error (status 2), naming both values; an alias and a switch's --no- form count as the same
    option, and a value that looks like an option's name is a value."""
    for args, message in (
            (["sim", "run", "bundled", "--capacity", "4", "--capacity", "8"],
             "--capacity given twice (4, then 8): an option takes one value, and the last would win unseen; give it "
             "once (several runs: --capacity 4,8)"),
            # an option of one value is not offered a list
            (["trace", "synth", "--layers", "2", "--layers", "0", "--out", "x.parquet"],
             "--layers given twice (2, then 0): an option takes one value, and the last would win unseen; give it "
             "once\n"),
            (["sim", "hitrate", "bundled", "--capacity=4", "--policy", "lru", "--capacity", "6"],
             "--capacity given twice (4, then 6)"),
            (["validate", "bundled", "--policy", "lru", "--policies", "lfu"],
             "--policy and --policies both given (lru, then lfu)"),
            (["sim", "run", "bundled", "--reset", "--no-reset"], "--reset and --no-reset both given: give one"),
            (["trace", "info", "bundled", "--json", "--json"], "--json given twice: give it once")):
        code, out, err = cli(*args)
        assert code == 2 and out == "" and err.startswith(f"moesim: error: {message}") and err.count("\n") == 1, \
            (args, err)
    # a value is not an option: an output named "--out" is the value of the one --out
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("trace", "synth", "--layers", "2", "--experts", "4", "--top-k", "2", "--sequences", "1",
                       "--tokens", "4", "--out", "--out.parquet")
    assert code == 0 and (tmp_path / "--out.parquet").exists(), err


def test_a_virtual_replay_refuses_a_workdir_it_never_writes(cli, tmp_path):
    """The virtual backend replays the simulator's own times and writes no expert files: a --workdir was ignored."""
    import moesim

    for command in ("replay", "validate"):
        assert "--workdir: backend virtual replays the simulator's own times and writes no expert files, so nothing " \
               "reads it" in one_line_error(cli, command, "bundled", "--backend", "virtual", "--dtype", "q4_k",
                                            "--workdir", tmp_path)
    with pytest.raises(moesim.MoesimError, match="^workdir: backend virtual"):
        moesim.run_replay(moesim.load_trace("bundled"), backend="virtual", capacity=4, dtype="q4_k", workdir=tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_mole_model_refuses_the_cache_settings_it_never_reads(cli, tmp_path):
    """A MoLE model's experts are lookup tables on the host whose rows each step copies: a capacity, policy,
    prefetcher or kernel typed for it changed nothing, and the table said 'lru, C 4'."""
    import moesim

    trace = tmp_path / "mole.parquet"
    assert cli("trace", "synth", "--model", "mole-160m-4e", "--sequences", "2", "--tokens", "8", "--out", trace)[0] == 0
    unread = "computes its experts as lookup tables on the host, copied a row a step, and keeps no expert cache nor " \
             "runs an expert kernel, so nothing reads"
    assert f"--capacity: model mole-160m-4e {unread} it" in one_line_error(cli, "sim", "run", trace, "--capacity", "4")
    assert f"--policy, --prefetch, --kernel: model mole-160m-4e {unread} them" in one_line_error(
        cli, "sim", "run", trace, "--policy", "lfu", "--prefetch", "oracle", "--kernel", "per-expert")
    assert f"--capacity: model mole-160m-4e {unread} it" in one_line_error(cli, "sim", "serve", trace, "--rate", "1",
                                                                           "--capacity", "4")
    with pytest.raises(moesim.MoesimError, match=f"^policy: model mole-160m-4e {unread} it"):
        moesim.simulate(moesim.load_trace(trace), policy="lfu")
    code, out, err = cli("sim", "run", trace)
    assert code == 0 and "lookup tables on the host" in out and "lru" not in out, err


def test_llamacpp_threads_past_the_cores_are_refused(cli, tmp_path, monkeypatch):
    """calibrate --engine llama.cpp --threads 5 on a 2-core host ran four minutes and wrote per-thread rates of five
    threads time-sharing two cores; validate took them too. Refused before anything runs (llama.cpp included:
    whether or not it is installed here), as everywhere else."""
    import moesim.sim.local_machine as local_machine

    monkeypatch.setattr(local_machine, "physical_cores", lambda text=None: 2)
    message = "--threads 5: more threads than this machine's 2 physical cores (at most the CPUs this process may run " \
              "on); the model computes with one thread a core at most"
    assert message in one_line_error(cli, "calibrate", "--engine", "llama.cpp", "--out", tmp_path / "c.toml",
                                     "--threads", "1,5")
    assert message in one_line_error(cli, "validate", "--engine", "llama.cpp", "--threads", "2,5")
    assert not any(tmp_path.iterdir())


def test_plan_takes_a_format_as_every_command_does(cli, tmp_path):
    """`plan --dtype Q4_K` ended in a KeyError traceback where `sim run` takes it (a format is named in any case), and
    a --config file that set the format, in a KeyError of the option's list."""
    code, out, err = cli("plan", "--model", "mixtral-8x7b", "--dtype", "Q4_K", "--json")
    assert code == 0 and {r["dtype"] for r in json.loads(out)["rows"]} == {"q4_k"}, err
    saved = tmp_path / "q4.toml"
    saved.write_text('[model]\ndtype = "q8_0"\n')
    code, out, err = cli("plan", "--model", "mixtral-8x7b", "--config", saved, "--json")
    assert code == 0 and {r["dtype"] for r in json.loads(out)["rows"]} == {"q8_0"}, err


def test_a_parameter_no_strategy_of_the_run_takes_is_named_as_typed(cli):
    """A strategy's parameter typed for one that does not take it named the section and the internal name
    (`[execution] strategy gpu-cache takes no parameter 'cpu_layers'`), or left the strategies out of its list."""
    for args, message in (
            (["sim", "run", "bundled", "--cpu-layers", "3"], "--cpu-layers: no policy, prefetcher or strategy of this "
                                                             "run takes it (policies lru; prefetchers none; strategies "
                                                             "gpu-cache)"),
            (["sim", "run", "bundled", "--lowbit-threshold", "0.3"], "--lowbit-threshold: no policy, prefetcher or "
                                                                     "strategy of this run takes it"),
            (["sim", "hitrate", "bundled", "--capacity", "4", "--gamma", "0.5"], "--gamma: no policy or prefetcher of "
                                                                                 "this run takes it"),
            (["validate", "bundled", "--policies", ","], "--policies is empty")):
        assert message in one_line_error(cli, *args), args


def test_what_a_second_new_user_sweep_found_is_one_line(cli, tmp_path, monkeypatch):
    """Each of these ran to the end and changed nothing the user saw (a value listed twice ran its row twice, an
    exclude rule that matched no row excluded nothing, --mode without a prefetcher), or
    named the wrong cause (a missing arrivals file, a folder given as a log)."""
    monkeypatch.chdir(tmp_path)
    assert "--capacity 2,2: 2 listed twice; each value is one run" in one_line_error(
        cli, "sim", "hitrate", "bundled", "--capacity", "2,2")
    assert "--mode: --prefetch none makes no prediction whose misses it would follow up, so nothing reads it" in \
        one_line_error(cli, "sim", "run", "bundled", "--mode", "fallback")
    assert "nothere.csv: no such arrivals file" in one_line_error(
        cli, "sim", "serve", "bundled", "--arrivals", "nothere.csv", "--requests", "2", "--dtype", "q4_k")
    (tmp_path / "logs").mkdir()
    assert "logs: a folder, not a vllm-jsonl log" in one_line_error(
        cli, "trace", "import", "logs", "--format", "vllm-jsonl", "--out", "i.parquet")
    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled"]\n[axes]\ncapacity = [2, 3]\n[[exclude]]\ncapacity = 7\n')
    assert "s.toml: [[exclude]] rule 1 (capacity = 7) matches no configuration; a rule matches the values of [axes] " \
           "and [fixed]" in one_line_error(cli, "sweep", spec, "--out", "r.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "s.toml"]


def test_what_the_review_of_the_second_sweep_found(cli, tmp_path):
    """A refused run writes no --save-config file; two equal values of a listed option are not offered as a list; a
    path object of another kind (an os.PathLike) is a path; moesim.plan takes a configuration's format."""
    import moesim

    class Where:  # a path object of another kind than pathlib's
        def __init__(self, path):
            self.path = str(path)

        def __fspath__(self):
            return self.path

    mole = tmp_path / "mole.parquet"
    assert cli("trace", "synth", "--model", "mole-160m-4e", "--sequences", "1", "--tokens", "4", "--out", mole)[0] == 0
    assert "--policy: model mole-160m-4e computes" in one_line_error(
        cli, "sim", "run", mole, "--policy", "lfu", "--save-config", tmp_path / "saved.toml")
    assert not (tmp_path / "saved.toml").exists()
    code, _, err = cli("sim", "hitrate", "bundled", "--policy", "lru", "--policy", "lru")
    assert code == 2 and err.rstrip().endswith("--policy given twice (lru, then lru): an option takes one value, and "
                                               "the last would win unseen; give it once"), err
    local = Where(tmp_path / "c.toml")
    moesim.Config.build(dtype="q8_0").to_toml(local)
    config = moesim.Config.from_toml(local)
    assert {r.dtype for r in moesim.plan("mixtral-8x7b", "rtx4090", config=config).rows} == {"q8_0"}


def test_a_default_that_does_not_fit_the_trace_is_named_as_the_default(cli, tmp_path, monkeypatch):
    """The default --capacity 4 on a top-8 trace read as if the user had typed it ('capacity 4 is below top_k 8')."""
    monkeypatch.chdir(tmp_path)
    assert cli("trace", "synth", "--model", "olmoe-1b-7b", "--sequences", "2", "--tokens", "4", "--out",
               "t.parquet")[0] == 0  # 64 experts, top-8
    for command in (("sim", "run"), ("sim", "hitrate"), ("replay",)):
        assert one_line_error(cli, *command, "t.parquet", *(("--backend", "virtual") if command == ("replay",) else ())
                              ).startswith("moesim: error: --capacity 4 (the default) is below top_k 8: "), command
    assert one_line_error(cli, "sim", "run", "t.parquet", "--capacity", "4").startswith(
        "moesim: error: --capacity 4 is below top_k 8")


def test_a_format_listed_twice_in_other_letters_is_refused_and_echoed_as_typed(cli):
    """Q4_K is q4_k (as llama.cpp writes it): listed beside it, it ran one row silently; an unknown one was
    echoed lowered."""
    assert one_line_error(cli, "plan", "--model", "olmoe-1b-7b", "--dtype", "q4_k,Q4_K") == (
        "moesim: error: --dtype q4_k,Q4_K: Q4_K listed twice; each value is one run\n")
    assert one_line_error(cli, "sim", "run", "bundled", "--dtype", "Q4_K,q8_0").startswith(
        "moesim: error: --dtype must be one of fp32, ")
