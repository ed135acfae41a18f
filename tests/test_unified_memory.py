"""A GPU that shares the host's memory (Apple M-series, AMD Strix Halo, NVIDIA DGX Spark): what it holds counts
against the one memory, nothing is copied to it, and its files."""

from __future__ import annotations

import pytest

import moesim
from moesim.errors import MoesimError
from moesim.sim.hardware import load_hardware, write_hardware
from moesim.sim.memory import GIB, HOST_RESERVE_GIB
from moesim.sim.presets import unified_link
from moesim.tracegen.synth import synth_trace


@pytest.fixture(scope="module")
def olmoe_trace():
    return synth_trace(16, 64, 8, 2, 8, seed=0, model="olmoe-1b-7b")


def test_a_unified_gpu_needs_no_link_and_its_file_round_trips(tmp_path):
    path = tmp_path / "apu.toml"
    path.write_text('cpu = "ryzen-ai-max-395"\n[gpu]\nname = "iGPU"\nunified = true\nhbm_gb = 96\nhbm_gbps = 256\n'
                    'tflops = 59.4\n')
    hw = load_hardware(path)
    assert hw.gpu.unified and hw.link == unified_link(hw.gpu) and hw.link.gbps == 128  # half of 256 GB/s
    write_hardware(hw, tmp_path / "again.toml")
    assert "unified = true" in (tmp_path / "again.toml").read_text()
    assert load_hardware(tmp_path / "again.toml") == hw
    path.write_text(path.read_text().replace("unified = true", "unified = 1"))
    with pytest.raises(MoesimError, match=r"\[gpu\] unified must be true or false, got 1$"):
        load_hardware(path)


def test_the_gpus_share_counts_against_the_one_memory(olmoe_trace):
    """Every layer on the GPU: the RAM used is the GPU's part and the host's reserve, exactly; a machine whose memory
    holds the GPU's share but not the reserve beside it is refused, naming both."""
    r = moesim.simulate(olmoe_trace, hardware="strix-halo", strategy="cpu-experts", cpu_layers=0, dtype="bf16")
    assert r.ram_gb == pytest.approx(r.vram_gb + HOST_RESERVE_GIB)
    tight = r.vram_gb + HOST_RESERVE_GIB / 2
    with pytest.raises(MoesimError, match="the GPU's, in the same memory"):
        moesim.simulate(olmoe_trace, hardware="strix-halo", strategy="cpu-experts", cpu_layers=0, dtype="bf16",
                        ram=tight)


def test_nothing_is_copied_to_a_unified_gpu(olmoe_trace):
    with pytest.raises(MoesimError, match="shares the host's memory and reads every weight where it lies"):
        moesim.simulate(olmoe_trace, hardware="dgx-spark", policy="lru", capacity=8, dtype="bf16")


def test_a_plan_on_one_memory_leaves_no_cpu_only_row():
    """llama.cpp -ngl 0 is not planned where the GPU reads the same memory: every row keeps the GPU."""
    plan = moesim.plan(model="qwen3-30b-a3b", hardware="strix-halo", dtypes=["q4_k"])
    assert plan.rows and all(r.gpu and "-ngl 99" in r.command for r in plan.rows)
    assert all(r.vram_gb * GIB <= 96 * GIB for r in plan.rows)


def test_a_unified_gpu_is_the_only_one_and_takes_no_link(tmp_path):
    path = tmp_path / "apu.toml"
    for text in ('gpu = ["gb10", "rtx3090"]\ncpu = "gb10"\n', 'gpu = "gb10"\nlink = "pcie4"\ncpu = "gb10"\n'):
        path.write_text(text)
        with pytest.raises(MoesimError, match="is the machine's only GPU, and takes no link"):
            load_hardware(path)
    with pytest.raises(MoesimError, match="no link reaches it: link does not apply"):  # (the API names no flag)
        moesim.hardware("dgx-spark", link="pcie4")


def test_local_finds_a_dgx_spark():
    """nvidia-smi names a GB10 and gives no memory for it: the GPU maps the host's memory, and no link reaches it."""
    import subprocess

    from moesim.sim import local_machine as lm

    def run(args, **kwargs):
        out = "NVIDIA GB10, [N/A]\n" if "name,memory.total" in args[1] else "[N/A], [N/A]\n"
        return subprocess.CompletedProcess(args, 0, out, "")

    gpus, line = lm.detect_gpu(run, host_gb=119.7)
    ((gpu, link),) = gpus
    assert gpu.unified and gpu.hbm_gb == 119.7 and link.name == "unified" and "shares the host's memory" in line
