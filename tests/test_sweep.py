"""`moesim sweep`: specs, the product of axes, errors as rows, parallel workers, kill and resume."""

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

import moesim
from moesim.errors import MoesimError
from moesim.experiments.sweep import _check_rows, load_spec, row_id, run_sweep
from moesim.tracegen.trace import bundled_trace_path

VOLATILE = ["seconds", "accesses_per_s"]

SPEC = """
traces = ["{trace}"]
kind = "hitrate"
[axes]
policy = ["belady", "lru", "lfu", "fifo", "arc", "gamma"]
capacity = [2, 3, 4, 5, 6]
scope = ["per-layer", "global"]
"""


def stable(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.drop(VOLATILE, strict=False).sort("config_id")


def test_product_exclude_and_errors_as_rows(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru", "nope"]\ncapacity = [1, 4]\n'
                    '[fixed]\nscope = "per-layer"\n[[exclude]]\npolicy = "nope"\ncapacity = 1\n')
    loaded = load_spec(spec)
    assert [(c["policy"], c["capacity"]) for c in loaded.configs()] == [("lru", 1), ("lru", 4), ("nope", 4)]
    summary = run_sweep(loaded, tmp_path / "r.parquet")
    rows = {(r["policy"], r["capacity"]): r for r in pl.read_parquet(tmp_path / "r.parquet").to_dicts()}
    assert summary.ran == 3 and summary.failed == 2
    assert "below top_k" in rows[("lru", 1)]["error"] and "policy must be one of" in rows[("nope", 4)]["error"]
    assert rows[("lru", 4)]["error"] is None and rows[("lru", 4)]["hits"] == 9389  # golden table
    assert rows[("lru", 4)]["config_id"] == row_id("hitrate", loaded.configs()[1])
    assert rows[("lru", 4)]["semantics"] == "step" and rows[("lru", 4)]["reset"] is False  # every setting
    with pytest.raises(MoesimError, match="exists"):
        run_sweep(loaded, tmp_path / "r.parquet")
    assert run_sweep(loaded, tmp_path / "r.parquet", resume=True).ran == 0


def test_resume_with_another_spec_runs_what_is_new_and_refuses_another_kind(tmp_path):
    """A resumed file grows with a spec's new settings (the rows of settings it no longer names are kept, and
    counted); a file of another kind's results is not resumed into, for their columns differ."""
    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru"]\ncapacity = [2, 4]\n')
    run_sweep(load_spec(spec), tmp_path / "r.parquet")
    spec.write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru"]\ncapacity = [4, 6]\n')
    summary = run_sweep(load_spec(spec), tmp_path / "r.parquet", resume=True)
    assert (summary.total, summary.skipped, summary.ran, summary.other) == (2, 1, 1, 1)
    assert sorted(pl.read_parquet(tmp_path / "r.parquet")["capacity"]) == [2, 4, 6]
    before = (tmp_path / "r.parquet").read_bytes()
    spec.write_text('traces = ["bundled"]\nkind = "des"\n[axes]\ncapacity = [4]\n[fixed]\ndtype = "q4_k"\n')
    with pytest.raises(MoesimError, match="r.parquet: holds a hitrate sweep's results, this spec's kind is des"):
        run_sweep(load_spec(spec), tmp_path / "r.parquet", resume=True)
    assert (tmp_path / "r.parquet").read_bytes() == before


def test_an_admission_axis_names_each_row_by_its_policy_and_admission_apart(tmp_path):
    """Rows that sweep ``admission`` (the policy left at its default, or named) hold the policy's plain name and the
    admission in a column of its own, the hits of each composition, and the γ given only where the admission reads it;
    a curve's rows (several capacities) alike."""
    from moesim import hitrate, load_trace
    from moesim.tracegen.trace import bundled_trace_path

    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled"]\n[axes]\nadmission = ["all", "gamma"]\ncapacity = [2, 4]\n[fixed]\n'
                    'semantics = "sequential"\ngamma = 0.5\n')
    run_sweep(load_spec(spec), tmp_path / "r.parquet")
    rows = pl.read_parquet(tmp_path / "r.parquet").sort("admission", "capacity")
    trace = load_trace(bundled_trace_path())
    assert rows.select("policy", "admission", "capacity", "gamma").rows() == [
        ("lru", "all", 2, None), ("lru", "all", 4, None), ("lru", "gamma", 2, 0.5), ("lru", "gamma", 4, 0.5)]
    assert rows["hits"].to_list() == [hitrate(trace, "lru", c, semantics="sequential", **extra).hits
                                      for extra in ({}, {"admission": "gamma", "gamma": 0.5}) for c in (2, 4)]


@pytest.mark.parametrize("text, message", [
    ("traces = []\n", "non-empty list"), ('traces = ["none*.parquet"]\n', "matches no file"),
    ('traces = ["bundled"]\nkind = "x"\n', "kind must be"), ('traces = ["bundled"]\n[axes]\nspeed = [1]\n', "not a setting"),
    ('traces = ["bundled"]\n[axes]\npolicy = []\n', "non-empty list"), ("traces = [", "not valid TOML"),
    ('traces = ["bundled"]\n[axes]\nprefetch = ["oracle"]\n', "not a setting of a hitrate run"),
])
def test_bad_specs_name_the_file(tmp_path, text, message):
    spec = tmp_path / "bad.toml"
    spec.write_text(text)
    with pytest.raises(MoesimError, match=message) as err:
        load_spec(spec)
    assert str(spec) in str(err.value)


def test_a_sweep_whose_every_row_failed_is_an_error_and_writes_nothing(tmp_path):
    """Rows that all failed hold nothing but errors: the sweep says so in one line (the first row's error), and the
    results file is as it was before (absent, or a resumed file's old rows)."""
    spec, out = tmp_path / "s.toml", tmp_path / "r.parquet"
    spec.write_text('traces = ["bundled"]\n[axes]\npolicy = ["nope", "nada"]\ncapacity = [4]\n')
    with pytest.raises(MoesimError, match=r"s.toml: every one of the 2 configuration\(s\) run failed, so nothing "
                                          r"was written to .*r.parquet; the first: \[cache\] policy must be one of .*, got 'nope'"):
        run_sweep(load_spec(spec), out, flush_seconds=0)
    assert not out.exists()
    spec.write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru"]\ncapacity = [4]\n')
    run_sweep(load_spec(spec), out)
    before = pl.read_parquet(out)
    spec.write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru", "nope"]\ncapacity = [4]\n')
    with pytest.raises(MoesimError, match="every one of the 1 configuration"):
        run_sweep(load_spec(spec), out, resume=True, flush_seconds=0)
    assert pl.read_parquet(out).equals(before)


@pytest.mark.parametrize("kind, settings, message", [
    ("des", '[axes]\nthreads = [1, 2]\n', "threads: strategy gpu-cache computes no expert on the host CPU"),
    ("des", '[axes]\ncpu_layers = [16, 32]\n[fixed]\nstrategy = "cpu-experts"\npolicy = "lfu"\n',
     r"policy: strategy cpu-experts keeps no expert cache \(it places experts: cpu_layers\), so nothing reads it"),
    ("des", '[fixed]\nstrategy = "cpu-experts"\ncapacity = 8\nscope = "global"\n',
     "capacity, scope: strategy cpu-experts keeps no expert cache"),
    ("serve", '[fixed]\nrate = 2.0\nacceptance = 0.7\n',
     "acceptance: with draft_tokens=0 no run drafts a token to accept, so nothing reads it"),
    ("des", '[fixed]\nssd = "pcie5-nvme"\n', "ssd: with no dram_capacity"),
    # the rows that read it are left out
    ("des", '[axes]\nthreads = [1, 2]\nstrategy = ["gpu-cache", "hybrid"]\n[[exclude]]\nstrategy = "hybrid"\n',
     "threads: strategy gpu-cache computes no expert"),
])
def test_a_setting_no_row_reads_is_refused_before_any_runs(tmp_path, kind, settings, message):
    """The spec's keys as the rows take them: a setting that no row (``exclude`` applied) reads would change
    nothing the results show, so the sweep is refused in one line naming the spec, and writes nothing."""
    spec = tmp_path / "t.toml"
    spec.write_text(f'traces = ["bundled"]\nkind = "{kind}"\n{settings}')
    with pytest.raises(MoesimError, match=f"^{re.escape(str(spec))}: {message}"):
        run_sweep(load_spec(spec), tmp_path / "r.parquet")
    assert not (tmp_path / "r.parquet").exists()


def test_a_setting_one_row_reads_is_taken_whatever_the_rules_look_at(tmp_path):
    """A kernel kind given for a row timed as kTransformers (which reads it) beside one timed as Mixtral-offloading
    (which runs its own) is read: the rows are audited whole. Narrowed to the settings the rules look at, the
    kTransformers row (its engine takes static pins only) did not build, and the sweep was refused."""
    spec = tmp_path / "k.toml"
    spec.write_text('traces = ["bundled"]\nkind = "des"\n[axes]\nengine = ["kTransformers", "Mixtral-offloading"]\n'
                    'strategy = ["hybrid", "gpu-cache"]\npolicy = ["static", "lru"]\n[fixed]\nkernel = "fused"\n'
                    '[[exclude]]\nengine = "kTransformers"\nstrategy = "gpu-cache"\n'
                    '[[exclude]]\nengine = "Mixtral-offloading"\nstrategy = "hybrid"\n'
                    '[[exclude]]\nstrategy = "hybrid"\npolicy = "lru"\n'
                    '[[exclude]]\nstrategy = "gpu-cache"\npolicy = "static"\n')
    loaded = load_spec(spec)
    assert {(c["engine"], c["strategy"], c["policy"]) for c in loaded.configs()} == {
        ("kTransformers", "hybrid", "static"), ("Mixtral-offloading", "gpu-cache", "lru")}
    _check_rows(loaded, loaded.configs())  # not refused


def test_a_cache_axis_over_mole_traces_alone_is_refused(tmp_path):
    """A MoLE model keeps no expert cache: a capacity axis over MoLE traces alone gives identical rows; beside a MoE
    trace it is read by that trace's rows."""
    mole, moe = tmp_path / "mole.parquet", tmp_path / "moe.parquet"
    moesim.write_trace(moesim.synth_trace(12, 4, 4, 1, 4, seed=0, model="mole-160m-4e"), mole)
    moesim.write_trace(moesim.synth_trace(12, 10, 2, 1, 4, seed=0, model="moe-160m-10e"), moe)
    spec = tmp_path / "m.toml"
    spec.write_text('traces = ["mole.parquet"]\nkind = "des"\n[axes]\ncapacity = [4, 8]\n')
    with pytest.raises(MoesimError, match=r"m\.toml: capacity: model mole-160m-4e computes its experts as lookup "
                                          r"tables"):
        run_sweep(load_spec(spec), tmp_path / "r.parquet")
    assert not (tmp_path / "r.parquet").exists()
    spec.write_text('traces = ["mole.parquet", "moe.parquet"]\nkind = "des"\n[axes]\ncapacity = [4, 8]\n')
    loaded = load_spec(spec)
    _check_rows(loaded, loaded.configs())


def test_settings_are_taken_where_some_row_reads_them(tmp_path):
    """Threads beside a CPU strategy or a machine with no GPU (it runs everything on its CPU), a cache's settings
    beside a strategy that keeps one: the rows are checked and none refused (a row that does not read one runs
    without it)."""
    spec = tmp_path / "t.toml"
    for axes in ('threads = [1, 2]\nstrategy = ["gpu-cache", "hybrid"]\n',
                 'threads = [1, 2]\nhardware = ["rtx4090", "ryzen-7950x"]\n',
                 'strategy = ["gpu-cache", "cpu-experts"]\npolicy = ["lru", "lfu"]\n'):
        spec.write_text(f'traces = ["bundled"]\nkind = "des"\n[axes]\n{axes}')
        loaded = load_spec(spec)
        _check_rows(loaded, loaded.configs())


def test_a_serve_sweep_with_rows_that_have_no_rate_is_refused_before_any_runs(tmp_path):
    """Poisson arrivals (the default) need a rate: rows without one would each fail alike. Rows that have one, or
    other arrivals, or that ``exclude`` leaves out, are not asked for one."""
    spec = tmp_path / "s.toml"
    head = 'traces = ["bundled"]\nkind = "serve"\n'
    spec.write_text(head + '[axes]\nstrategy = ["gpu-cache", "hybrid"]\n[fixed]\ndtype = "q4_k"\nrequests = 2\n')
    with pytest.raises(MoesimError, match=r"s.toml: 2 of its 2 rows have Poisson arrivals and no rate in requests/s"):
        run_sweep(load_spec(spec), tmp_path / "r.parquet")
    assert not (tmp_path / "r.parquet").exists()
    spec.write_text(head + '[axes]\narrivals = ["poisson", "burst"]\n[fixed]\ndtype = "q4_k"\nrequests = 2\n')
    with pytest.raises(MoesimError, match=r"1 of its 2 rows have Poisson arrivals"):
        run_sweep(load_spec(spec), tmp_path / "r.parquet")
    spec.write_text(head + '[axes]\narrivals = ["poisson", "burst"]\n[fixed]\ndtype = "q4_k"\nrequests = 2\n'
                    '[[exclude]]\narrivals = "poisson"\n')
    summary = run_sweep(load_spec(spec), tmp_path / "r.parquet")
    assert (summary.total, summary.ran) == (1, 1) and pl.read_parquet(tmp_path / "r.parquet")["error"].is_null().all()


def test_des_sweep_with_hardware_axis_and_two_jobs(tmp_path):
    spec = tmp_path / "d.toml"
    spec.write_text('traces = ["bundled"]\nkind = "des"\n[axes]\nhardware = ["rtx4090", "h100"]\n'
                    'prefetch = ["none", "oracle"]\n[fixed]\npolicy = "lru"\ncapacity = 4\ndtype = "int4"\n')
    run_sweep(load_spec(spec), tmp_path / "one.parquet", jobs=1)
    run_sweep(load_spec(spec), tmp_path / "two.parquet", jobs=2)
    one, two = pl.read_parquet(tmp_path / "one.parquet"), pl.read_parquet(tmp_path / "two.parquet")
    assert stable(one).equals(stable(two))
    by = {(r["hardware"], r["prefetch"]): r["tpot_s"] for r in one.to_dicts()}
    assert by[("h100", "none")] < by[("rtx4090", "none")] and by[("rtx4090", "oracle")] < by[("rtx4090", "none")]


def test_a_parallel_sweep_compiles_each_loop_once_before_its_workers(tmp_path, monkeypatch):
    """The discrete-event loops a sweep on workers runs go to ``compile_loops`` first, each (policy, prefetcher)
    once and a configuration that cannot be built left to its error row; a hit-rate sweep or one worker has none.
    A served stream's loops are compiled in the full build, which its runs take."""
    import moesim.sim.des as des
    from moesim.experiments.sweep import _compile_first
    from moesim.sim.run import FULL, LEAN

    asked = []
    monkeypatch.setattr(des, "compile_loops", lambda loops, least=2, build=LEAN: asked.append((list(loops), least,
                                                                                              build)))
    spec = tmp_path / "d.toml"
    spec.write_text('traces = ["bundled"]\nkind = "des"\n[axes]\npolicy = ["lru", "fifo", "nope"]\n'
                    'prefetch = ["none", "oracle"]\ncapacity = [4, 6]\n[fixed]\ndtype = "int4"\n')
    summary = run_sweep(load_spec(spec), tmp_path / "two.parquet", jobs=2)
    # least=1: even one cold loop is compiled before the workers, which would each compile it
    assert asked == [([("lru", "none", "gpu-cache"), ("lru", "oracle", "gpu-cache"), ("fifo", "none", "gpu-cache"),
                       ("fifo", "oracle", "gpu-cache")], 1, LEAN)]
    assert summary.failed == 4  # the unknown policy's rows
    run_sweep(load_spec(spec), tmp_path / "one.parquet", jobs=1)
    assert len(asked) == 1
    _compile_first([("id", {"policy": "lru", "capacity": 4})], "serve")
    assert asked[-1] == ([("lru", "none", "gpu-cache")], 1, FULL)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_killed_sweep_resumes_to_the_uninterrupted_result(tmp_path, how):
    """Acceptance: 6 policies x 5 capacities x 2 scopes on the shipped trace, killed half-way, resumed.

    SIGTERM stops after the running configuration and leaves nothing half-written; SIGKILL loses at
    most the rows since the last flush (a temporary file may remain: the results file never breaks)."""
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC.format(trace=bundled_trace_path()))
    full = tmp_path / "full.parquet"
    run_sweep(load_spec(spec), full)
    assert pl.read_parquet(full).height == 60

    part = tmp_path / "part.parquet"
    proc = subprocess.Popen([sys.executable, "-m", "moesim", "sweep", str(spec), "--out", str(part),
                             "--flush-seconds", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not part.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(how)
    proc.wait(timeout=60)
    kept = pl.read_parquet(part).height
    assert 0 < kept < 60, "the sweep was not interrupted half-way"
    if how == signal.SIGTERM:
        assert proc.returncode == 1 and not [p for p in os.listdir(tmp_path) if p.startswith(".")]
    summary = run_sweep(load_spec(spec), part, resume=True)
    assert summary.skipped == kept and summary.ran == 60 - kept
    assert stable(pl.read_parquet(part)).equals(stable(pl.read_parquet(full)))


def test_ray_executor_gives_the_local_result_and_resumes(tmp_path):
    ray = pytest.importorskip("ray")
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC.format(trace=bundled_trace_path()))
    run_sweep(load_spec(spec), tmp_path / "local.parquet")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        whole = load_spec(spec)
        part = replace(whole, axes={**whole.axes, "capacity": [2, 3]})  # the first 24, then resume the rest
        first = run_sweep(part, tmp_path / "ray.parquet", jobs=2, executor="ray")
        assert first.ran == 24
        rest = run_sweep(load_spec(spec), tmp_path / "ray.parquet", jobs=2, resume=True, executor="ray")
        assert rest.skipped == 24 and rest.ran == 36
    finally:
        ray.shutdown()
    assert stable(pl.read_parquet(tmp_path / "ray.parquet")).equals(stable(pl.read_parquet(tmp_path / "local.parquet")))


def test_unknown_executor_and_missing_ray(tmp_path, monkeypatch):
    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru"]\n')
    with pytest.raises(MoesimError, match="unknown executor"):
        run_sweep(load_spec(spec), tmp_path / "r.parquet", executor="dask")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(MoesimError, match=r"pip install 'moesim\[ray\]'"):
        run_sweep(load_spec(spec), tmp_path / "r.parquet", executor="ray")


def test_the_flashmoe_fig6_example_runs_and_plots(cli, tmp_path):
    example = Path(__file__).resolve().parents[1] / "examples" / "flashmoe_fig6.toml"
    code, out, err = cli("sweep", example, "--out", tmp_path / "fig6.parquet", "--jobs", "2")
    assert code == 0, err
    rows = pl.read_parquet(tmp_path / "fig6.parquet")
    assert rows.height == 42 and rows["error"].is_null().all()
    best = rows.group_by("capacity").agg(pl.col("hit_rate").max(), pl.col("hit_rate").filter(
        pl.col("policy") == "belady").first().alias("belady"))
    assert (best["hit_rate"] == best["belady"]).all()  # Belady bounds every curve
    code, _, err = cli("plot", tmp_path / "fig6.parquet", "--kind", "hitrate-vs-capacity", "--out", tmp_path / "f.png")
    assert code == 0, err


def test_a_policy_parameter_goes_to_the_rows_whose_policy_takes_it(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru", "gamma"]\n[fixed]\ncapacity = 4\ngamma = 0.0\n')
    configs = load_spec(spec).configs()
    assert [c.get("gamma") for c in configs] == [None, 0.0]
    run_sweep(load_spec(spec), tmp_path / "r.parquet")
    rows = {r["policy"]: r for r in pl.read_parquet(tmp_path / "r.parquet").to_dicts()}
    assert rows["gamma"]["hits"] == rows["lru"]["hits"] == 9389  # γ = 0 is LRU
    assert rows["lru"]["gamma"] is None and rows["gamma"]["gamma"] == 0.0
    plain = tmp_path / "plain.toml"
    plain.write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru"]\n[fixed]\ncapacity = 4\n')
    assert row_id("hitrate", load_spec(plain).configs()[0]) == rows["lru"]["config_id"]
    spec.write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru", "fifo"]\n[fixed]\ngamma = 0.5\n')
    with pytest.raises(MoesimError, match="s.toml: gamma: no policy or prefetcher of this run takes it"):
        load_spec(spec)


def test_a_configuration_id_follows_the_traces_content_not_its_path(tmp_path):
    import shutil

    from moesim.tracegen.trace import bundled_trace_path

    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(bundled_trace_path(), tmp_path / folder / "t.parquet")
        (tmp_path / folder / "s.toml").write_text('traces = ["t.parquet"]\n[axes]\ncapacity = [4, 5]\n')
    run_sweep(load_spec(tmp_path / "a" / "s.toml"), tmp_path / "r.parquet")
    assert run_sweep(load_spec(tmp_path / "b" / "s.toml"), tmp_path / "r.parquet", resume=True).ran == 0
    bundled = tmp_path / "bundled.toml"
    bundled.write_text('traces = ["bundled"]\n[axes]\ncapacity = [4, 5]\n')
    assert run_sweep(load_spec(bundled), tmp_path / "r.parquet", resume=True).ran == 0


def test_a_capacity_axis_is_one_curve_per_setting_with_the_rows_of_single_runs(tmp_path):
    """A hit-rate sweep runs each (policy, scope) as one miss-ratio curve; every row equals the row a
    single run of its configuration makes, column for column."""
    from moesim.experiments.sweep import _units, run_config

    spec = tmp_path / "s.toml"
    spec.write_text(SPEC.format(trace=bundled_trace_path()))
    loaded = load_spec(spec)
    configs = [(row_id("hitrate", c), c) for c in loaded.configs()]
    assert sorted(len(u) for u in _units("hitrate", configs)) == [5] * 12
    run_sweep(loaded, tmp_path / "r.parquet", jobs=2)
    swept = stable(pl.read_parquet(tmp_path / "r.parquet"))
    single = stable(pl.DataFrame([run_config("hitrate", c, cid) for cid, c in configs]))
    assert swept.columns == single.columns
    assert swept.equals(single)


def test_split_is_an_axis_and_its_rows_are_not_a_uniform_curve(tmp_path):
    """Rows of split best run the split (each its own run), not the uniform curve the other rows share."""
    from moesim.sim.config import CacheConfig
    from moesim.sim.hitrate import simulate
    from moesim.tracegen.io import load_trace

    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled"]\n[axes]\nsplit = ["uniform", "best"]\ncapacity = [3, 4]\n'
                    '[fixed]\npolicy = "lru"\n')
    run_sweep(load_spec(spec), tmp_path / "r.parquet")
    rows = {(r["split"], r["capacity"]): r["hits"] for r in pl.read_parquet(tmp_path / "r.parquet").to_dicts()}
    trace = load_trace(bundled_trace_path())
    for (split, capacity), hits in rows.items():
        assert hits == simulate(trace, CacheConfig(capacity=capacity, split=split)).hits
    assert rows[("best", 3)] > rows[("uniform", 3)]


def test_a_strategys_parameter_is_a_key_and_part_of_each_rows_id(tmp_path):
    """Strategy parameters are keys like the policies' (a des run reads them): each value its own row, its own
    id, and a strategy that does not take one leaves it out of its rows, which it then runs once (not once per
    value it does not read). A higher low-bit threshold sends more of the same misses to the low-bit copy."""
    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled"]\nkind = "des"\n[axes]\nlowbit_threshold = [0.1, 0.3]\n'
                    'strategy = ["lowbit-miss", "gpu-cache"]\n[fixed]\ndtype = "q4_k"\ncapacity = 4\n')
    loaded = load_spec(spec)
    assert [(c["strategy"], c.get("lowbit_threshold")) for c in loaded.configs()] == \
        [("lowbit-miss", 0.1), ("gpu-cache", None), ("lowbit-miss", 0.3)]
    run_sweep(loaded, tmp_path / "r.parquet")
    rows = pl.read_parquet(tmp_path / "r.parquet")
    assert rows["error"].is_null().all() and rows.height == 3 and rows["config_id"].n_unique() == 3
    low = rows.filter(pl.col("strategy") == "lowbit-miss").sort("lowbit_threshold")
    assert low["config_id"].n_unique() == 2 and low["lowbit_share"][0] < low["lowbit_share"][1]


def test_a_script_without_a_main_guard_runs_a_parallel_sweep(tmp_path):
    """``moesim.sweep(..., jobs=2)`` at a script's top level, no ``if __name__ == "__main__":``: the workers do not
    run the script again (they would each start a sweep and break the pool), and the rows are the serial run's."""
    (tmp_path / "s.toml").write_text('traces = ["bundled"]\nkind = "hitrate"\n[axes]\npolicy = ["lru", "fifo"]\n'
                                     'capacity = [2, 4]\n')
    (tmp_path / "study.py").write_text("import moesim\nprint('top level ran')\n"
                                       "print(moesim.sweep('s.toml', 'out.parquet', jobs=2).ran)\n")
    done = subprocess.run([sys.executable, "study.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["top", "level", "ran", "4"]  # the top level ran once, in this process
    serial = moesim.sweep(tmp_path / "s.toml", tmp_path / "serial.parquet", jobs=1)
    assert serial.ran == 4
    cols = ["policy", "capacity", "hits"]
    assert pl.read_parquet(tmp_path / "out.parquet").select(cols).sort(cols).equals(
        pl.read_parquet(tmp_path / "serial.parquet").select(cols).sort(cols))


def test_a_sweep_runs_each_configuration_once_and_can_be_stopped_before_its_first(tmp_path, monkeypatch):
    """A value listed twice, or a parameter the row's policy does not take, repeated a configuration (13,020 runs
    of a spec with 427 distinct ones); a spec past MAX_CONFIGS is refused before it is expanded; a stop during the
    expansion (it took minutes on a large grid, and the stop was cleared after it) ends the sweep there; a file
    that is not a sweep's results is not resumed into (a trace file was rewritten with result rows)."""
    from moesim.experiments import sweep as sweep_module

    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled", "bundled"]\n[axes]\npolicy = ["lru", "lru", "gamma"]\ncapacity = [2, 2]\n'
                    'gamma = [0.5, 0.9]\n')
    summary = run_sweep(load_spec(spec), tmp_path / "r.parquet")
    rows = pl.read_parquet(tmp_path / "r.parquet")
    # lru at 2 once (gamma is not its parameter), gamma at 2 with each of its two values
    assert summary.ran == summary.total == rows.height == rows["config_id"].n_unique() == 3
    assert sorted(zip(rows["policy"], rows["gamma"].to_list())) == [("gamma", 0.5), ("gamma", 0.9), ("lru", None)]
    trace = tmp_path / "t.parquet"
    moesim.write_trace(moesim.load_trace("bundled"), trace)
    before = trace.read_bytes()
    with pytest.raises(MoesimError, match="t.parquet: not a sweep's results .no config_id column."):
        run_sweep(load_spec(spec), trace, resume=True)
    assert trace.read_bytes() == before
    monkeypatch.setattr(sweep_module, "usable_cpus", lambda: 1)  # a worker a CPU at most; the rows the same
    assert run_sweep(load_spec(spec), tmp_path / "one.parquet", jobs=3).workers == 1
    assert stable(pl.read_parquet(tmp_path / "one.parquet")).equals(stable(rows))
    monkeypatch.setattr(sweep_module, "MAX_CONFIGS", 11)
    with pytest.raises(MoesimError, match=r"s.toml: 12 configurations .*, more than the 11 a sweep holds"):
        run_sweep(load_spec(spec), tmp_path / "big.parquet")
    monkeypatch.setattr(sweep_module, "MAX_CONFIGS", 12)

    def stopped(kind, config):  # Ctrl-C while the grid's rows are hashed
        sweep_module.STOP.set()
        return row_id(kind, config)

    monkeypatch.setattr(sweep_module, "row_id", stopped)
    with pytest.raises(MoesimError, match="stopped before its first configuration ran; nothing was written"):
        run_sweep(load_spec(spec), tmp_path / "stopped.parquet")
    assert not (tmp_path / "stopped.parquet").exists()
    # the stop ended that sweep only: the spec still expands whole, in this process
    assert not sweep_module.STOP.is_set() and len(load_spec(spec).configs()) == 3
    with pytest.raises(MoesimError, match="r.csv: unknown results format '.csv'"):
        moesim.sweep(spec, tmp_path / "r.csv")  # the API too wrote Parquet bytes under that name


def test_the_row_checks_leave_a_spec_whose_rows_all_fail_to_its_rows_errors(tmp_path):
    """Rows that build no configuration are not asked what they read (no strategy there to name): each reports its
    own error, and a sweep of them all is the every-row-failed error. An exclude rule matches a path as the rows hold
    it, resolved against the spec's folder."""
    spec = tmp_path / "b.toml"
    spec.write_text('traces = ["bundled"]\nkind = "des"\n[axes]\ncapacity = [4, 8]\n[fixed]\npolicy = "lru"\nbatch = 0\n')
    with pytest.raises(MoesimError, match=r"every one of the 2 configuration\(s\) run failed.*batch must be at least 1"):
        run_sweep(load_spec(spec), tmp_path / "r.parquet")
    spec.write_text('traces = ["bundled"]\nkind = "des"\n[axes]\nhardware = ["rtx4090", "hw.toml"]\ncapacity = [4, 6]\n'
                    '[[exclude]]\nhardware = "hw.toml"\ncapacity = 6\n')
    loaded = load_spec(spec)
    assert [(Path(c["hardware"]).name, c["capacity"]) for c in loaded.configs()] == [
        ("rtx4090", 4), ("rtx4090", 6), ("hw.toml", 4)]


def test_an_exclude_rule_of_no_key_or_rules_that_leave_nothing_are_refused(cli, tmp_path, monkeypatch):
    """An empty [[exclude]] rule matched every row, and rules that left none wrote a results file of no column (which
    --resume and plot then refused), exit 0; off a terminal the error also left an empty line on stdout."""
    monkeypatch.chdir(tmp_path)
    head = 'traces = ["bundled"]\n[axes]\npolicy = ["lru", "lfu"]\ncapacity = [4]\n[[exclude]]\n'
    for name, rule, message in (("empty", "", "[[exclude]] rule 1 is empty: a rule names the values of the rows it "
                                              "leaves out"),
                                ("all", "capacity = 4\n", "its [[exclude]] rules leave out every configuration: "
                                                          "nothing to run")):
        (tmp_path / f"{name}.toml").write_text(head + rule)
        code, out, err = cli("sweep", f"{name}.toml", "--out", "r.parquet")
        assert (code, out, err) == (1, "", f"moesim: error: {name}.toml: {message}\n")
        assert not (tmp_path / "r.parquet").exists()


def test_a_specs_errors_name_its_keys_and_the_spec_on_the_command_line_too(cli, tmp_path, monkeypatch):
    """The command line named a spec's key as an option (`--gamma`) and an all-failed sweep by its results file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.toml").write_text('traces = ["bundled"]\n[axes]\npolicy = ["lru", "lfu"]\ncapacity = [4]\n'
                                     '[fixed]\ngamma = 0.5\n')
    code, _, err = cli("sweep", "g.toml", "--out", "r.parquet")
    assert (code, err) == (1, "moesim: error: g.toml: gamma: no policy or prefetcher of this run takes it (policies "
                              "lru, lfu; prefetchers none)\n")
    (tmp_path / "c.toml").write_text('traces = ["bundled"]\n[axes]\ncapacity = ["abc"]\n')
    code, _, err = cli("sweep", "c.toml", "--out", "r.parquet")
    assert (code, err) == (1, "moesim: error: c.toml: every one of the 1 configuration(s) run failed, so nothing was "
                              "written to r.parquet; the first: [cache] capacity must be auto or a whole number from 0 to 2,147,483,647, "
                              "got 'abc'\n")
    assert not (tmp_path / "r.parquet").exists()
