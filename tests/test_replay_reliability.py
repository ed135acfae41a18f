"""replay and validate as a new user meets them: the settings they take are those ``sim run`` takes, read as it reads
them (the virtual replay equals it to the last bit), on every machine it runs; what a real backend cannot read is
refused in one line; the Python API's list arguments are checked in one line; a placement shows as placed."""

from __future__ import annotations

import json

import pytest

import moesim
from moesim.errors import MoesimError

TINY = ["--model", "olmoe-1b-7b", "--layers", "2", "--scale", "0.125"]


def one_line_error(cli, *args) -> str:
    status, _, err = cli(*args)
    assert status == 1 and err.count("\n") == 1 and err.startswith("moesim: error: "), (args, status, err)
    return err.removeprefix("moesim: error: ").rstrip("\n")


@pytest.fixture(scope="module")
def olmoe(tmp_path_factory):
    """The sweep's trace: OLMoE (16 layers, 64 experts, top-8), 2 sequences of 16 tokens."""
    path = tmp_path_factory.mktemp("replay-reliability") / "t.parquet"
    moesim.write_trace(moesim.synth_trace(16, 64, 8, sequences=2, tokens=16, seed=1, model="olmoe-1b-7b"), path)
    return path


def sim_run(cli, *args) -> dict:
    code, out, err = cli("sim", "run", *args, "--json")
    assert code == 0, err
    return json.loads(out)["results"][0]


def run(cli, *args) -> dict:
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_replay_and_validate_read_threads_as_sim_run(cli, olmoe, tmp_path):
    """``threads`` was dropped from a configuration file and the API (the replay timed the machine's 16 threads: 24.339
    ms against sim run's 24.183), and replay and validate had no --threads: each now reads it as sim run does."""
    saved = tmp_path / "thr.toml"
    simulated = sim_run(cli, olmoe, "--capacity", "8", "--strategy", "hybrid", "--threads", "4", "--save-config", saved)
    default = sim_run(cli, olmoe, "--capacity", "8", "--strategy", "hybrid")
    assert simulated["tpot_s"] != default["tpot_s"]  # the case: 4 threads time otherwise than every core
    tpot = simulated["tpot_s"]
    assert run(cli, "replay", olmoe, "--backend", "virtual", "--config", saved)["tpot_s"] == tpot
    typed = run(cli, "replay", olmoe, "--backend", "virtual", "--capacity", "8", "--strategy", "hybrid", "--threads", "4")
    assert typed["tpot_s"] == typed["sim_tpot_s"] == tpot
    [row] = run(cli, "validate", olmoe, "--backend", "virtual", "--config", saved)["rows"]
    assert row["real_tpot_s"] == row["sim_tpot_s"] == tpot
    [row] = run(cli, "validate", olmoe, "--backend", "virtual", "--policies", "lru", "--capacity", "8", "--strategy",
                "hybrid", "--threads", "4")["rows"]
    assert row["real_tpot_s"] == row["sim_tpot_s"] == tpot
    trace = moesim.load_trace(olmoe)
    assert moesim.run_replay(trace, backend="virtual", capacity=8, strategy="hybrid", threads=4).tpot_s == tpot
    [row] = moesim.validate(trace, backend="virtual", policies=("lru",), capacities=(8,), strategy="hybrid", threads=4)
    assert row["sim_tpot_s"] == row["real_tpot_s"] == tpot


@pytest.mark.parametrize("extra", [["--warmup", "1"], ["--prompt", "40"], ["--split", "best"], ["--reset"],
                                   ["--other-dtype", "q4_k"], ["--cpu", "ryzen-9950x"], ["--ram", "64"],
                                   ["--prompt", "40", "--strategy", "cpu-experts", "--cpu-layers", "4"]])
def test_the_virtual_replay_equals_sim_run_with_threads_and_each_setting_it_now_takes(cli, olmoe, extra):
    """The options replay and validate lacked (--prompt, --warmup, --split, --reset, --other-dtype, and the machine's
    --cpu, --ram), typed beside --threads: step by step the virtual replay is sim run, and so is each validate row."""
    placed = "--strategy" in extra
    args = [olmoe, "--threads", "4", *([] if placed else ["--strategy", "hybrid", "--capacity", "8"]), *extra]
    simulated = sim_run(cli, *args)
    replayed = run(cli, "replay", *args, "--backend", "virtual")
    assert replayed["tpot_s"] == replayed["sim_tpot_s"] == simulated["tpot_s"]
    assert replayed["tpot_p99_s"] == simulated["tpot_p99_s"] and replayed["hit_rate"] == simulated["hit_rate"]
    assert replayed["decode_steps"] == (16 if "--warmup" in extra else 32)  # the first batch (sequence) not measured
    policy = [] if placed else ["--policies", "lru"]
    [row] = run(cli, "validate", *args, *policy, "--backend", "virtual")["rows"]
    assert row["real_tpot_s"] == row["sim_tpot_s"] == simulated["tpot_s"]


def test_the_api_replay_takes_every_setting_of_a_simulated_run():
    """Each of them, step by step, through ``moesim.run_replay`` and ``moesim.simulate``."""
    trace = moesim.synth_trace(16, 64, 8, sequences=2, tokens=6, seed=3, model="olmoe-1b-7b")
    for settings in (dict(threads=2, warmup=1), dict(threads=2, vram=16.0, capacity="auto"),
                     dict(threads=2, split="best", reset=True, prompt=24),
                     dict(strategy="gpu-cache", prefetch="history", warmup=1)):  # the warm-up's prefetches uncounted
        settings = dict(strategy="hybrid", capacity=8) | settings
        simulated = moesim.simulate(trace, **settings)
        replayed = moesim.run_replay(trace, backend="virtual", **settings)
        assert replayed.step_times.tolist() == simulated.step_times.tolist(), settings
        assert (replayed.hits, replayed.accesses, replayed.loads, replayed.prefetch_loads) == \
            (simulated.hits, simulated.accesses, simulated.loads, simulated.prefetch_loads), settings


def test_a_real_backend_refuses_what_it_cannot_read_and_says_its_format(cli, olmoe, tmp_path):
    """``replay --backend cpu --dtype int2`` ran fp32 and said nothing: a real backend computes in its own format and
    on this machine, so a format, a simulated part or a thread count typed for it is refused, before any calibration
    or file; a configuration file, which holds every setting, is not."""
    base = ["replay", olmoe, *TINY, "--capacity", "8", "--workdir", tmp_path]
    assert one_line_error(cli, *base, "--dtype", "int2") == (
        "--dtype: --backend cpu computes every weight in its own format, fp32, so nothing reads it (the virtual "
        "backend does)")
    assert one_line_error(cli, *base, "--backend", "cuda", "--dtype", "int2", "--other-dtype", "q4_k") == (
        "--dtype, --other-dtype: --backend cuda computes every weight in its own format, bf16, so nothing reads them "
        "(the virtual backend does)")
    assert one_line_error(cli, *base, "--link", "pcie3") == (
        "--link: --backend cpu runs on this machine (link and ssd swap simulated presets), so nothing reads it (the "
        "virtual backend does)")
    machine = ("--backend cpu runs on this machine, as the hardware file calibrated on it describes it (its CPU and "
               "memory; torch computes with every core), so nothing reads {} (the virtual backend does)")
    assert one_line_error(cli, "replay", olmoe, *TINY, "--strategy", "cpu-experts", "--threads", "2", "--workdir",
                          tmp_path) == "--threads: " + machine.format("it")
    assert one_line_error(cli, *base, "--vram", "8", "--ram", "16") == "--vram, --ram: " + machine.format("them")
    assert one_line_error(cli, "validate", olmoe, *TINY, "--capacity", "8", "--dtype", "int2", "--workdir",
                          tmp_path) == ("--dtype: --backend cpu computes every weight in its own format, fp32, so "
                                        "nothing reads it (the virtual backend does)")
    trace = moesim.load_trace(olmoe)
    with pytest.raises(MoesimError) as refused:
        moesim.run_replay(trace, backend="cpu", capacity=8, dtype="int2")
    assert str(refused.value) == ("dtype: backend='cpu' computes every weight in its own format, fp32, so nothing "
                                  "reads it (the virtual backend does)")
    with pytest.raises(MoesimError, match=r"^threads: backend='cpu' runs on this machine"):
        moesim.validate(trace, backend="cpu", policies="lru", capacities=[8], threads=2)
    assert not list(tmp_path.iterdir())  # refused before anything was written
    # the format is in the output: the virtual backend's is the simulated run's
    assert run(cli, "replay", olmoe, "--backend", "virtual", "--capacity", "8", "--dtype", "q4_k")["dtype"] == "q4_k"
    assert run(cli, "replay", olmoe, "--backend", "virtual", "--capacity", "8")["dtype"] == "bf16"


def test_a_real_replay_says_the_format_it_ran(cli, olmoe, tmp_path):
    pytest.importorskip("torch")
    from moesim.sim.hardware import write_hardware
    from moesim.sim.machine import GPU, Hardware, Link, MeasuredCompute
    from moesim.sim.presets import CPUS

    compute = MeasuredCompute("olmoe-1b-7b@x0.125", layer_s=200e-6, expert_s=20e-6, layer_token_s=5e-6,
                              expert_token_s=2e-6)
    hardware = tmp_path / "tiny.toml"
    write_hardware(Hardware("tiny", GPU("cpu", 1.0, 1.0, hbm_gb=16.0), Link("disk", 2.0, 1.0, 50.0), source="test",
                            compute=compute, cpu=CPUS["ryzen-7950x"]), hardware)
    work = tmp_path / "work"
    work.mkdir()
    saved = tmp_path / "run.toml"
    moesim.Config.build(dtype="int2", threads=2, capacity=8).to_toml(saved)  # a file's are not refused: every setting
    r = run(cli, "replay", olmoe, *TINY, "--hardware", hardware, "--config", saved, "--warmup", "1", "--workdir", work)
    assert (r["dtype"], r["strategy"], r["cpu_layers"], r["decode_steps"]) == ("fp32", "gpu-cache", None, 16)
    assert r["hit_rate"] == r["sim_hit_rate"] and not list(work.iterdir())


def test_the_virtual_replay_runs_a_machine_without_a_gpu_as_sim_run(cli, olmoe, tmp_path):
    """``--hardware ryzen-7950x --strategy cpu-experts`` (the strategy sim run's own refusal names) raised
    AttributeError ('NoneType' object has no attribute 'engines'), and so did hybrid at capacity 0 and a CPU-only
    hardware file: the replay runs them, equal to sim run; with no strategy given, both run cpu-experts."""
    from moesim.sim.hardware import get_hardware, write_hardware

    cpu_only = tmp_path / "here.toml"
    write_hardware(get_hardware("ryzen-9950x"), cpu_only)
    for machine in ("ryzen-7950x", cpu_only):
        for placed in ([], ["--strategy", "cpu-experts"], ["--strategy", "cpu-experts", "--cpu-layers", "16",
                                                           "--threads", "8"], ["--strategy", "hybrid", "--capacity", "0"]):
            # no strategy: llama.cpp's CPU build (cpu-experts), in replay as in sim run
            args = [olmoe, "--hardware", machine, *placed]
            simulated = sim_run(cli, *args)
            replayed = run(cli, "replay", *args, "--backend", "virtual")
            assert replayed["tpot_s"] == replayed["sim_tpot_s"] == simulated["tpot_s"], (machine, placed)
            assert replayed["hit_rate"] == simulated["hit_rate"] == 0.0
    [row] = run(cli, "validate", olmoe, "--backend", "virtual", "--hardware", "ryzen-7950x", "--strategy",
                "cpu-experts", "--cpu-layers", "16")["rows"]
    assert row["real_tpot_s"] == row["sim_tpot_s"] == sim_run(cli, olmoe, "--hardware", "ryzen-7950x")["tpot_s"]


def test_validate_takes_a_configuration_file(cli, olmoe, tmp_path):
    """``validate --config run.toml`` raised KeyError: 'policy': it takes the file's policy and capacity, and typed
    ones over them."""
    saved = tmp_path / "run.toml"
    simulated = sim_run(cli, olmoe, "--policy", "lfu", "--capacity", "8", "--save-config", saved)
    rows = run(cli, "validate", olmoe, "--backend", "virtual", "--config", saved)["rows"]
    assert [(r["policy"], r["capacity"], r["real_tpot_s"], r["sim_tpot_s"]) for r in rows] == [
        ("lfu", 8, simulated["tpot_s"], simulated["tpot_s"])]
    rows = run(cli, "validate", olmoe, "--backend", "virtual", "--config", saved, "--policies", "lru,lfu")["rows"]
    assert [(r["policy"], r["capacity"]) for r in rows] == [("lru", 8), ("lfu", 8)]
    assert rows[1]["sim_tpot_s"] == simulated["tpot_s"]
    placed = tmp_path / "placed.toml"
    simulated = sim_run(cli, olmoe, "--strategy", "cpu-experts", "--cpu-layers", "3", "--save-config", placed)
    [row] = run(cli, "validate", olmoe, "--backend", "virtual", "--config", placed)["rows"]
    assert (row["strategy"], row["cpu_layers"], row["sim_tpot_s"]) == ("cpu-experts", 3, simulated["tpot_s"])


def test_the_apis_list_arguments_are_checked_in_one_line(olmoe):
    """validate's policies, capacities and cpu_layers and mrc's capacities raised IndexError, TypeError or ValueError,
    a policy's name read as its letters ("unknown policy 'l'"), and a value listed twice ran twice; hitrate's
    log_evictions raised NumPy's errors."""
    trace = moesim.load_trace(olmoe)

    def validate(**kwargs):
        return moesim.validate(trace, backend="virtual", **{"policies": ("lru",), "capacities": (8,)} | kwargs)

    cases = [(lambda: validate(policies=[]), "policies is empty: give one value or more"),
             (lambda: validate(capacities=8), "capacities must be a list (capacities=[8]), got int 8"),
             (lambda: validate(capacities=()), "capacities is empty: give one value or more"),
             (lambda: validate(capacities=(8, 8)), "capacities: 8 listed twice; each value is one run"),
             (lambda: validate(policies=["lru", "lru"]), "policies: 'lru' listed twice; each value is one run"),
             (lambda: validate(policies=5), "policies must be a list or one policy's name, got int 5"),
             (lambda: validate(strategy="cpu-experts", cpu_layers=2), "cpu_layers must be a list (cpu_layers=[2]), "
                                                                      "got int 2"),
             (lambda: moesim.hitrate(trace, "lru", 8, log_evictions=-1),
              "log_evictions must be a whole number of evictions to keep, 0 or more, got int -1"),
             (lambda: moesim.hitrate(trace, "lru", 8, log_evictions="a"),
              "log_evictions must be a whole number of evictions to keep, 0 or more, got str 'a'"),
             (lambda: moesim.hitrate(trace, "lru", 8, log_evictions=True),
              "log_evictions must be a whole number of evictions to keep, 0 or more, got bool True"),
             (lambda: moesim.mrc(trace, "lru", capacities=8), 'capacities must be a list or "all" (capacities=[8]), '
                                                              "got int 8"),
             (lambda: moesim.mrc(trace, "lru", capacities=[8, 8]), "capacities: 8 listed twice; each value is one run"),
             (lambda: moesim.mrc(trace, "lru", capacities="some"), 'capacities must be a list or "all", got str '
                                                                   "'some'")]
    for call, message in cases:
        with pytest.raises(MoesimError) as refused:
            call()
        assert str(refused.value) == message
    # one policy's name is that policy; a log longer than the run's evictions keeps them all
    assert [r["policy"] for r in validate(policies="lru")] == ["lru"]
    assert [r["error_pct"] for r in validate(policies="lru", capacities=[8, [8] * 8 + [12] * 8])] == [0.0, 0.0]
    every = moesim.hitrate(trace, "lru", 8, log_evictions=10 ** 15).evictions
    assert len(every) == moesim.hitrate(trace, "lru", 8).misses - 8 * 16  # each miss once the layer's 8 slots are full
    assert moesim.hitrate(trace, "lru", 8, log_evictions=5).evictions.tolist() == every[:5].tolist()


def test_validate_gives_a_policys_parameter_to_each_policy_taking_it_and_refuses_what_no_run_reads(cli, olmoe):
    """``policies=["gamma"], gamma=0.5`` was refused (the parameter checked against the default policy, lru), on the
    command line too; ``policy=`` and ``capacity=`` beside the lists, and ``cpu_layers`` under a strategy that keeps
    a cache, were read by no run and accepted."""
    trace = moesim.load_trace(olmoe)
    rows = moesim.validate(trace, backend="virtual", policies=["lru", "gamma"], capacities=[8], gamma=0.5)
    assert [(r["policy"], r["sim_tpot_s"]) for r in rows] == [
        ("lru", moesim.simulate(trace, policy="lru", capacity=8).tpot_s),
        ("gamma", moesim.simulate(trace, policy="gamma", gamma=0.5, capacity=8).tpot_s)]
    assert rows[1]["sim_tpot_s"] != moesim.simulate(trace, policy="gamma", capacity=8).tpot_s  # 0.5 is not the default
    typed = run(cli, "validate", olmoe, "--backend", "virtual", "--policies", "lru,gamma", "--gamma", "0.5",
                "--capacity", "8")["rows"]
    assert [r["sim_tpot_s"] for r in typed] == [r["sim_tpot_s"] for r in rows]
    for kwargs, message in (({"policy": "gamma"}, "policy: validate runs each of policies=[...]; pass "
                                                  "policies=['gamma']"),
                            ({"capacity": 4}, "capacity: validate runs each of capacities=[...]; pass capacities=[4]"),
                            ({"policies": ["lru"], "gamma": 0.5}, "gamma: no policy or prefetcher of this run takes it "
                                                                  "(policies lru; prefetchers none)"),
                            ({"cpu_layers": [2]}, "cpu_layers: strategy gpu-cache places no layers on the CPU (it "
                                                  "keeps a cache, whose runs are the policies and capacities "
                                                  "listed), so nothing reads it")):
        with pytest.raises(MoesimError) as refused:
            moesim.validate(trace, backend="virtual", **kwargs)
        assert str(refused.value) == message
    code, _, err = cli("validate", olmoe, "--backend", "virtual", "--cpu-layers", "2")
    assert code == 1 and err.startswith("moesim: error: --cpu-layers: strategy gpu-cache places no layers")
    for kwargs, message in (({"gamma": 0.5}, "gamma: strategy cpu-experts keeps no expert cache, so nothing reads "
                                             "it"),
                            ({"policies": ["gamma"]}, "policies: strategy cpu-experts keeps no expert cache (it places "
                                                      "layers: cpu_layers=[...]), so nothing reads it")):
        with pytest.raises(MoesimError) as refused:
            moesim.validate(trace, backend="virtual", strategy="cpu-experts", cpu_layers=[0, 8], **kwargs)
        assert str(refused.value) == message
    assert len(moesim.validate(trace, backend="virtual", strategy="cpu-experts", cpu_layers=[0, 8])) == 2


def test_a_placing_strategy_shows_what_it_placed(cli, olmoe):
    """A cpu-experts replay read "lru, C 0" and its JSON had no strategy: it reads as sim run's placement column,
    and the JSON says the strategy and the layers on the CPU."""
    args = [olmoe, "--backend", "virtual", "--strategy", "cpu-experts", "--cpu-layers", "1"]
    code, out, err = cli("replay", *args)
    assert code == 0, err
    assert "layers on CPU 1/16" in out and "lru" not in out and "cpu-experts, experts bf16, fused" in out
    r = run(cli, "replay", *args)
    assert (r["strategy"], r["cpu_layers"], r["dtype"]) == ("cpu-experts", 1, "bf16")
    auto = run(cli, "replay", olmoe, "--backend", "virtual", "--strategy", "cpu-experts", "--cpu-layers", "auto",
               "--dtype", "q4_k")
    assert auto["cpu_layers"] == 0 and auto["dtype"] == "q4_k"  # resolved: the fewest that fit (all do, in Q4_K)
    code, out, err = cli("replay", olmoe, "--backend", "virtual", "--capacity", "8")  # a cache: its policy and slots
    assert code == 0 and "│ lru    │ 8 │" in out and "placement" not in out, err
    code, out, err = cli("validate", *args[:-1], "0,1")
    assert code == 0 and "layers on CPU 0/16" in out and "layers on CPU 1/16" in out and "lru" not in out, err
    rows = run(cli, "validate", *args[:-1], "0,1")["rows"]
    assert [(r["strategy"], r["cpu_layers"]) for r in rows] == [("cpu-experts", 0), ("cpu-experts", 1)]


def test_without_torch_a_real_backend_is_refused_before_any_file_is_written(cli, olmoe, tmp_path, monkeypatch):
    """The README's replay, validate and calibrate forms on a CPU, without torch: one line saying how to install it,
    before this machine is calibrated or an expert file written (it took 25-55 s, writing files, to say so)."""
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # an import of torch fails, as where it is not installed
    work = tmp_path / "work"
    work.mkdir()
    for args in (("replay", olmoe, "--model", "olmoe-1b-7b", "--policy", "lru", "--capacity", "16"),
                 ("validate", olmoe, "--model", "olmoe-1b-7b"),
                 ("calibrate", "--model", "olmoe-1b-7b", "--out", tmp_path / "hw.toml")):
        assert one_line_error(cli, *args, "--workdir", work) == "replay computes with torch: pip install 'moesim[torch]'"
        assert not any(work.iterdir()) and not (tmp_path / "hw.toml").exists()
