"""Several GPUs in one host (``moesim.sim.layer_split``): the split against a brute-force reference and llama.cpp's
own rule, the files that describe them, the memory each GPU holds, the time a boundary between two costs, and the
plan's command."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import moesim
from moesim.errors import MoesimError
from moesim.sim.layer_split import as_given, balance, describe, layer_devices
from moesim.sim.explain import explain
from moesim.sim.machine import CPU, GPU, Hardware, Link
from moesim.tracegen.models import get_model
from moesim.tracegen.synth import synth_trace

ROOT = Path(__file__).resolve().parents[1]
LINK = Link("L", gbps=32.0)
HOST = CPU("C", cores=8, ghz=4.0, isa="avx2", dram_gbps=50.0, ram_gb=128.0)


def _gpu(gib: float, gbps: float = 1000.0) -> GPU:
    return GPU("G", hbm_gbps=gbps, tflops=100.0, hbm_gb=gib)


def _machine(*gpus: GPU) -> Hardware:
    return Hardware("box", gpus[0], LINK, cpu=HOST, more_gpus=tuple((g, LINK) for g in gpus[1:]))


@pytest.fixture(scope="module")
def olmoe_trace():
    return synth_trace(16, 64, 8, 2, 8, seed=0, model="olmoe-1b-7b")


def _reference(items, vram, reserve, first):
    """(the least fullest share, the least sum of squared shares among the splits with it), over every contiguous
    split, enumerated."""
    n, gpus, splits = len(items), len(vram), []
    for cuts in itertools.combinations_with_replacement(range(n + 1), gpus - 1):
        bounds = (0, *cuts, n)
        shares = [(sum(items[a:b]) + reserve + (first if g == 0 else 0.0)) / vram[g]
                  for g, (a, b) in enumerate(zip(bounds, bounds[1:]))]
        splits.append((max(shares), sum(x * x for x in shares)))
    fullest = min(m for m, _ in splits)
    return fullest, min(q for m, q in splits if m <= fullest * (1 + 1e-9))


@pytest.mark.parametrize("seed", range(6))
def test_balance_is_the_least_fullest_then_most_even_split(seed):
    rng = np.random.default_rng(seed)
    items = rng.uniform(0.5, 3.0, rng.integers(3, 9))
    vram = rng.uniform(4.0, 12.0, rng.integers(2, 4))
    counts, used = balance(items, vram, 0.7, 0.3)
    assert counts.sum() == items.size
    bounds = np.concatenate(([0], np.cumsum(counts)))
    held = [items[a:b].sum() + 0.7 + (0.3 if g == 0 else 0) for g, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    np.testing.assert_allclose(used, held)
    fullest, squares = _reference(list(items), vram, 0.7, 0.3)
    assert max(used / vram) == pytest.approx(fullest) and ((used / vram) ** 2).sum() == pytest.approx(squares)


def test_a_full_first_gpu_does_not_strand_the_others():
    """The first GPU's scratch fixes the fullest share; the layers still spread evenly over the other two."""
    counts, _ = balance(np.ones(10), np.array([24.0, 24.0, 24.0]), 0.5, 15.0)
    assert counts.tolist() == [0, 5, 5]


def test_balance_halves_equal_layers_on_equal_gpus():
    counts, used = balance(np.ones(10), np.array([8.0, 8.0]), 1.0, 0.0)
    assert counts.tolist() == [5, 5] and used.tolist() == [6.0, 6.0]


@pytest.mark.parametrize("counts", [(23, 14), (0, 37), (5, 5, 6, 21), (36, 1)])
def test_layer_devices_follow_llama_cpps_rule(counts):
    """llama.cpp: layer il of n goes to the first device whose cumulative share of -ts exceeds il / n."""
    n = sum(counts)
    splits = np.cumsum(counts) / n
    rule = [int(np.searchsorted(splits, il / n, side="right")) for il in range(n)]
    assert layer_devices(counts).tolist() == rule


@pytest.mark.parametrize("shares, counts", [((1, 1), (19, 18)), ((3, 1), (28, 9)), ((0, 1), (0, 37)),
                                             ((1, 0), (37, 0)), ((0.5, 0.25, 0.25), (19, 9, 9)), ((22, 15), (22, 15))])
def test_a_given_split_places_layers_by_llama_cpps_rule(shares, counts):
    """-ts of ``shares`` over 36 layers and the output (37 items): item il on the first GPU whose cumulative share
    exceeds il / 37 (1,1: il < 18.5, 19 on the first; 3,1: il < 27.75, 28); layer counts as shares place exactly
    those counts. Each GPU holds its items' bytes and the reserve, the first the scratch besides."""
    items = np.arange(1.0, 38.0)
    placed, used = as_given(items, shares, 0.5, 0.25)
    assert placed.tolist() == list(counts)
    ends = np.cumsum((0, *counts))
    assert used.tolist() == [items[a:b].sum() + 0.5 + (0.25 if g == 0 else 0.0)
                             for g, (a, b) in enumerate(zip(ends, ends[1:]))]


def test_a_given_split_ties_as_llama_cpp_in_float32():
    """-ts 0.1,0.2,0.7 over 10 items: in float32 the first two shares sum to exactly 0.3, as item 3's 3/10 is, so it
    goes to the third GPU (llama.cpp: 1, 2, 7); float64's 0.30000000000000004 would keep it on the second (1, 3, 6)."""
    assert as_given(np.ones(10), (0.1, 0.2, 0.7), 0.0, 0.0)[0].tolist() == [1, 2, 7]


def test_a_given_split_is_the_plans_and_refused_where_it_cannot_be_one(cli, olmoe_trace):
    """--tensor-split 3,1 on two RTX 3090s: the plan's rows with layers on the GPUs place them so (-ts 28,9 is the
    same placement in counts); two shares for one GPU, three for two, or no number are one line each, exit 1; a
    split that leaves the second GPU all the layers does not fit where the balanced one does."""
    box = ROOT / "examples" / "two-3090.toml"
    code, out, err = cli("plan", "--model", "gpt-oss-120b", "--hardware", box, "--dtype", "q4_k", "--tensor-split",
                         "3,1", "--json")
    assert code == 0, err
    on_gpus = [r["command"] for r in json.loads(out)["rows"] if "-ngl 99" in r["command"]]
    assert on_gpus and all(" -ts 28,9 " in command for command in on_gpus)
    for args, said in ((("--hardware", "rtx4090", "--tensor-split", "1,1"),
                        "--tensor-split: rtx4090 has fewer than two GPUs: no layer is split over GPUs, so nothing "
                        "reads it"),
                       (("--hardware", box, "--tensor-split", "1,1,1"),
                        "--tensor-split 1,1,1 gives 3 share(s), and the machine has 2 GPUs: one a GPU, in device "
                        "order"),
                       (("--hardware", box, "--tensor-split", "1,nan"),
                        "--tensor-split must be numbers >= 0, not all 0 (3,1), got '1,nan'")):
        code, out, err = cli("plan", "--model", "gpt-oss-120b", *args)
        assert (code, out) == (1, "") and err.strip() == f"moesim: error: {said}", err
    settings = dict(hardware=_machine(_gpu(7), _gpu(7)), strategy="cpu-experts", cpu_layers=6, dtype="bf16")
    assert sum(moesim.simulate(olmoe_trace, **settings).machine.split) == 16 + 1  # balanced, it fits
    with pytest.raises(MoesimError, match=r"over its GPUs CUDA0 .* \(0 layers, .*CUDA1 .* \(17 layers"):
        moesim.simulate(olmoe_trace, tensor_split=(0, 1), **settings)


def test_describe_in_llama_cpps_numbering():
    assert describe((23, 14), 11, 0) == ("CUDA0: layers 0-22 (the experts of layers 0-10 on the CPU); CUDA1: layers "
                                         "23-35 and the output")
    assert describe((0, 4, 1), 1, 1) == "CUDA1: layers 0-3 (the experts of layer 1 on the CPU); CUDA2: the output"


def test_files_list_gpus_and_links(tmp_path):
    from moesim.sim.hardware import load_hardware

    path = tmp_path / "box.toml"
    path.write_text('gpu = ["rtx3090", "rtx3060"]\nlink = ["pcie4-x8", "pcie4-x4"]\ncpu = "ryzen-7950x"\n')
    hw = load_hardware(path)
    assert [(g.name, lk.name) for g, lk in hw.gpus] == [("RTX3090", "pcie4-x8"), ("RTX3060", "pcie4-x4")]
    path.write_text('link = "pcie4"\ncpu = "ryzen-7950x"\n[[gpu]]\nname = "A"\nhbm_gbps = 900\ntflops = 70\n'
                    'hbm_gb = 24\n[[gpu]]\nname = "B"\nhbm_gbps = 360\ntflops = 25\nhbm_gb = 12\n')
    hw = load_hardware(path)
    assert [g.name for g, _ in hw.gpus] == ["A", "B"] and {lk.name for _, lk in hw.gpus} == {"pcie4"}
    assert hw.describe().startswith("A (24 GiB, pcie4) + B (12 GiB, pcie4)")
    for text, said in (('gpu = ["rtx3090", "rtx3090"]\nlink = ["pcie4", "pcie4", "pcie4"]\ncpu = "ryzen-7950x"\n',
                        "2 [[gpu]] and 3 [[link]]"),
                       ('gpu = ["rtx3090", 7]\nlink = "pcie4"\n', "'gpu' must be a preset name or a table"),
                       ('gpu = ["rtx3090", "rtx9999"]\nlink = "pcie4"\n', "unknown gpu 'rtx9999'")):
        path.write_text(text)
        with pytest.raises(MoesimError, match=re.escape(said)) as exc:
            load_hardware(path)
        assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_each_gpu_holds_its_layers(olmoe_trace):
    """OLMoE in bf16 (12 GiB of experts) on two 7 GiB GPUs: the fewest CPU layers that fit both, and what each
    holds; on one of them it needs more CPU layers."""
    two = moesim.simulate(olmoe_trace, hardware=_machine(_gpu(7), _gpu(7)), strategy="cpu-experts",
                          cpu_layers="auto", dtype="bf16")
    one = moesim.simulate(olmoe_trace, hardware=_machine(_gpu(7)), strategy="cpu-experts", cpu_layers="auto",
                          dtype="bf16")
    n_two, n_one = (r.config.execution.params["cpu_layers"] for r in (two, one))
    assert n_two < n_one and sum(two.machine.split) == 16 + 1 and 0 < n_two and two.vram_gb <= 14
    lines = {line.what: line.value for line in explain(two, get_model("olmoe-1b-7b")).constants}
    assert [lines[f"CUDA{i}'s layers (-ts), the output layer counted"] for i in (0, 1)] == list(two.machine.split)
    # one CPU layer fewer fits no split
    with pytest.raises(MoesimError, match="over its GPUs CUDA0 .* GiB"):
        moesim.simulate(olmoe_trace, hardware=_machine(_gpu(7), _gpu(7)), strategy="cpu-experts",
                        cpu_layers=n_two - 1, dtype="bf16")


def test_a_boundary_costs_its_two_copies(olmoe_trace):
    """Two GPUs against one of their summed memory and the same bandwidth, the same layers on the CPU: a token
    differs by the activations' two copies across the boundary, d_model f32 values each at the link's rate and
    latency."""
    settings = dict(strategy="cpu-experts", cpu_layers=8, dtype="bf16")
    two = moesim.simulate(olmoe_trace, hardware=_machine(_gpu(8), _gpu(8)), **settings)
    one = moesim.simulate(olmoe_trace, hardware=_machine(_gpu(16)), **settings)
    crossing = 2 * (LINK.latency_us * 1e-6 + 2048 * 4.0 / LINK.bandwidth)
    assert two.tpot_s - one.tpot_s == pytest.approx(crossing, rel=1e-9)


def test_a_slower_gpu_slows_its_share(olmoe_trace):
    """A second GPU of half the bandwidth: slower than two fast ones, faster than two slow ones."""
    settings = dict(strategy="cpu-experts", cpu_layers=8, dtype="bf16")
    fast, slow = _gpu(8), _gpu(8, 500.0)
    times = [moesim.simulate(olmoe_trace, hardware=_machine(*pair), **settings).tpot_s
             for pair in ((fast, fast), (fast, slow), (slow, slow))]
    assert times[0] < times[1] < times[2]


def test_a_gpu_cache_over_several_gpus_is_refused(olmoe_trace):
    with pytest.raises(MoesimError, match="has 2 GPUs, which moesim models as an engine's split of the model over them"):
        moesim.simulate(olmoe_trace, hardware=_machine(_gpu(8), _gpu(8)), policy="lru", capacity=8)
    with pytest.raises(MoesimError, match="compute table is measured on one GPU"):
        from moesim.sim.hardware import check_hardware
        from moesim.sim.machine import MeasuredCompute

        check_hardware(replace(_machine(_gpu(8), _gpu(8)), compute=MeasuredCompute("olmoe-1b-7b", 1e-4, 1e-5)),
                       "box")


def test_llama_cpp_counts_dense_blocks():
    """--n-cpu-moe N counts llama.cpp's blocks, DeepSeek-V2-Lite's dense first one included."""
    from moesim.sim.engines import ENGINES, Launch
    from moesim.sim.config import Config

    spec = get_model("deepseek-v2-lite")
    launch = Launch(spec, "q4_k", Config(), 10, True, 16, 1, 512, 0.9, (20, 8))
    assert "-ngl 99 --n-cpu-moe 11 -ts 20,8 " in ENGINES["llama.cpp"].command(launch)


def test_plan_on_two_3090s_prints_each_gpus_layers(cli):
    """The acceptance: gpt-oss-120b on two RTX 3090s at x8/x8, each GPU's layers and the flags that make them."""
    code, out, err = cli("plan", "--model", "gpt-oss-120b", "--hardware", ROOT / "examples" / "two-3090.toml",
                         "--dtype", "q4_k", "--json")
    assert code == 0, err
    plan = json.loads(out)
    best = plan["rows"][0]
    split = [int(n) for n in re.search(r" -ts (\d+),(\d+) ", best["command"]).groups()]
    assert sum(split) == 36 + 1 and best["command"] == (
        f"CUDA_DEVICE_ORDER=PCI_BUS_ID llama-server -m gpt-oss-120b-Q4_K.gguf -ngl 99 --n-cpu-moe {best['cpu_layers']} "
        f"-ts {split[0]},{split[1]} -t 16 -c {plan['context']}")
    assert best["on_gpus"].startswith(f"CUDA0: layers 0-{split[0] - 1} ")
    assert best["on_gpus"].endswith(f"CUDA1: layers {split[0]}-35 and the output")
    assert best["vram_gb"] <= 48


def test_a_written_file_keeps_every_gpu(tmp_path):
    from moesim.sim.hardware import load_hardware, write_hardware

    hw = replace(_machine(_gpu(24), _gpu(12, 360.0)), more_gpus=((_gpu(12, 360.0), Link("x4", gbps=8.0)),))
    write_hardware(hw, tmp_path / "box.toml")
    assert load_hardware(tmp_path / "box.toml") == hw


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v2-lite", "gpt-oss-120b", "qwen3-235b-a22b"])
def test_each_layer_holds_its_own_weights(name):
    """The weights but the routed experts, layer by layer: they add up to the model's; a dense layer holds its FFN,
    a MoE layer its router and shared experts, the output layer the head and the final norm."""
    from moesim.sim.memory import layer_weights

    model = get_model(name)
    w, d, dense = layer_weights(model), model.d_model, model.dense_layers
    assert w.size == dense + model.num_layers + 1 and w.sum() == pytest.approx(model.non_expert_params, rel=1e-12)
    assert w[-1] == model.vocab * d + d
    attention = model.attention_params + 2 * d
    moe = attention + d * model.num_experts + model.shared_experts * model.ffn_mats * d * model.d_shared
    assert w[-2] == pytest.approx(moe)
    if dense:  # (the first layer holds the input embeddings too)
        embeddings = model.vocab * d if dense == 1 and not model.tied_embeddings else 0
        assert w[dense - 1] == pytest.approx(attention + model.ffn_mats * d * model.d_dense + embeddings)
