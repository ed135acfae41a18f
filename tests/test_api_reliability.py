"""The public API as a new user meets it: a setting nothing reads is refused, an output is checked before it is
written, and numpy's numbers are the numbers they hold."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import moesim
from moesim.errors import MoesimError


def test_mrc_refuses_a_capacity_it_does_not_read(mixtral):
    with pytest.raises(MoesimError, match=r"^capacity: mrc runs every capacity \(or those in capacities=\[\.\.\.\]\), "
                                          r"so nothing reads it; pass capacities=\[8\]$"):
        moesim.mrc(mixtral, "lru", capacity=8)
    with pytest.raises(MoesimError, match=r"^capacity: .* so nothing reads it$"):
        moesim.mrc(mixtral, "lru", capacity=(4,) * mixtral.meta.num_layers)


def test_mrc_refuses_a_split_it_does_not_read(mixtral):
    with pytest.raises(MoesimError, match=r"^split: mrc runs each capacity in every layer, so nothing reads it; "
                                          r"best_split\(trace, budget, curve=\.\.\.\)"):
        moesim.mrc(mixtral, "lru", split="best")


def test_write_trace_refuses_another_format_and_an_existing_file_unless_forced(mixtral, tmp_path):
    one = mixtral.select([1])
    with pytest.raises(MoesimError, match=r"x\.csv: unknown trace format '\.csv' \(use \.parquet\)"):
        moesim.write_trace(one, tmp_path / "x.csv")
    assert not (tmp_path / "x.csv").exists()
    path = tmp_path / "t.parquet"
    moesim.write_trace(one, path)
    before = path.read_bytes()
    with pytest.raises(MoesimError, match=r"t\.parquet: exists; pass force=True to replace the trace$"):
        moesim.write_trace(mixtral, path)
    assert path.read_bytes() == before
    moesim.write_trace(mixtral, path, force=True)
    assert moesim.load_trace(path).num_rows == mixtral.num_rows


def test_numpy_capacities_are_the_numbers_they_hold(mixtral):
    layers = mixtral.meta.num_layers
    assert moesim.hitrate(mixtral, "lru", capacity=np.int64(4)).hits == moesim.hitrate(mixtral, "lru", capacity=4).hits
    uneven = [3 + layer % 3 for layer in range(layers)]
    per_layer = moesim.hitrate(mixtral, "lru", capacity=tuple(uneven))
    assert moesim.hitrate(mixtral, "lru", capacity=np.array(uneven, np.int64)).per_layer_hits == \
        per_layer.per_layer_hits
    assert moesim.hitrate(mixtral, "lru", capacity=np.array([4] * layers)).hits == \
        moesim.hitrate(mixtral, "lru", capacity=(4,) * layers).hits == moesim.hitrate(mixtral, "lru", capacity=4).hits
    with pytest.raises(MoesimError, match=r"^\[cache\] capacity per layer: each must be a whole number from 0 to 2,147,483,647, got 4.5"):
        moesim.hitrate(mixtral, "lru", capacity=np.full(layers, 4.5))


# A wrong argument's type is one MoesimError naming the argument and what it takes, not an AttributeError or a
# TypeError from deep inside.

CONFIG_TAKERS = {
    "hitrate": lambda trace, config: moesim.hitrate(trace, "lru", 4, config=config),
    "mrc": lambda trace, config: moesim.mrc(trace, "lru", capacities=[2], config=config),
    "best_split": lambda trace, config: moesim.best_split(trace, 96, "lru", config=config),
    "simulate": lambda trace, config: moesim.simulate(trace, config, hardware="rtx4090"),
    "serve": lambda trace, config: moesim.serve(trace, config=config, rate=0.5, requests=2),
    "run_replay": lambda trace, config: moesim.run_replay(trace, config, backend="virtual"),
    "validate": lambda trace, config: moesim.validate(trace, config, backend="virtual"),
    "plan": lambda trace, config: moesim.plan("mixtral-8x7b", "rtx4090", config=config),
}


@pytest.mark.parametrize("function", CONFIG_TAKERS)
def test_every_function_refuses_a_config_that_is_not_one(mixtral, function):
    for config, name in (({"policy": "lru"}, "dict"), ({}, "dict"), (3, "int")):
        with pytest.raises(MoesimError, match=rf"^config must be a moesim\.Config, got {name}$"):
            CONFIG_TAKERS[function](mixtral, config)
    for config, name in (("run.toml", "str"), (Path("run.toml"), "PosixPath")):
        with pytest.raises(MoesimError, match=rf"^config must be a moesim\.Config, got {name} \(load a file with "
                                              r"moesim\.Config\.from_toml\(path\)\)$"):
            CONFIG_TAKERS[function](mixtral, config)


def test_write_trace_refuses_a_trace_or_a_path_of_another_type(mixtral, tmp_path):
    with pytest.raises(MoesimError, match=r"^trace must be a Trace \(moesim\.load_trace\), got NoneType$"):
        moesim.write_trace(None, tmp_path / "t.parquet")
    for path, name in ((None, "NoneType"), (3, "int 3")):  # a number shown as given
        with pytest.raises(MoesimError, match=rf"^path must be a file's path \(a str or Path\), got {name}$"):
            moesim.write_trace(mixtral, path)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("knob", ["layer_alpha", "seq_alpha", "reuse", "cross_layer"])
def test_locality_refuses_a_knob_that_is_not_a_number(knob):
    for value in ("0.5", True, None):
        with pytest.raises(MoesimError, match=rf"^{knob} must be a number, got {re.escape(repr(value))}$"):
            moesim.Locality(**{knob: value})
    assert getattr(moesim.Locality(**{knob: np.float64(0.5)}), knob) == 0.5  # numpy's numbers are numbers


def test_hardware_refuses_a_name_that_is_not_one():
    for name, kind in ((None, "NoneType"), (3, "int")):
        with pytest.raises(MoesimError, match=rf'^hardware must be a preset name, a hardware TOML file\'s path or '
                                              rf'"local", got {kind}$'):
            moesim.hardware(name)
    with pytest.raises(MoesimError, match=r"^link must be a link preset's name, got int$"):
        moesim.hardware("rtx4090", link=3)
    with pytest.raises(MoesimError, match=r"x\.toml: no such hardware file"):  # a Path is a file, as a str is
        moesim.hardware(Path("x.toml"))


def test_sweep_refuses_a_spec_jobs_or_out_of_another_type(tmp_path):
    spec, out = tmp_path / "s.toml", tmp_path / "out.parquet"
    spec.write_text('traces = ["bundled"]\nkind = "hitrate"\n[axes]\ncapacity = [2]\n')
    for given, name in ((None, "NoneType"), ({"traces": ["bundled"]}, "dict")):
        with pytest.raises(MoesimError, match=rf"^spec must be a SweepSpec \(moesim\.experiments\.sweep\) or a sweep "
                                              rf"spec's TOML file \(a str or Path\), got {name}$"):
            moesim.sweep(given, out)
    for jobs in ("1", 1.5, True, 0):
        with pytest.raises(MoesimError, match=rf"^jobs must be a whole number >= 1, got {type(jobs).__name__} {re.escape(repr(jobs))}$"):
            moesim.sweep(spec, out, jobs=jobs)
    with pytest.raises(MoesimError, match=r"^out must be a file's path \(a str or Path\), got NoneType$"):
        moesim.sweep(spec, None)
    with pytest.raises(MoesimError, match=r"^flush_seconds must be a number of seconds >= 0, got str '2'$"):
        moesim.sweep(spec, out, flush_seconds="2")
    with pytest.raises(MoesimError, match=r"^progress must be a function progress\(done, total\) or None, got int 3$"):
        moesim.sweep(spec, out, progress=3)
    assert not out.exists()


def test_plot_refuses_an_out_that_is_not_a_path(tmp_path):
    results = tmp_path / "r.parquet"
    pl.DataFrame({"policy": ["lru"], "capacity": [2], "hit_rate": [0.5]}).write_parquet(results)
    with pytest.raises(MoesimError, match=r"^out must be a file's path \(a str or Path\), got NoneType$"):
        moesim.plot(results, "hitrate-vs-capacity", None)


def test_train_ml_ffn_refuses_an_out_that_is_not_a_path(mixtral):
    with pytest.raises(MoesimError, match=r"^out must be a file's path \(a str or Path\), got NoneType$"):
        moesim.train_ml_ffn(mixtral, None)


def test_a_configuration_file_is_a_toml_files_path(tmp_path):
    """Config.from_toml(None) and to_toml(None) ended in pathlib's TypeError, and to_toml("a.txt") wrote a file the
    command line's --save-config refuses to."""
    for call in (lambda: moesim.Config.from_toml(None), lambda: moesim.Config().to_toml(None)):
        with pytest.raises(MoesimError, match=r"^the configuration file's path must be a str or Path, got NoneType$"):
            call()
    with pytest.raises(MoesimError, match=r"a\.txt: unknown configuration file format '\.txt' \(use \.toml\)"):
        moesim.Config().to_toml(tmp_path / "a.txt")
    assert not any(tmp_path.iterdir())


def test_an_empty_trace_path_is_named_as_empty():
    """Path("") is ".", and loading it said ".: a folder, not a trace file"."""
    with pytest.raises(MoesimError, match=r"^a trace file is named by a path, got an empty one$"):
        moesim.load_trace("")


def test_a_selection_of_no_sequence_or_one_the_trace_lacks_is_refused():
    """``select([-1])`` and ``select([])`` made traces whose hit rate crashed the interpreter (a segmentation fault in
    the compiled loop); ``select([5])`` was an IndexError, ``select([0, 0])`` failed only when written."""
    trace = moesim.load_trace("bundled")
    for given, message in (([-1], "select: sequence index -1 is not one of the trace's 2 (0..1)"),
                           ([5], "select: sequence index 5 is not one of the trace's 2 (0..1)"),
                           ([], "select takes a list of sequence indices (whole numbers 0..1), got []"),
                           ([0.0], "select takes a list of sequence indices (whole numbers 0..1), got [0.0]"),
                           ([0, 0], "select: a sequence index is listed twice (a trace holds each sequence once)")):
        with pytest.raises(MoesimError) as refused:
            trace.select(given)
        assert str(refused.value) == message
    second = trace.select(np.array([1]))
    assert second.num_sequences == 1 and second.seq_ids.tolist() == [trace.seq_ids[1]]
    assert np.array_equal(second.experts, trace.experts[trace.seq_offsets[1]:])


def test_best_split_refuses_what_it_does_not_read_and_a_curve_of_another_run(mixtral):
    """``capacity``, ``split`` and ``scope="global"`` were accepted and read by nothing; a curve of another policy
    gave that policy's split, one of another trace or scope was used as it was, ``curve=[]`` raised IndexError and
    ``curve="x"`` AttributeError."""
    lru = moesim.mrc(mixtral, "lru")
    cases = [({"capacity": 4}, "capacity: best_split shares budget slots out over per-layer caches, so nothing reads "
                               "it"),
             ({"split": "best"}, "split: best_split shares budget slots out over per-layer caches, so nothing reads "
                                 "it"),
             ({"scope": "global"}, "scope 'global': best_split shares budget slots out over per-layer caches; a "
                                   "global pool has no layers to share them over"),
             ({"config": moesim.Config.build(scope="global")}, "scope 'global': best_split shares budget slots out "
                                                               "over per-layer caches; a global pool has no layers to "
                                                               "share them over"),
             ({"config": moesim.Config.build(policy="belady"), "curve": lru}, "policy 'belady': the curve's policy is "
                                                                              "'lru'; leave policy out or give the "
                                                                              "curve of 'belady'"),
             ({"policy": "belady", "curve": lru}, "policy 'belady': the curve's policy is 'lru'; leave policy out or "
                                                  "give the curve of 'belady'"),
             ({"curve": moesim.mrc(mixtral.select([1]), "lru")}, "curve is not this trace's per-layer curve "
                                                                 "(per-layer, 4992 accesses; the trace has 32 layers "
                                                                 "and 15616 accesses)"),
             ({"curve": moesim.mrc(mixtral, "lru", scope="global", capacities=[64, 96])},
              "curve is not this trace's per-layer curve (global, 15616 accesses; the trace has 32 layers and 15616 "
              "accesses)"),
             ({"curve": lru + moesim.mrc(mixtral, "fifo")}, "curve mixes runs of more than one policy, semantics or "
                                                            "scope: give one mrc's list"),
             ({"curve": []}, "curve must be mrc's list of HitRate (mrc(trace, policy)), got list (empty)"),
             ({"curve": "x"}, "curve must be mrc's list of HitRate (mrc(trace, policy)), got str")]
    for kwargs, message in cases:
        with pytest.raises(MoesimError) as refused:
            moesim.best_split(mixtral, 96, **kwargs)
        assert str(refused.value) == message
    assert moesim.best_split(mixtral, 96, "lru", curve=lru).slots == moesim.best_split(mixtral, 96, "lru").slots


def test_plan_takes_a_configuration_as_its_keywords(mixtral, tmp_path, cli):
    """``plan(config=...)`` let a configuration's prefetcher into the candidates (a row dropped with oracle
    prefetch) and timed the TTFT on no prompt where the keywords time it on 512 tokens; a configuration's cache,
    prefetcher and strategy are the candidates' to set, as a configuration file's are on the command line, and a
    prompt of 0 (what a saved run holds) asks for none, on both."""
    build = lambda **kw: moesim.Config.build(model="mixtral-8x7b", hardware="rtx4090", dtype="q4_k", **kw)  # noqa
    keywords = moesim.plan("mixtral-8x7b", "rtx4090", dtypes=["q4_k"])
    assert keywords.prompt == 512
    for setting in ({}, {"prefetch": "oracle"}, {"capacity": 3}, {"strategy": "cpu-experts"}):
        configured = moesim.plan(config=build(**setting))
        assert (configured.prompt, configured.rows) == (keywords.prompt, keywords.rows), setting
    assert moesim.plan(config=build(prompt=100)).prompt == 100
    saved = tmp_path / "saved.toml"
    build(policy="belady", capacity=4).to_toml(saved)  # prompt = 0 among every setting
    code, out, err = cli("plan", "--config", saved, "--json")
    assert code == 0, err
    assert json.loads(out)["rows"] == moesim.plan(config=moesim.Config.from_toml(saved)).as_dict()["rows"] == \
        keywords.as_dict()["rows"]
    cpu = tmp_path / "cpu.toml"  # a file without a strategy, on a machine without a GPU
    cpu.write_text('[model]\nname = "mixtral-8x7b"\ndtype = "q4_k"\n[hardware]\nmachine = "ryzen-7950x"\n')
    assert moesim.plan(config=moesim.Config.from_toml(cpu)).rows == \
        moesim.plan("mixtral-8x7b", "ryzen-7950x", dtypes=["q4_k"]).rows


def test_arguments_of_the_wrong_type_are_named_not_raised_from_inside(mixtral, tmp_path):
    """Each was a KeyError, a TypeError from a comparison or one naming an internal function."""
    cases = [(lambda: moesim.plan("mixtral-8x7b", "rtx4090", dtypes=[None]),
              "dtypes: None is no weight format's name (choose from fp32,"),
             (lambda: moesim.plan("mixtral-8x7b", "rtx4090", dtypes={"q4_k": 1}),
              "dtypes must be a weight format's name or a list of them, got {'q4_k': 1}"),
             (lambda: moesim.run_replay(mixtral, backend="virtual", capacity=4, dtype="q4_k", scale="1"),
              "scale must be a number in (0, 1], got str '1'"),
             (lambda: moesim.run_replay(mixtral, backend="virtual", capacity=4, dtype="q4_k", layers=1.5),
              "layers must be a whole number 1..32, got float 1.5"),
             (lambda: moesim.train_ml_ffn(mixtral, tmp_path / "f.npz", epoch=1),
              "epoch: train_ml_ffn takes horizon, val_fraction, epochs, patience, batch, seed")]
    for call, message in cases:
        with pytest.raises(MoesimError) as refused:
            call()
        assert str(refused.value).startswith(message)
    assert not (tmp_path / "f.npz").exists()


def test_a_yes_no_argument_is_true_or_false(mixtral, tmp_path):
    """``force="no"`` replaced an existing trace and ``resume="no"`` resumed: a non-empty string is true to Python."""
    moesim.write_trace(mixtral, tmp_path / "t.parquet")
    cases = [(lambda: moesim.write_trace(mixtral, tmp_path / "t.parquet", force="no"), "force must be True or False, "
                                                                                         "got str 'no'"),
             (lambda: moesim.simulate(mixtral, capacity=4, dtype="int4", decisions="yes"), "decisions must be True or "
                                                                                          "False, got str 'yes'"),
             (lambda: moesim.sweep("examples/flashmoe_fig6.toml", tmp_path / "o.parquet", resume="no"),
              "resume must be True or False, got str 'no'"),
             (lambda: moesim.train_ml_ffn(mixtral, tmp_path / "f.npz", per_layer=1, epochs=1), "per_layer must be "
                                                                                               "True or False, got int "
                                                                                               "1")]
    for call, message in cases:
        with pytest.raises(MoesimError) as refused:
            call()
        assert str(refused.value) == message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]
    assert moesim.simulate(mixtral, capacity=4, dtype="int4", decisions=np.bool_(True)).decisions is not None


def test_plan_names_an_object_it_cannot_take_and_each_memory_short():
    """``plan(model=ModelSpec)`` printed the object's whole repr; nothing fitting gave one shortfall, GPU memory and
    host RAM added (1123.9 GiB)."""
    for kwargs, message in (({"model": moesim.models()["mixtral-8x7b"], "hardware": "rtx4090"},
                             "model: a plan takes a preset's name or a model file's path (config.json, GGUF), got a "
                             "ModelSpec (simulate takes one built in code)"),
                            ({"model": "mixtral-8x7b", "hardware": moesim.hardware("rtx4090")},
                             'hardware: a plan takes a preset\'s name, a hardware TOML file\'s path or "local", got a '
                             "Hardware (simulate takes one built in code)")):
        with pytest.raises(MoesimError) as refused:
            moesim.plan(**kwargs)
        assert str(refused.value) == message
    with pytest.raises(MoesimError) as refused:
        moesim.plan("deepseek-v3", "rtx4090", dtypes=["bf16"])
    # the experts read from the SSD, the host holds the rest; 53.9 GiB of GPU memory against 24.0
    assert str(refused.value).startswith("nothing fits deepseek-v3 on rtx4090; closest (29.9 GiB of GPU memory short): "
                                         "bf16 with 58 of 58 layers' experts on the CPU, 1,511 experts in host RAM in "
                                         "front of the SSD, which needs 53.9 GiB of GPU memory")
    with pytest.raises(MoesimError) as refused:
        moesim.plan("deepseek-v3", "rtx4090", dtypes=["bf16"], ram=2)
    # and with 2 GiB of RAM, below the host's reserve, both short, each named
    assert str(refused.value).startswith("nothing fits deepseek-v3 on rtx4090; closest (29.9 GiB of GPU memory and "
                                         "2.0 GiB of host RAM short): bf16 with 58 of 58 layers' experts on the CPU, 0 "
                                         "experts in host RAM in front of the SSD")
