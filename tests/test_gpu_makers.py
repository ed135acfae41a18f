"""GPUs of other makers (AMD, Intel, Apple): a GPU's ``vendor``, what an engine's backend runs on, the framework time a
layer llama.cpp's Metal build takes (learned from published points: ``EngineSpec.gpu_layer_us``), and llama.cpp's
names for several GPUs of one maker."""

from __future__ import annotations

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
    """A run timed as llama.cpp on an Apple GPU takes 189 µs more a MoE layer than its operations alone: 32 layers of
    Mixtral, every one on the GPU; on an NVIDIA GPU, where none was learned, the two are the same run."""
    trace, every_layer = bundled_trace_path(), {"strategy": "cpu-experts", "cpu_layers": 0, "prompt": 0}
    assert dict(ENGINES["llama.cpp"].gpu_layer_us) == {"apple": 189.0}
    named = moesim.simulate(trace, hardware="m2-ultra", engine="llama.cpp", **every_layer)
    alone = moesim.simulate(trace, hardware="m2-ultra", **every_layer)
    assert named.tpot_s - alone.tpot_s == pytest.approx(32 * 189e-6, rel=1e-9) and named.framework_us == 189.0
    cpu_layers = {**every_layer, "cpu_layers": 32}
    assert moesim.simulate(trace, hardware="rtx4090", engine="llama.cpp", **cpu_layers).tpot_s == \
        moesim.simulate(trace, hardware="rtx4090", **cpu_layers).tpot_s


def test_several_amd_gpus_are_named_as_llama_cpp_names_them(cli, tmp_path):
    """Two RX 7900 XTX: each row's layers per GPU in ROCm's names, and a command without CUDA's device order."""
    path = tmp_path / "two-amd.toml"
    path.write_text('cpu = "ryzen-7950x"\nlink = "pcie4-x8"\ngpu = ["rx7900xtx", "rx7900xtx"]\n')
    code, out, err = cli("plan", "--model", "gpt-oss-120b", "--hardware", path, "--dtype", "q4_k", "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["on_gpus"].startswith("ROCm0: layers 0-") and "; ROCm1: layers " in row["on_gpus"]
    assert row["command"].startswith("llama-server ") and " -ts " in row["command"]
