"""Hardware files: what a user writes is checked key by key (one line naming the file, nothing half-read), memory
sizes are required, a file without a GPU is a CPU-only machine; the template, the documented examples, and the
spec-sheet machines of the published-points check all load."""

import re
import tomllib
from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.sim.hardware import TEMPLATE, get_hardware, load_hardware

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "box.toml"
    path.write_text(text)
    return path


GPU = '[gpu]\nname = "g"\nhbm_gbps = 360\ntflops = 25.6\n'
LINK = '[link]\nname = "l"\ngbps = 32\n'
CPU = '[cpu]\nname = "c"\ncores = 8\nghz = 4.0\nisa = "avx2"\ndram_gbps = 51.2\n'


@pytest.mark.parametrize("text, message", [
    (GPU + LINK, r"\[gpu\] needs hbm_gb"),
    (GPU + "hbm_gb = 0\n" + LINK, r"\[gpu\] hbm_gb must be a finite number > 0, got 0"),
    (GPU + "hbm_gb = 12\n" + LINK + CPU, r"\[cpu\] needs ram_gb"),
    (GPU + "hbm_gb = 12\n", r"a machine needs a GPU with the link experts reach it by \(\[gpu\] and \[link\]"),
    (LINK, r"a GPU .*, a CPU \(\[cpu\]\), or both"),
    (LINK + CPU + "ram_gb = 32\n", r"a link, a compute table and more GPUs \(\[link\], .*\) describe a GPU, and the "
                                  "machine has none"),
    (CPU + "ram_gb = 32\nsockets = 0\n", r"\[cpu\] sockets must be a whole number of sockets"),
    (CPU + "ram_gb = 32\nthreads = -1\n", r"\[cpu\] threads must be a whole number of threads"),
    (CPU + "ram_gb = 32\nthreads = 2.5\n", r"\[cpu\] threads must be a whole number"),
    (CPU + "ram_gb = nan\n", r"\[cpu\] ram_gb must be a finite number > 0"),
    (CPU.replace('"avx2"', '["avx2"]') + "ram_gb = 32\n", r"\[cpu\] isa must be one of"),
    ('gpu = "rtx3070"\nlink = "pcie4"\n', r"unknown gpu 'rtx3070'"),
    (CPU + "ram_gb = 32\nfp32_gflops = 70.0\n", r"unknown key\(s\) fp32_gflops .*an older moesim calibrate wrote it"),
])
def test_a_bad_file_is_one_line_naming_it(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(MoesimError, match=message) as err:
        load_hardware(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_folder_is_not_a_hardware_file(tmp_path):
    with pytest.raises(MoesimError, match=f"{tmp_path}: a folder, not a hardware file"):
        get_hardware(str(tmp_path))


def test_a_file_without_a_gpu_is_a_cpu_only_machine(tmp_path):
    hw = load_hardware(write(tmp_path, CPU + "ram_gb = 32\nsockets = 2\nthreads = 12\n"))
    assert hw.gpu is None and hw.link is None and hw.cpu.sockets == 2 and hw.cpu.workers == 12
    assert hw.describe() == "no GPU, 2 x c (32 GiB, 12 threads)"
    with pytest.raises(MoesimError, match="no GPU: link and vram do not apply"):  # the keywords (Python)
        get_hardware(str(tmp_path / "box.toml"), vram=24)


def test_cpu_only_presets_and_local_are_machines():
    hw = get_hardware("ryzen-9950x")
    assert hw.gpu is None and hw.cpu.name == "Ryzen-9950X"
    from moesim.sim.config import HardwareConfig

    assert HardwareConfig(machine="local").machine == "local"  # detected when the run is built, not here


def test_the_template_is_a_valid_machine(tmp_path):
    hw = load_hardware(write(tmp_path, TEMPLATE))
    assert hw.gpu.hbm_gb == 12 and hw.link.gbps == 32 and hw.cpu.ram_gb == 32 and hw.cpu.dram_gbps == 51.2
    assert tomllib.loads(TEMPLATE)["gpu"]["name"] == "RTX 3060 12GB"


def test_every_toml_example_in_docs_hardware_md_loads(tmp_path):
    blocks = re.findall(r"```toml\n(.*?)```", (ROOT / "docs" / "hardware.md").read_text(), re.S)
    assert len(blocks) >= 2
    for i, block in enumerate(blocks):
        path = tmp_path / f"example{i}.toml"
        path.write_text(block)
        assert load_hardware(path).name


def test_the_published_points_name_machines_models_and_formats_that_exist():
    from moesim.sim.strategies import STRATEGIES
    from moesim.tracegen.model_spec import FORMATS
    from moesim.tracegen.models import get_model

    points = tomllib.loads((ROOT / "benchmarks" / "published_points.toml").read_text())["point"]
    assert len([p for p in points if p.get("counted", True)]) >= 15
    for p in points:
        load_hardware(ROOT / "benchmarks" / "machines" / f"{p['machine']}.toml")
        get_model(p["model"])
        assert p["format"] in FORMATS and p.get("other", p["format"]) in FORMATS and p["strategy"] in STRATEGIES
        assert p["measured"] > 0 and p["source"] and (p.get("counted", True) or p["excluded"])


def test_show_prints_a_machine_with_the_rates_it_derives(cli, tmp_path):
    """Ryzen 9 7950X preset: 16 threads x 4.5 GHz x 3.93 B/cycle = 283.0 GB/s of q4_k unpacked, 0.73 x 83.2 =
    60.74 GB/s of DRAM reached, a barrier 1.15 + 0.27 x 15 = 5.2 us."""
    code, out, err = cli("hardware", "--show", "ryzen-7950x")
    assert code == 0, err
    text = " ".join(out.split())
    assert "no GPU" in text and "│ 283 │" in text and "60.74" in text and "5.2 │" in text
    code, out, err = cli("hardware", "--show", tmp_path)
    assert code == 1 and "a folder, not a hardware file" in err


def test_show_saves_the_machine_it_shows(cli, tmp_path):
    """`--show local --save here.toml` measures once and keeps it; shown with a preset, the file loads back equal."""
    saved = tmp_path / "here.toml"
    code, _, err = cli("hardware", "--show", "rtx4090", "--save", saved)
    assert code == 0, err
    back, preset = load_hardware(saved), get_hardware("rtx4090")
    assert (back.gpu, back.link, back.cpu) == (preset.gpu, preset.link, preset.cpu)
    code, _, err = cli("hardware", "--save", tmp_path / "x.toml")
    assert code == 1 and "give --show too" in err and not (tmp_path / "x.toml").exists()
    code, _, err = cli("hardware", "--show", "rtx4090", "--save", tmp_path / "no" / "x.toml")
    assert code == 1 and len(err.strip().splitlines()) == 1


def test_a_saved_or_calibrated_hardware_file_is_replaced_only_with_force(cli, tmp_path):
    """``hardware --save`` and ``calibrate --out`` wrote over an existing file (a hand-edited machine lost to a
    slip), where ``trace synth`` and ``train`` refuse one; each asks for ``--force`` now, before any work."""
    mine = tmp_path / "mine.toml"
    mine.write_text("# my edits\n")
    for args in (("hardware", "--show", "h100", "--save", mine),
                 ("calibrate", "--model", "olmoe-1b-7b", "--backend", "virtual", "--out", mine),
                 ("calibrate", "--engine", "llama.cpp", "--out", mine)):
        code, _, err = cli(*args)
        assert (code, err) == (1, f"moesim: error: {mine}: exists; pass --force to replace the hardware file\n"), args
        assert mine.read_text() == "# my edits\n"
    code, _, err = cli("hardware", "--show", "h100", "--save", mine, "--force")
    assert code == 0 and load_hardware(mine).gpu == get_hardware("h100").gpu
    code, _, err = cli("hardware", "--force")
    assert (code, err) == (1, "moesim: error: --force takes the machine --show names (and replaces the file --save "
                              "names); give --show too\n")


def test_local_is_measured_once_per_process(monkeypatch):
    """Every run of one command (a sweep's configurations, a served stream's rates) sees the same machine."""
    from moesim.sim import hardware
    from moesim.sim.presets import CPUS, SYSTEMS

    calls = []
    machine = get_hardware("ryzen-7950x")
    monkeypatch.setattr(hardware, "detect", lambda **measures: calls.append(1) or machine)
    hardware.this_machine.cache_clear()
    try:
        first, second = get_hardware("local"), get_hardware("local", ram=8)
    finally:
        hardware.this_machine.cache_clear()
    assert calls == [1] and first.cpu == CPUS[SYSTEMS["ryzen-7950x"][2]] and second.cpu.ram_gb == 8.0


@pytest.mark.parametrize("x16, lanes", [("pcie3", 8), ("pcie3", 4), ("pcie4", 8), ("pcie4", 4), ("pcie5", 8),
                                        ("pcie5", 4)])
def test_a_narrow_slot_is_its_lanes_share_of_x16(x16, lanes):
    """PCIe's rate is per lane: x8 is half of x16's nominal rate, x4 a quarter, at the same copy efficiency and
    latency; --link takes each, and a copy over it takes that much longer."""
    from moesim.sim.costs import link_copy_s
    from moesim.sim.hardware import get_hardware
    from moesim.sim.presets import LINKS

    narrow = LINKS[f"{x16}-x{lanes}"]
    assert (narrow.gbps, narrow.efficiency, narrow.latency_us) == (LINKS[x16].gbps * lanes / 16, LINKS[x16].efficiency,
                                                                   LINKS[x16].latency_us)
    hw = get_hardware("rtx4090", link=narrow.name)
    nbytes = 1e9
    assert link_copy_s(hw.link, nbytes) - narrow.latency_us * 1e-6 == pytest.approx(
        16 / lanes * (link_copy_s(LINKS[x16], nbytes) - LINKS[x16].latency_us * 1e-6), rel=1e-12)
