"""Every layer split over several GPUs (``moesim.sim.tensor_split``: llama.cpp's ``-sm tensor``, ik_llama.cpp's ``-sm
graph``): the all-reduce's closed form, each GPU's share of the weights it reads and of the memory it holds, the
slowest GPU's time, the refusals, and the plan's flags."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import moesim
from moesim.errors import MoesimError
from moesim.sim.config import Config
from moesim.sim.cost_model import SpecSheet, TensorSplit
from moesim.sim.engines import ENGINES, Launch
from moesim.sim.machine import CPU, GPU, Hardware, Link
from moesim.sim.memory import GIB, Footprint, account
from moesim.sim.tensor_split import ALLREDUCE_US, allreduce_s, describe, held, shares_of
from moesim.sim.weights import weights_of
from moesim.tracegen.models import get_model
from moesim.tracegen.synth import synth_trace
from moesim.tracegen.trace import bundled_trace_path

ROOT = Path(__file__).resolve().parents[1]
LINK = Link("L", gbps=32.0)  # 0.8 of 32 GB/s reached: 25.6e9 B/s
HOST = CPU("C", cores=8, ghz=4.0, isa="avx2", dram_gbps=50.0, ram_gb=128.0)


def _machine(*gpus: GPU, shares: tuple = ()) -> Hardware:
    return Hardware("box", gpus[0], LINK, cpu=HOST, more_gpus=tuple((g, LINK) for g in gpus[1:]), shares=shares)


@pytest.fixture(scope="module")
def qwen3_trace():
    return synth_trace(48, 128, 8, 2, 8, seed=0, model="qwen3-30b-a3b")


def test_an_allreduce_is_its_latency_and_a_rings_bytes():
    """2(G − 1)/G of the values over the slowest link, f32 below 32,768 values on two GPUs (262,144 on more), bf16
    above, after ALLREDUCE_US: the median of the four published figures."""
    assert ALLREDUCE_US == pytest.approx(np.median([39.0, 19.4, 42.1, 20.4]), abs=0.05)
    slow = Link("S", gbps=16.0)
    assert allreduce_s(2048.0, [LINK, LINK]) == pytest.approx(29.7e-6 + 1.0 * 2048 * 4 / 25.6e9, rel=1e-12)
    assert allreduce_s(40000.0, [LINK, slow]) == pytest.approx(29.7e-6 + 1.0 * 40000 * 2 / 12.8e9, rel=1e-12)
    assert allreduce_s(40000.0, [LINK] * 4) == pytest.approx(29.7e-6 + 1.5 * 40000 * 4 / 25.6e9, rel=1e-12)
    assert allreduce_s(300000.0, [LINK] * 4) == pytest.approx(29.7e-6 + 1.5 * 300000 * 2 / 25.6e9, rel=1e-12)


def test_shares_are_the_given_split_else_even():
    """llama.cpp's -sm tensor without -ts cuts every tensor evenly, whatever each GPU's memory."""
    assert shares_of(2, None).tolist() == [0.5, 0.5] and shares_of(4, None).tolist() == [0.25] * 4
    assert shares_of(2, (3, 1)).tolist() == [0.75, 0.25]
    assert held(np.array([0.75, 0.25]), 40.0, 2.0, 1.0).tolist() == [33.0, 12.0]
    assert describe([0.75, 0.25], "ROCm") == "ROCm0: 75% of every layer; ROCm1: 25% of every layer"


def _costs(hw: Hardware, tokens=(1.0,), ctx=(100.0,)):
    model = get_model("olmoe-1b-7b")
    weights = weights_of(None, model, "bf16", None)
    return TensorSplit(model, hw, weights, ENGINES["llama.cpp"]).costs(
        np.array(tokens), np.array(ctx), max_expert_tokens=4), model, weights


def test_each_gpu_reads_its_share_and_the_slowest_sets_the_time():
    """An expert on one token is memory-bound: two equal GPUs read half of it each, at the same time; split 3:1 the
    first reads three quarters, and it is the slower; a GPU of twice the bandwidth holding twice the share takes
    as long as its partner."""
    gpu = GPU("G", hbm_gbps=1000.0, tflops=100.0, hbm_gb=24.0)
    even, model, weights = _costs(_machine(gpu, gpu, shares=(0.5, 0.5)))
    eb = weights.expert_bytes
    assert even.by_tokens[1] == pytest.approx(0.5 * eb / gpu.mem_bw, rel=1e-12)
    uneven, _, _ = _costs(_machine(gpu, gpu, shares=(0.75, 0.25)))
    assert uneven.by_tokens[1] == pytest.approx(0.75 * eb / gpu.mem_bw, rel=1e-12)
    fast = replace(gpu, hbm_gbps=2000.0, tflops=200.0)
    matched, _, _ = _costs(_machine(fast, gpu, shares=(2 / 3, 1 / 3)))
    assert matched.by_tokens[1] == pytest.approx((2 / 3) * eb / fast.mem_bw, rel=1e-12)


def test_a_layer_adds_its_two_allreduces_and_the_head_its_gather():
    """Against one GPU of the two's summed bandwidth and FLOP/s (each GPU's half of every weight in the same time), a
    token's layer costs two all-reduces of d_model f32 values more, and its once-per-row work the output head's logits
    gathered (OLMoE: no dense layer; 50,304 values, past 32,768: bf16); with one GPU taking every share, neither."""
    gpu = GPU("G", hbm_gbps=1000.0, tflops=100.0, hbm_gb=24.0)
    split, model, weights = _costs(_machine(gpu, gpu, shares=(0.5, 0.5)))
    whole = SpecSheet(model, _machine(replace(gpu, hbm_gbps=2000.0, tflops=200.0)), weights,
                      ENGINES["llama.cpp"]).costs(np.array([1.0]), np.array([100.0]), max_expert_tokens=4)
    reduce = ALLREDUCE_US * 1e-6 + 1.0 * model.d_model * 4 / LINK.bandwidth
    assert split.pre_s[0] - whole.pre_s[0] == pytest.approx(2 * reduce, rel=1e-9)
    gather = ALLREDUCE_US * 1e-6 + 1.0 * model.vocab * 2 / LINK.bandwidth
    assert model.vocab == 50304 and split.row_s[0] - whole.row_s[0] == pytest.approx(gather, rel=1e-9)
    assert np.array_equal(split.by_tokens, whole.by_tokens)
    alone, _, _ = _costs(_machine(replace(gpu, hbm_gbps=2000.0, tflops=200.0), gpu, shares=(1.0, 0.0)))
    assert alone.pre_s[0] == whole.pre_s[0] and alone.row_s[0] == whole.row_s[0]


def test_each_gpu_holds_its_share_of_the_model():
    """Every weight, KV entry and expert the GPUs hold shared 3:1 by -ts, a reserve on each."""
    model = get_model("olmoe-1b-7b")
    fp = Footprint(model, 2.0, model.expert_params * 2.0, 1024, 8, False, 48 * GIB, 128 * GIB,
                   gpus=(24 * GIB, 24 * GIB))
    config = Config.build(strategy="cpu-experts", cpu_layers=0, split_mode="tensor", tensor_split=(3, 1))
    memory = account(fp, config)
    total = memory.weights + memory.kv + memory.experts
    reserve = memory.reserve / 2
    assert memory.shares == (0.75, 0.25) and memory.split == ()
    assert memory.per_gpu == pytest.approx((0.75 * total + reserve + memory.scratch, 0.25 * total + reserve))


def test_a_run_splits_every_layer_and_the_gpus_read_in_parallel(qwen3_trace):
    """Two GPUs each reading half of every layer decode faster than one of them holding it all, every expert on the
    GPUs (Qwen3-30B-A3B at 4 bits); the machine as run carries the shares, explain gives them and the all-reduce."""
    gpu = GPU("G", hbm_gbps=300.0, tflops=50.0, hbm_gb=24.0)
    settings = dict(strategy="cpu-experts", cpu_layers=0, dtype="q4_k")
    one = moesim.simulate(qwen3_trace, hardware=_machine(gpu), **settings)
    two = moesim.simulate(qwen3_trace, hardware=_machine(gpu, gpu), split_mode="tensor", **settings)
    assert two.machine.shares == (0.5, 0.5) and two.machine.split == ()
    assert two.tpot_s < one.tpot_s
    from moesim.sim.explain import explain
    lines = {line.what: line.value for line in explain(two, get_model("qwen3-30b-a3b")).constants}
    assert lines["CUDA0's share of every layer"] == 0.5 and lines["an all-reduce of a row's activations"] == ALLREDUCE_US


def test_what_a_split_of_every_layer_cannot_run_is_refused(qwen3_trace, cli):
    """An engine without the mode (kTransformers), a family the engine does not split so (OLMoE: llama.cpp's
    docs/multi-gpu.md), experts left on the CPU, and the mode on one GPU: one line each."""
    gpu = GPU("G", hbm_gbps=300.0, tflops=50.0, hbm_gb=24.0)
    with pytest.raises(MoesimError, match=r"split_mode tensor: kTransformers has no split of every layer over GPUs; "
                                          r"llama\.cpp and ik_llama\.cpp have one"):
        Config.build(strategy="hybrid", engine="kTransformers", split_mode="tensor")
    olmoe = synth_trace(16, 64, 8, 2, 8, seed=0, model="olmoe-1b-7b")
    with pytest.raises(MoesimError, match=r"split_mode='tensor': llama\.cpp splits every layer of mixtral, .* models, "
                                          r"not olmoe \(olmoe-1b-7b\); use split_mode='layer'"):
        moesim.simulate(olmoe, hardware=_machine(gpu, gpu), strategy="cpu-experts", cpu_layers=0, split_mode="tensor")
    with pytest.raises(MoesimError, match=r"keeps 8 layers' experts off them: moesim models the split with every "
                                          r"expert on the GPUs"):
        moesim.simulate(qwen3_trace, hardware=_machine(gpu, gpu), strategy="cpu-experts", cpu_layers=8,
                        split_mode="tensor", dtype="q4_k")
    code, out, err = cli("sim", "run", bundled_trace_path(), "--hardware", "rtx4090", "--strategy", "cpu-experts",
                         "--split-mode", "tensor")
    assert code == 1 and err.count("\n") == 1 and "--split-mode" in err and "fewer than two GPUs" in err, err


def test_plan_writes_the_engines_flag_and_each_gpus_share(cli):
    """gpt-oss-20b on two RTX 3090s, every layer split: llama.cpp's -sm tensor and -fit off (its even split, or a -ts
    given), ik_llama.cpp's -sm graph, and each GPU's share of every layer; gpt-oss-120b, which the two do not hold
    whole, runs on the CPU alone, its split placement listed as not fitting."""
    two = ROOT / "examples" / "two-3090.toml"
    code, out, err = cli("plan", "--model", "gpt-oss-20b", "--hardware", two, "--dtype", "q4_k", "--split-mode",
                         "tensor", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    llama = next(r for r in rows if r["engine"] == "llama.cpp" and r["cpu_layers"] == 0)
    assert " -ngl 99 -sm tensor -fit off -c " in llama["command"]
    assert llama["on_gpus"] == "CUDA0: 50% of every layer; CUDA1: 50% of every layer"
    code, out, err = cli("plan", "--model", "gpt-oss-20b", "--hardware", two, "--dtype", "q4_k", "--split-mode",
                         "tensor", "--tensor-split", "3,1", "--json")
    assert code == 0, err
    given = next(r for r in json.loads(out)["rows"] if r["engine"] == "llama.cpp" and r["cpu_layers"] == 0)
    assert " -ngl 99 -ts 3,1 -sm tensor -fit off -c " in given["command"]
    assert given["on_gpus"] == "CUDA0: 75% of every layer; CUDA1: 25% of every layer"
    launch = Launch(get_model("gpt-oss-20b"), "q4_k", Config(), 0, True, 16, 1, 640, 0.5, (3, 1), "nvidia", "graph")
    assert " -ngl 99 -ts 3,1 -sm graph -c 640" in ENGINES["ik_llama.cpp"].command(launch)
    code, out, err = cli("plan", "--model", "gpt-oss-120b", "--hardware", two, "--dtype", "q4_k", "--split-mode",
                         "tensor", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert [r["on_gpus"] for r in plan["rows"]] == [""] and plan["rows"][0]["command"].count("-ngl 0") == 1
    assert any(s["strategy"] == "cpu-experts" and "GiB of GPU memory" in s["reason"] for s in plan["skipped"]), plan


def test_a_plan_on_several_gpus_offers_both_splits_unless_one_is_asked(cli):
    """Without --split-mode a plan on two GPUs ranks each format held whole both ways, by whole layers (-ts) and with
    every layer split (-sm tensor), as two rows with their own commands and split; asked for one, only that one; a
    family no engine splits so is listed as not run, saying why."""
    two = ROOT / "examples" / "two-3090.toml"
    code, out, err = cli("plan", "--model", "gpt-oss-20b", "--hardware", two, "--dtype", "q4_k", "--json")
    assert code == 0, err
    whole = [r for r in json.loads(out)["rows"] if r["strategy"] == "all-on-gpu"]
    assert sorted(r["split_mode"] for r in whole) == ["layer", "tensor"]
    by_mode = {r["split_mode"]: r for r in whole}
    assert "-sm tensor -fit off" in by_mode["tensor"]["command"] and "-sm" not in by_mode["layer"]["command"]
    assert " -ts " in by_mode["layer"]["command"]
    assert by_mode["tensor"]["on_gpus"] == "CUDA0: 50% of every layer; CUDA1: 50% of every layer"
    assert by_mode["layer"]["on_gpus"].startswith("CUDA0: layers 0-")
    for mode in ("layer", "tensor"):
        code, out, err = cli("plan", "--model", "gpt-oss-20b", "--hardware", two, "--dtype", "q4_k", "--split-mode",
                             mode, "--json")
        assert code == 0, err
        assert {r["split_mode"] for r in json.loads(out)["rows"] if r["strategy"] == "all-on-gpu"} == {mode}
    code, out, err = cli("plan", "--model", "olmoe-1b-7b", "--hardware", two, "--dtype", "q4_k", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert {r["split_mode"] for r in plan["rows"] if r["strategy"] == "all-on-gpu"} == {"layer"}
    assert any(s["strategy"] == "cpu-experts (every layer split)" and "not olmoe" in s["reason"]
               for s in plan["skipped"]), plan["skipped"]
