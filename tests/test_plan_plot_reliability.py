"""`moesim plan` and `moesim plot` / `moesim.plot`: a setting no row of a plan reads is refused, one that only some
rows read is noted; a figure's layer, sequence and capacity out of range are named as typed with the range the trace
has; the API's plot refuses an argument of the wrong type by its name. Each error is one line, exit 1, nothing
written."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

import moesim
from moesim.errors import MoesimError
from moesim.tracegen.trace import bundled_trace_path


def one_line_error(cli, *args) -> str:
    """The message of a command that must fail with one line and exit status 1."""
    status, out, err = cli(*args)
    assert status == 1 and out == "" and err.count("\n") == 1 and err.startswith("moesim: error: "), (args, out, err)
    return err.removeprefix("moesim: error: ").rstrip("\n")


FITS = ("plan", "--model", "qwen3-30b-a3b", "--hardware", "h100")  # fits whole in 80 GiB in every format planned


def test_plan_refuses_split_and_threads_where_the_model_fits_whole_on_the_gpu(cli, tmp_path):
    """Every row on the GPU is all-on-gpu (-ngl 99): no row keeps a cache for --split to share out; it was accepted and
    changed nothing. Refused after the plan, before any figure is written. --threads is read there by llama.cpp's row
    with the GPU left out (-ngl 0), which computes every expert on the CPU."""
    figure = tmp_path / "plan.png"
    assert one_line_error(cli, *FITS, "--split", "best", "--plot", figure) == (
        "--split: qwen3-30b-a3b fits whole in h100's GPU memory in each format planned (q4_k, q8_0, bf16): every "
        "row on the GPU is all-on-gpu and no row keeps a per-layer expert cache for it to share out, so nothing "
        "reads it")
    assert not figure.exists()
    code, out, err = cli(*FITS, "--threads", "4", "--dtype", "q4_k", "--json")
    assert code == 0 and [(r["strategy"], r["gpu"], " -t 4 " in r["command"]) for r in json.loads(out)["rows"]] == [
        ("all-on-gpu", True, False), ("cpu-experts", False, True)], err
    # a machine without a GPU: no candidate keeps a cache (its threads are read by every row)
    assert one_line_error(cli, "plan", "--model", "qwen3-30b-a3b", "--hardware", "ryzen-7950x", "--split", "best",
                          "--dtype", "q4_k") == (
        "--split: ryzen-7950x has no GPU: every candidate runs its experts on the CPU and none keeps a cache, so "
        "nothing reads it")
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hardware", "ryzen-7950x", "--threads", "4",
                         "--dtype", "q4_k", "--json")
    assert code == 0 and all(" -t 4 " in r["command"] or "--kt-cpuinfer 4 " in r["command"]
                             for r in json.loads(out)["rows"]), err
    # the Python API takes it, as it takes a cache's settings beside capacity 0: a loop over machines passes it to each
    assert [r.strategy for r in moesim.plan("qwen3-30b-a3b", "h100", dtypes=["q4_k"], threads=4).rows] == \
        ["all-on-gpu", "cpu-experts"]
    # not typed: the plan's own uniform split and the machine's threads, nothing to refuse
    code, out, err = cli(*FITS, "--dtype", "q4_k", "--json")
    assert code == 0 and [r["strategy"] for r in json.loads(out)["rows"]] == ["all-on-gpu", "cpu-experts"], err


def test_plan_notes_split_and_threads_that_only_some_rows_read(cli):
    """Where some rows keep a per-layer cache (compute on the CPU) and others do not, the plan runs and says which
    rows the setting reached."""
    from moesim.experiments.plan import read_by

    code, out, err = cli("plan", "--model", "mixtral-8x7b", "--hardware", "rtx4090", "--dtype", "bf16",
                         "--split", "best", "--threads", "4", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    split = [r["rank"] for r in rows if r["capacity"] is not None and r["scope"] == "per-layer"]
    cpu = [r["rank"] for r in rows if r["strategy"] in ("cpu-experts", "cpu-miss", "hybrid")]
    assert 0 < len(split) < len(rows) and 0 < len(cpu) < len(rows)
    code, out, err = cli("plan", "--model", "mixtral-8x7b", "--hardware", "rtx4090", "--dtype", "bf16",
                         "--split", "best", "--threads", "4")
    assert code == 0, err
    text = " ".join(out.split())
    assert (f"--split best: read by row{'s' * (len(split) > 1)} {', '.join(f'#{n}' for n in split)} only, those that keep a per-layer "
            "expert cache (the others keep none, or every expert on the GPU)") in text, text
    assert (f"--threads 4: read by row{'s' * (len(cpu) > 1)} {', '.join(f'#{n}' for n in cpu)} only, those that compute experts on the "
            "host CPU (the others compute none there)") in text, text
    plan = moesim.plan("mixtral-8x7b", "rtx4090", dtypes=["bf16"], split="best", threads=4)
    assert read_by(plan, "split") == split and read_by(plan, "threads") == cpu


TRACE = str(bundled_trace_path())  # 32 layers, 8 experts, top-2, 2 sequences


@pytest.mark.parametrize("args, message", [
    (("--kind", "eviction-timeline", "--layer", "40"), f"--layer 40 is out of range: {TRACE} has 32 layers (0..31)"),
    (("--kind", "eviction-timeline", "--layer", "-1"), f"--layer -1 is out of range: {TRACE} has 32 layers (0..31)"),
    (("--kind", "eviction-timeline", "--sequence", "5"),
     f"--sequence 5 is out of range: {TRACE} has 2 sequences (0..1)"),
    (("--kind", "activation-heatmap", "--sequence", "2"),
     f"--sequence 2 is out of range: {TRACE} has 2 sequences (0..1)"),
    (("--kind", "eviction-timeline", "--capacity", "0"),
     "--capacity 0 is below top_k 2: a step's k experts are resident at once; give --capacity 2 or more"),
    (("--kind", "eviction-timeline", "--capacity", "-1"),  # was "[cache] capacity must be at least 0, got -1"
     "--capacity -1 is below top_k 2: a step's k experts are resident at once; give --capacity 2 or more"),
    (("--kind", "eviction-timeline", "--capacity", "9"),
     "--capacity 9 is more than the 8 experts per layer the trace has; give --capacity 2 to 8"),
])
def test_a_trace_plot_names_an_index_or_capacity_out_of_range_as_typed(cli, tmp_path, args, message):
    out = tmp_path / "figure.png"
    assert one_line_error(cli, "plot", TRACE, "--out", out, *args) == message
    assert list(tmp_path.iterdir()) == []


def test_the_trace_plots_name_their_python_arguments(tmp_path):
    from moesim.plots.trace import plot_activations, plot_eviction_timeline

    trace = moesim.load_trace("bundled")
    cases = [(lambda: plot_eviction_timeline(trace, tmp_path / "a.png", layer=32),
              "layer=32 is out of range: the trace has 32 layers (0..31)"),
             (lambda: plot_eviction_timeline(trace, tmp_path / "a.png", seq_index=2),
              "seq_index=2 is out of range: the trace has 2 sequences (0..1)"),
             (lambda: plot_eviction_timeline(trace, tmp_path / "a.png", layer=1.5),
              "layer must be a whole number (an index from 0), got float 1.5"),
             (lambda: plot_activations(trace, tmp_path / "a.png", seq_index=-1),
              "seq_index=-1 is out of range: the trace has 2 sequences (0..1)")]
    for draw, message in cases:
        with pytest.raises(MoesimError) as exc:
            draw()
        assert str(exc.value) == message
    assert list(tmp_path.iterdir()) == []


def per_layer_results() -> pl.DataFrame:
    return pl.DataFrame({"kind": ["hitrate"] * 2, "policy": ["lru"] * 2, "capacity": [2, 4],
                         "per_layer_hit_rate": [[0.5, 0.6], [0.7, 0.8]]})


@pytest.mark.parametrize("kwargs, message", [
    ({"capacity": "2"}, "capacity must be a whole number of slots (an int) or None, got str '2'"),
    ({"capacity": 2.0}, "capacity must be a whole number of slots (an int) or None, got float 2.0"),
    ({"capacity": True}, "capacity must be a whole number of slots (an int) or None, got bool True"),
    ({"baseline": 3}, "baseline must be a policy's name (a str) or None, got int 3"),
    ({"source": 3}, "source must be a name for the results (a str) or None, got int 3"),
])
def test_the_api_plot_refuses_an_argument_of_another_type_by_name(tmp_path, kwargs, message):
    """capacity="2" matched no row and read "no rows at capacity 2 (have 2, 4)"; source=3 was a TypeError."""
    kind = "speedup-heatmap" if "baseline" in kwargs else "per-layer-hitrate"
    with pytest.raises(MoesimError) as exc:
        moesim.plot(per_layer_results(), kind, tmp_path / "x.png", **kwargs)
    assert str(exc.value) == message
    assert list(tmp_path.iterdir()) == []


def test_the_api_plot_takes_a_numpy_capacity_and_refuses_results_of_another_type(tmp_path, drawn):
    assert moesim.plot(per_layer_results(), "per-layer-hitrate", tmp_path / "x.png", capacity=np.int64(4)) \
        == tmp_path / "x.png"
    assert drawn[-1]._suptitle.get_text().startswith("Hit rate per layer at capacity 4\n")
    with pytest.raises(MoesimError) as exc:
        moesim.plot(3, "per-layer-hitrate", tmp_path / "y.png")
    assert str(exc.value) == ("results must be a results file's path (a str or Path) or its DataFrame (polars or "
                              "pandas), got int 3")
    assert [p.name for p in tmp_path.iterdir()] == ["x.png"]


def test_a_results_figure_of_a_trace_and_a_trace_figure_of_results_say_what_the_file_is(cli, tmp_path, monkeypatch):
    """'lacks column(s) capacity, hit_rate, policy' for a trace, and 'not a moesim trace ... convert it with moesim
    trace import' for a sweep's results: each now names what the file is and the figures it has."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru"]\ncapacity = [4]\n')
    assert cli("sweep", "s.toml", "--out", "r.parquet")[0] == 0
    assert cli("trace", "synth", "--model", "mixtral-8x7b", "--sequences", "1", "--tokens", "4", "--out",
               "t.parquet")[0] == 0
    assert one_line_error(cli, "plot", "t.parquet", "--kind", "hitrate-vs-capacity", "--out", "a.png") == (
        "t.parquet: a trace, not a sweep's results; its figures are activation-heatmap, eviction-timeline")
    assert one_line_error(cli, "plot", "r.parquet", "--kind", "activation-heatmap", "--out", "a.png") == (
        "r.parquet: a sweep's results, not a trace; its figures are hitrate-vs-capacity, tpot-vs-capacity, "
        "speedup-heatmap, per-layer-hitrate, latency-vs-throughput, hitrate-vs-batch")
    assert not (tmp_path / "a.png").exists()
