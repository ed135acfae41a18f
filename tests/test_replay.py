"""calibrate / replay / validate: the virtual backend equals the simulator exactly for every kind of
decision and both kernel kinds; the CPU backend gives equal hit rates within an honest band, and
cleans up when interrupted."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

# its module-scoped fixtures are built once: its tests run on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_replay")

pytest.importorskip("torch")

TINY = ["--model", "olmoe-1b-7b", "--layers", "2", "--scale", "0.125"]


@pytest.fixture(scope="module")
def olmoe(tmp_path_factory):
    from moesim.tracegen.models import get_model
    from moesim.tracegen.io import write_trace
    from moesim.tracegen.synth import synth_trace

    m = get_model("olmoe-1b-7b")
    path = tmp_path_factory.mktemp("replay") / "olmoe.parquet"
    write_trace(synth_trace(m.num_layers, m.num_experts, m.top_k, 2, 8, seed=0, model=m.name, meta=m.trace_meta()),
                path)
    return path


@pytest.fixture(scope="module")
def tiny_hardware(tmp_path_factory):
    """A hardware file with a [compute] table for the tiny model, written as calibrate writes one but from fixed
    numbers: the replays below check what was executed, which no timing changes, so they need no calibration (one
    refused on a busy host would fail them); the calibration itself is tested on its own below."""
    from moesim.sim.hardware import write_hardware
    from moesim.sim.machine import GPU, Hardware, Link, MeasuredCompute
    from moesim.sim.presets import CPUS

    compute = MeasuredCompute("olmoe-1b-7b@x0.125", layer_s=200e-6, expert_s=20e-6, layer_token_s=5e-6,
                              expert_token_s=2e-6)
    hw = Hardware("tiny", GPU("cpu (roofline unused: see [compute])", 1.0, 1.0, hbm_gb=16.0),
                  Link("disk", 2.0, 1.0, 50.0), source="test", compute=compute, cpu=CPUS["ryzen-7950x"])
    path = tmp_path_factory.mktemp("hardware") / "tiny.toml"
    write_hardware(hw, path)
    return path


def test_validate_tiny_cpu(cli, olmoe, tiny_hardware, tmp_path):
    code, out, err = cli("validate", olmoe, *TINY, "--policies", "lru,belady", "--capacity", "8,16",
                         "--hardware", tiny_hardware, "--workdir", tmp_path, "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [(r["policy"], r["capacity"]) for r in rows] == [("lru", 8), ("belady", 8), ("lru", 16), ("belady", 16)]
    for r in rows:
        assert r["hit_rate_real"] == r["hit_rate_sim"]  # the same decisions, executed
        assert r["layers"] == 2 and r["scale"] == 0.125
        # what was executed is checked exactly; how long it took is this host's (its memory bandwidth swings
        # several-fold), so the error is a number, never a band: the figures come from
        # benchmarks/replay_fidelity.py, and the virtual backend's times are tested exactly
        assert r["real_tpot_s"] > 0 and math.isfinite(r["error_pct"]), r
    assert rows[0]["sim_speedup"] == rows[0]["real_speedup"] == 1.0
    assert not list(tmp_path.iterdir())  # expert files removed


def test_cpu_experts_replay_on_the_cpu_backend(cli, olmoe, tiny_hardware, tmp_path):
    """The first N layers' experts computed from host memory, the rest placed in fast memory: the hardware
    file's [cpu] section times the former (the decisions are checked, not the times: as above)."""
    code, out, err = cli("validate", olmoe, *TINY, "--strategy", "cpu-experts", "--cpu-layers", "0,1,2",
                         "--hardware", tiny_hardware, "--workdir", tmp_path, "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["cpu_layers"] for r in rows] == [0, 1, 2]
    assert [r["hit_rate_real"] for r in rows] == [r["hit_rate_sim"] for r in rows] == [1.0, 0.5, 0.0]
    assert all(r["real_tpot_s"] > 0 and math.isfinite(r["error_pct"]) for r in rows), rows
    for args, message in ((["--strategy", "hybrid"], "virtual only"), (["--strategy", "cpu-experts", "--backend",
                                                                        "cuda"], "executes strategies gpu-cache")):
        code, _, err = cli("replay", olmoe, *TINY, "--hardware", tiny_hardware, "--workdir", tmp_path, *args)
        assert code == 1 and message in err, err
    assert not list(tmp_path.iterdir())


def test_calibrate_writes_a_hardware_file_the_simulator_takes(cli, olmoe, tmp_path):
    from moesim.sim.hardware import load_hardware

    calibrated = tmp_path / "hw.toml"
    tiniest = [*TINY[:-1], "0.0625"]  # the model at 1/16 of its widths: a calibration in half the time of 1/8's
    for _ in range(10):  # a refusal says to calibrate again on an idle machine (the other test worker keeps it busy)
        code, out, err = cli("calibrate", *tiniest, "--out", calibrated, "--repeats", "3", "--workdir", tmp_path)
        if code == 0:
            break
        assert any(m in err for m in ("negative, the parts timed alone were slower", "ran slower than the all-miss ones",
                                      "speed moved under them")), err
        assert not list(tmp_path.iterdir())  # nothing half-written
    assert code == 0, err
    hw = load_hardware(calibrated)
    assert hw.compute.name == "olmoe-1b-7b@x0.0625" and hw.compute.expert_s > 0 and hw.link.gbps > 0
    assert hw.compute.layer_ctx_s >= 0  # fitted from timings: above 0 on an idle machine, not asserted beside a busy one
    from moesim.sim.local_machine import isa, physical_cores

    # this machine as the OS reports it, computing with every core as the replay does; torch's formats' own rates
    cpu = hw.cpu
    assert cpu.cores * cpu.sockets == cpu.threads == physical_cores() and cpu.isa == isa() and cpu.dram_gbps > 0
    assert [f for f, _ in cpu.unpack_gbps] == [f for f, _ in cpu.matmul_gflops] == ["bf16", "fp32"]
    # the host's RAM as /proc gives it (required: a hardware file never holds a 0 GiB memory)
    from moesim.sim.local_machine import MEMINFO, parse_meminfo, read_text

    assert hw.cpu.ram_gb == pytest.approx(parse_meminfo(read_text(MEMINFO))["MemTotal"] / 2 ** 30, rel=1e-3)
    code, out, err = cli("sim", "run", olmoe, "--model", "olmoe-1b-7b", "--hardware", calibrated,
                         "--capacity", "16", "--json")
    # measured for the scaled model: never silently the roofline for the full one
    assert code == 1 and "measured for olmoe-1b-7b@x0.0625, not olmoe-1b-7b" in err
    assert len(err.strip().splitlines()) == 1
    code, out, err = cli("replay", olmoe, *tiniest, "--capacity", "8", "--hardware", calibrated,
                         "--workdir", tmp_path, "--json")
    assert code == 0, err
    assert [p.name for p in tmp_path.iterdir()] == ["hw.toml"]  # expert files removed
    r = json.loads(out)
    assert r["hit_rate"] == r["sim_hit_rate"] and r["decode_steps"] == 16 and r["tpot_s"] > 0


def test_copies_are_a_line_fitted_on_relative_errors():
    from moesim.errors import MoesimError
    from moesim.replay.calibrate import copy_line

    nbytes = np.array([4096.0, 1e5, 1e6, 1e7, 3.3e7])
    assert copy_line(nbytes, 10e-6 + nbytes / 50e9) == pytest.approx((50.0, 10.0), rel=1e-9)
    # the largest copy 5% slow: on relative errors the latency stays within 1% (on absolute ones it fell to 7.8 us)
    slow_last = (10e-6 + nbytes / 50e9) * np.array([1, 1, 1, 1, 1.05])
    assert abs(copy_line(nbytes, slow_last)[1] - 10.0) < 0.1
    # an H200's copies of a tiny expert, 4 KB to 196 KB: all latency, no bandwidth to fit
    seconds = np.array([1.0573e-05, 1.4813e-05, 9.681e-06, 9.8005e-06, 8.8715e-06])
    with pytest.raises(MoesimError, match="did not take longer with size"):
        copy_line(np.array([4096.0, 24576, 49152, 98304, 196608]), seconds)


def test_an_unsteady_or_impossible_copy_fit_is_refused(tiny_hardware):
    """All-miss replays whose steps the simulation cannot reach with any plausible copy time (the executor's
    overhead fitted too large, as an H200's first replay in a process made it while cuDNN built attention plans) are refused, not fitted to 0 us a copy; so
    are three runs of them that differ by more than MOST_SPREAD times."""
    from dataclasses import replace

    from moesim.errors import MoesimError
    from moesim.replay.calibrate import MOST_SPREAD, _copy_fit, _executor_log, _steady
    from moesim.replay.run import shrink
    from moesim.sim.hardware import load_hardware
    from moesim.tracegen.models import get_model
    from moesim.tracegen.synth import synth_trace

    m = get_model("olmoe-1b-7b")
    _, spec = shrink(synth_trace(m.num_layers, m.num_experts, m.top_k, 1, 1, seed=0), m, 2, 0.125)
    hw = load_hardware(tiny_hardware)
    small, trace = _executor_log(spec, 3, 0)
    slow = replace(hw, compute=replace(hw.compute, layer_s=1.0))  # a second a layer: no all-miss step is that slow
    with pytest.raises(MoesimError, match="ran slower than the all-miss ones; calibrate again"):
        _copy_fit(slow, small, trace, "cpu", 0.01)
    assert _steady([3e-3, 1e-3, 2e-3]) == 2e-3
    assert _steady([1e-3, MOST_SPREAD * 1e-3, 1e-3]) == 1e-3  # at the bound: taken
    with pytest.raises(MoesimError, match="took 4.70 to 64.00 ms a step in three runs"):
        _steady([64e-3, 4.7e-3, 4.7e-3])  # the H200's first all-miss replays


def test_a_model_too_large_is_refused_with_advice(cli, tmp_path):
    from moesim.tracegen.models import get_model
    from moesim.tracegen.io import write_trace
    from moesim.tracegen.synth import synth_trace

    m = get_model("qwen3-235b-a22b")
    path = tmp_path / "big.parquet"
    write_trace(synth_trace(m.num_layers, m.num_experts, m.top_k, 1, 2, seed=0, model=m.name), path)
    for command in (["replay", path, "--model", m.name, "--capacity", "8"], ["calibrate", "--model", m.name,
                                                                               "--out", tmp_path / "hw.toml"]):
        code, _, err = cli(*command, "--workdir", tmp_path)
        assert code == 1 and "GB" in err and "--layers N" in err and "--scale S" in err, err
        assert len(err.strip().splitlines()) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["big.parquet"]
    for command in (["replay", path, "--model", m.name, "--capacity", "8"], ["calibrate", "--model", m.name,
                                                                               "--out", tmp_path / "hw.toml"]):
        code, _, err = cli(*command, "--layers", "1", "--scale", "0.01", "--workdir", tmp_path / "absent")
        assert code == 1 and f"--workdir {tmp_path / 'absent'}: not a writable folder" in err, err
        assert len(err.strip().splitlines()) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["big.parquet"]


def test_killing_a_replay_leaves_no_files(olmoe, tiny_hardware, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "moesim", "replay", str(olmoe), *TINY, "--capacity", "8",
                             "--workdir", str(work), "--hardware", str(tiny_hardware)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not any(p.name.startswith("moesim-replay-") for p in work.iterdir()) and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, f"the replay ended before it could be killed: {proc.stderr.read().decode()}"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert os.listdir(work) == []


@pytest.fixture(scope="module")
def with_prompts():
    from moesim.tracegen.models import get_model
    from moesim.tracegen.synth import synth_trace

    m = get_model("olmoe-1b-7b")
    return m, synth_trace(m.num_layers, m.num_experts, m.top_k, 2, 6, seed=1, prompt_tokens=4, model=m.name,
                          meta=m.trace_meta())


@pytest.mark.parametrize("config", [
    dict(capacity=0),                                        # no cache: every expert streamed
    dict(capacity=0, prefetch="oracle"),                     # no cache, prefetches wait in staging buffers
    dict(capacity=12, scope="global", policy="belady", prefetch="oracle"),
    dict(capacity=8, prefetch="prompt"),                     # a preload at each sequence's start
    dict(capacity=8, prefetch="history", mode="commit"),
    dict(capacity=8, policy="arc", batch=2),                 # a union of up to 16 experts: some loads bypass
])
def test_every_kind_of_decision_is_executed_with_the_simulators_hits(with_prompts, tmp_path, config):
    from moesim.replay.run import replay
    from moesim.sim.config import Config
    from moesim.sim.hardware import get_hardware

    model, trace = with_prompts
    r = replay(trace, Config.build(**config), get_hardware("rtx4090"), layers=2, scale=0.0625, workdir=tmp_path,
               model=model)
    assert (r.hit_rate, r.decode_steps) == (r.sim_hit_rate, 12 // config.get("batch", 1))
    assert r.hits + r.loads == r.accesses
    if config == dict(capacity=0):
        assert r.hits == 0 and r.prefetch_loads == 0
    if config == dict(capacity=0, prefetch="oracle"):  # every expert was staged for its cell
        assert r.hit_rate == 1.0 and r.prefetch_loads == r.accesses
    assert not list(tmp_path.iterdir())


def test_backend_errors_are_one_line(cli, olmoe, tmp_path):
    from moesim.tracegen.io import write_trace
    from moesim.tracegen.synth import synth_trace

    torch = pytest.importorskip("torch")
    mole = tmp_path / "mole.parquet"
    write_trace(synth_trace(12, 4, 4, 1, 4, seed=0, model="mole-160m-4e"), mole)
    cases = [(["replay", mole, "--model", "mole-160m-4e"], "MoLE"),
             (["replay", mole, "--model", "mole-160m-4e", "--backend", "virtual"], "MoLE"),
             (["replay", olmoe, *TINY, "--backend", "tpu"], "unknown backend 'tpu'"),
             (["replay", olmoe, *TINY, "--hardware", "rtx4090", "--link", "pcie3"], "link and ssd swap simulated presets"),
             (["replay", olmoe, *TINY, "--hardware", "rtx4090", "--ssd", "pcie4-nvme"], "--ssd: with no --dram-capacity"),
             (["replay", olmoe, "--backend", "virtual", "--capacity", "8", "--kernel", "grouped"],
              "kernel must be one of fused, per-expert, got 'grouped'"),
             (["replay", olmoe, "--backend", "virtual", "--capacity", "8", "--dram-capacity", "8"], "SSD"),
             (["replay", olmoe, "--backend", "virtual", "--hardware", tmp_path / "nope.toml"], "nope.toml")]
    if not torch.cuda.is_available():
        cases.append((["validate", olmoe, *TINY, "--backend", "cuda"], "needs a CUDA GPU"))
    for args, message in cases:
        real = "virtual" not in args  # the virtual backend writes no expert files, and takes no --workdir
        code, _, err = cli(*args, *(["--workdir", tmp_path] if real else []))
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert [p.name for p in tmp_path.iterdir()] == ["mole.parquet"]


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_validate_tiny_cuda(cli, olmoe, tmp_path):
    code, out, err = cli("validate", olmoe, *TINY, "--policies", "lru,belady", "--capacity", "8,16",
                         "--backend", "cuda", "--json")
    assert code == 0, err
    for r in json.loads(out)["rows"]:
        assert r["hit_rate_real"] == r["hit_rate_sim"]


VIRTUAL = [
    dict(capacity=16),                                        # hits and loads
    dict(capacity=0),                                         # no cache: every expert streamed
    dict(capacity=0, prefetch="oracle"),                      # prefetches wait in staging buffers
    dict(capacity=12, scope="global", policy="belady", prefetch="oracle"),
    dict(capacity=8, prefetch="prompt"),                      # preloads, and prefill rows
    dict(capacity=8, prefetch="history", mode="commit"),      # the predicted experts run
    dict(capacity=8, policy="arc", batch=2),                  # batch unions, some loads bypass
    dict(capacity=8, policy="gamma"),                         # Top-C bypasses
    dict(capacity=16, dram_capacity=64),                      # the SSD tier behind DRAM
    dict(capacity=8, batch=2, prefetch="oracle", context=512),
    dict(strategy="cpu-experts", cpu_layers=6),               # placed layers: CPU and resident experts
    dict(strategy="cpu-miss", capacity=64, scope="global", policy="static", prefetch="popular"),  # Fiddler
    dict(strategy="hybrid", capacity=8),                      # CPU computes, background fills
    dict(strategy="hybrid", capacity=0, batch=2),             # every routed expert on the CPU
    dict(strategy="hybrid", capacity=0, prefetch="oracle"),   # a staged copy the CPU beats runs there
    dict(strategy="cpu-miss", capacity=8, prefetch="history"),  # CPU beside GPU in a layer; a resident in flight
]


@pytest.mark.parametrize("kernel", ["fused", "per-expert"])
@pytest.mark.parametrize("config", VIRTUAL)
def test_the_virtual_backend_reproduces_the_simulator_exactly(with_prompts, config, kernel):
    """Copies and kernels take the simulator's durations: a replay that issues and waits as the
    simulator does gives its time per token to the last bit, step by step."""
    from moesim import Config, simulate
    from moesim.replay.run import replay
    from moesim.sim.hardware import get_hardware

    model, trace = with_prompts
    hw = get_hardware("rtx4090", ssd="pcie4-nvme")
    run = Config.build(kernel=kernel, **config)  # as settings of a configuration: the kernel unread where none runs
    r = replay(trace, run, hw, backend="virtual", model=model)
    sim = simulate(trace, run, model=model, hardware=hw)
    assert r.tpot_s == r.sim_tpot_s == sim.tpot_s
    assert r.step_times.tolist() == sim.step_times.tolist()
    assert (r.hits, r.accesses) == (sim.hits, sim.accesses)


@pytest.mark.parametrize("config", [dict(strategy="hybrid", capacity=8),                    # background fills
                                    dict(strategy="hybrid", capacity=0, prefetch="oracle"),  # staged copies
                                    dict(strategy="hybrid", capacity=8, prefetch="oracle"),
                                    dict(strategy="hybrid", capacity=12, prefetch="history", batch=2)])
def test_the_virtual_backend_starts_copies_at_the_routing_time_beside_shared_experts(config):
    """DeepSeek-V2-Lite's two shared experts run on the GPU beside the CPU's routed ones in hybrid (kTransformers'
    overlap, ``shared_s``): the simulator starts a layer's copies at the routing time, not after the shared experts,
    and so must the replay."""
    from moesim import Config, simulate
    from moesim.replay.run import replay
    from moesim.sim.hardware import get_hardware
    from moesim.tracegen.models import get_model
    from moesim.tracegen.synth import synth_trace

    m = get_model("deepseek-v2-lite")
    trace = synth_trace(m.num_layers, m.num_experts, m.top_k, 2, 6, seed=3, prompt_tokens=4, model=m.name,
                        meta=m.trace_meta())
    hw = get_hardware("a6000")  # there copies started after the shared experts came later than the simulator's
    sim = simulate(trace, model=m, hardware=hw, **config)
    assert sim.costs.shared_s.max() > 0  # the case this test is for
    r = replay(trace, Config.build(**config), hw, backend="virtual", model=m)
    assert r.step_times.tolist() == sim.step_times.tolist()
    assert (r.hits, r.accesses) == (sim.hits, sim.accesses)


@pytest.mark.parametrize("config", [dict(strategy="lowbit-miss", capacity=5, lowbit_threshold=0.3),
                                    dict(strategy="cpu-experts", cpu_layers=12, prompt=48)])
def test_the_virtual_backend_reproduces_low_bit_copies_and_offloaded_prompts(mixtral, config):
    """On the real trace (it has gate weights): HOBBIT's low-bit copies, and llama.cpp's offload of a
    48-token prompt's CPU layers to the GPU — each decision there, as its definition counts them."""
    from moesim import Config, simulate
    from moesim.replay.run import replay
    from moesim.sim.des_state import EV_CPU, EV_LOAD, EV_LOWBIT
    from moesim.sim.hardware import get_hardware
    from moesim.tracegen.schema import DECODE, PREFILL

    hw = get_hardware("rtx4090")
    r = replay(mixtral, Config.build(dtype="q4_k", **config), hw, backend="virtual")
    sim = simulate(mixtral, hardware=hw, dtype="q4_k", decisions=True, **config)
    assert r.step_times.tolist() == sim.step_times.tolist() and (r.hits, r.accesses) == (sim.hits, sim.accesses)
    req, log = sim.requests, sim.decisions
    event = log[:, 2]
    if config["strategy"] == "lowbit-miss":
        # a decode miss below the threshold (a mean gate weight < 0.3) fetches the low-bit copy
        assert (event == EV_LOWBIT).sum() == round(sim.lowbit_share * sim.accesses) > 0
        fetched = log[event == EV_LOWBIT]
        layer, expert = fetched[:, 1], fetched[:, 3] % mixtral.meta.num_experts
        weight = np.array([req.weights[row, lay][req.experts[row, lay] == e][0] for row, lay, e in
                           zip(fetched[:, 0], layer, expert)])
        assert (weight < 0.3).all() and (req.kind[fetched[:, 0]] == DECODE).all()
    else:
        # the prompt's row is offloaded: every routed expert of the 12 CPU layers copied to the GPU; decode
        # rows run those layers' experts on the CPU, one event each
        prompt_rows, cpu_layers = req.kind == PREFILL, np.arange(mixtral.meta.num_layers) < 12
        routed = req.experts >= 0
        assert sim.prefill_loads == (event == EV_LOAD).sum() == routed[prompt_rows][:, cpu_layers].sum() > 0
        assert (event == EV_CPU).sum() == routed[~prompt_rows][:, cpu_layers].sum()


def test_replay_virtual_equals_sim_run_from_the_command_line(cli, mixtral, tmp_path):
    from moesim.tracegen.trace import bundled_trace_path

    path = bundled_trace_path()
    for kernel in ("fused", "per-expert"):
        code, out, err = cli("replay", path, "--backend", "virtual", "--hardware", "h100", "--capacity", "4", "--kernel",
                             kernel, "--json")
        assert code == 0, err
        replayed = json.loads(out)
        code, out, err = cli("sim", "run", path, "--hardware", "h100", "--capacity", "4", "--kernel", kernel, "--json")
        assert code == 0, err
        simulated = json.loads(out)["results"][0]
        assert replayed["tpot_s"] == replayed["sim_tpot_s"] == simulated["tpot_s"]
        assert replayed["hit_rate"] == simulated["hit_rate"] and replayed["kernel"] == kernel


def test_a_kill_while_the_scratch_folder_is_made_still_removes_it(tmp_path):
    """A SIGTERM that lands the moment the folder exists (before its owner's clean-up holds it) is delivered once the
    ``with`` block holds it: the folder is removed, and the kill still ends the block (SystemExit, as ``unwind``
    raises it)."""
    import signal

    from moesim.errors import unwind
    from moesim.replay import scratch

    made = scratch.scratch_folder

    def killed_after_making(where, kind):
        folder = made(where, kind)
        os.kill(os.getpid(), signal.SIGTERM)  # the kill lands here: the folder made, not yet handed back
        return folder

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        scratch.scratch_folder = killed_after_making
        with pytest.raises(SystemExit):
            with scratch.scratch(tmp_path, "replay"):
                pass
    finally:
        scratch.scratch_folder = made
        signal.signal(signal.SIGTERM, previous)
    assert list(tmp_path.iterdir()) == []
