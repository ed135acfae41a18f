"""GPUs of other makers (AMD, Intel, Apple): a GPU's ``vendor``, what an engine's backend runs on, the framework time a
layer llama.cpp's Metal build takes (learned from published points: ``EngineSpec.gpu_layer_us``), and llama.cpp's
names for several GPUs of one maker."""

from __future__ import annotations

import dataclasses
import json

import pytest

import moesim
from moesim.errors import MoesimError
from moesim.sim.engines import ENGINES
from moesim.sim.hardware import get_hardware, load_hardware, write_hardware
from moesim.tracegen.trace import bundled_trace_path

CARD = '[gpu]\nname = "card"\nvendor = "{vendor}"\nhbm_gb = 24\nhbm_gbps = 960\ntflops = 122.8\n'


def test_a_gpus_maker_is_read_checked_and_written(tmp_path):
    """``vendor`` is read from a file (NVIDIA's where it is left out) and written back; a maker moesim does not know is
    one line naming the file and the choices, and GPUs of two makers in one machine are refused."""
    path = tmp_path / "amd.toml"
    path.write_text('cpu = "ryzen-7950x"\nlink = "pcie4"\n' + CARD.format(vendor="amd"))
    hw = load_hardware(path)
    assert hw.gpu.vendor == "amd" and get_hardware("rtx4090").gpu.vendor == "nvidia"
    write_hardware(hw, tmp_path / "again.toml")
    assert load_hardware(tmp_path / "again.toml") == hw
    path.write_text(path.read_text().replace('"amd"', '"via"'))
    with pytest.raises(MoesimError, match=r"amd\.toml: \[gpu\] vendor must be one of nvidia, amd, intel, apple, "
                                          r"got 'via'$"):
        load_hardware(path)
    path.write_text('cpu = "ryzen-7950x"\nlink = "pcie4"\ngpu = ["rx7900xtx", "rtx4090"]\n')
    with pytest.raises(MoesimError, match=r"GPUs of several makers \(amd, nvidia\)"):
        load_hardware(path)


def test_llama_cpp_on_apple_gpus_takes_the_time_a_layer_learned_for_its_metal_build():
    """A run timed as llama.cpp on an Apple GPU takes 186 µs more a MoE layer than its operations alone: 32 layers of
    Mixtral, every one on the GPU; on an Intel GPU 414 µs, on an AMD one 55 µs; on an NVIDIA GPU, where none was
    learned (none held out did better than none), the two are the same run."""
    trace, every_layer = bundled_trace_path(), {"strategy": "cpu-experts", "cpu_layers": 0, "prompt": 0}
    assert dict(ENGINES["llama.cpp"].gpu_layer_us) == {"amd": 55.0, "apple": 186.0, "intel": 414.0}
    named = moesim.simulate(trace, hardware="m2-ultra", engine="llama.cpp", **every_layer)
    alone = moesim.simulate(trace, hardware="m2-ultra", **every_layer)
    assert named.tpot_s - alone.tpot_s == pytest.approx(32 * 186e-6, rel=1e-9) and named.framework_us == 186.0
    cpu_layers = {**every_layer, "cpu_layers": 32}
    assert moesim.simulate(trace, hardware="rtx4090", engine="llama.cpp", **cpu_layers).tpot_s == \
        moesim.simulate(trace, hardware="rtx4090", **cpu_layers).tpot_s
    # each maker's GPU its own: Intel's 414 µs on an Arc card, AMD's 55 µs on a Strix Halo
    intel = [moesim.simulate(trace, hardware="arc-pro-b70", dtype="q4_k", **every_layer, **named).tpot_s
             for named in ({"engine": "llama.cpp"}, {})]  # (Mixtral fits its 32 GB at 4 bits)
    assert intel[0] - intel[1] == pytest.approx(32 * 414e-6, rel=1e-9)
    amd = [moesim.simulate(trace, hardware="strix-halo", **every_layer, **named).tpot_s
           for named in ({"engine": "llama.cpp"}, {})]
    assert amd[0] - amd[1] == pytest.approx(32 * 55e-6, rel=1e-9)


def test_explain_names_the_time_a_layer_learned_for_the_gpus_maker(cli):
    """``--explain`` on an Apple GPU gives llama.cpp's 186 µs a layer with where it was learned."""
    code, out, err = cli("sim", "run", bundled_trace_path(), "--hardware", "m2-ultra", "--strategy", "cpu-experts",
                         "--cpu-layers", "0", "--engine", "llama.cpp", "--explain")
    text = " ".join(out.split())
    assert code == 0, err
    assert "llama.cpp's framework time a layer on apple's GPUs" in text and "its Metal build on Apple's, 6 points" in text


def test_an_engine_named_for_a_gpu_its_backend_does_not_run_on_is_refused(cli):
    """ik_llama.cpp's backends are its CPU's and CUDA's: named on an Apple GPU, one line, exit 1."""
    code, out, err = cli("sim", "run", bundled_trace_path(), "--hardware", "m2-ultra", "--strategy", "cpu-experts",
                         "--cpu-layers", "0", "--engine", "ik_llama.cpp")
    assert code == 1 and err.count("\n") == 1, err
    assert "--engine ik_llama.cpp: ik_llama.cpp runs on nvidia GPUs only, not apple's (hardware 'm2-ultra')" in err


def test_several_amd_gpus_are_named_as_llama_cpp_names_them(cli, tmp_path):
    """Two RX 7900 XTX: each row's layers per GPU in ROCm's names, and a command without CUDA's device order; two Arc
    Pro B70, in SYCL's."""
    path = tmp_path / "two-amd.toml"
    path.write_text('cpu = "ryzen-7950x"\nlink = "pcie4-x8"\ngpu = ["rx7900xtx", "rx7900xtx"]\n')
    code, out, err = cli("plan", "--model", "gpt-oss-120b", "--hardware", path, "--dtype", "q4_k", "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["on_gpus"].startswith("ROCm0: layers 0-") and "; ROCm1: layers " in row["on_gpus"]
    assert row["command"].startswith("llama-server ") and " -ts " in row["command"]
    path.write_text('cpu = "ryzen-9950x"\nlink = "pcie5"\ngpu = ["arcprob70", "arcprob70"]\n')
    code, out, err = cli("plan", "--model", "gpt-oss-120b", "--hardware", path, "--dtype", "q4_k", "--json")
    assert code == 0 and json.loads(out)["rows"][0]["on_gpus"].startswith("SYCL0: "), err


def test_a_plan_on_a_gpu_no_time_was_learned_for_says_its_rows_are_upper_bounds(cli, monkeypatch):
    """On an AMD card, had llama.cpp learned no time a layer on AMD's GPUs, the plan says its GPU rows are upper
    bounds; on an AMD or an Intel card or an Apple GPU, where llama.cpp's was learned, it does not."""
    args = ("plan", "--model", "qwen3-30b-a3b", "--dtype", "q4_k", "--hardware")
    with monkeypatch.context() as patch:
        llama = ENGINES["llama.cpp"]
        patch.setitem(ENGINES, "llama.cpp", dataclasses.replace(
            llama, gpu_layer_us=tuple((maker, us) for maker, us in llama.gpu_layer_us if maker != "amd")))
        code, out, err = cli(*args, "rx7900xtx")
    assert code == 0 and "amd's GPUs: no time a layer has been learned for these rows' engines on them" in \
        " ".join(out.split()), err
    code, out, err = cli(*args, "rx7900xtx")
    assert code == 0 and "no time a layer has been learned" not in " ".join(out.split()), err
    code, out, err = cli(*args, "arc-b580")
    assert code == 0 and "no time a layer has been learned" not in " ".join(out.split()), err
    code, out, err = cli(*args, "m3-ultra")
    assert code == 0 and "no time a layer has been learned" not in " ".join(out.split()), err
    # the model fits the GPU whole: the row named for llama.cpp is llama.cpp's own run, its 186 µs a layer included
    # (another engine's run of the placement, with none learned on Apple's GPUs, would be faster)
    code, out, err = cli(*args, "m3-ultra", "--json")
    whole = json.loads(out)["rows"][0]
    assert (whole["strategy"], whole["engine"], whole["framework_us"]) == ("all-on-gpu", "llama.cpp", 186.0), whole
