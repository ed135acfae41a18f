"""Unit slips in a machine's numbers (issue 65, part 4): a number past the most any real part has is warned of in one
line naming the slip it likely is (12288 "GiB" of GPU memory: MiB?); ten times past it, where the answer would be
wrong by orders of magnitude, it is refused unless forced (--force, ``force=True``); no preset and no shipped machine
is either. The bounds and their sources: ``moesim.sim.hardware.PLAUSIBLE``, docs/hardware.md."""

import json
import re
import warnings
from dataclasses import replace
from itertools import product
from pathlib import Path

import pytest

import moesim
from moesim.errors import MoesimError, MoesimWarning
from moesim.sim.config import Config, config_id
from moesim.sim.hardware import TEMPLATE, check_hardware, get_hardware, load_hardware
from moesim.sim.machine import Hardware
from moesim.sim.presets import CPUS, GPUS, LINKS, SSDS, SYSTEMS, unified_link

ROOT = Path(__file__).resolve().parent.parent
GPU_MIB = "is more GPU memory than any GPU has (at most ~512 GiB); 12288 MiB would be 12 GiB: is it MiB?"


def box(tmp_path: Path, old: str, new: str, name: str = "box.toml") -> Path:
    """The template (an RTX 3060 desktop) with one line changed."""
    assert old in TEMPLATE, old
    path = tmp_path / name
    path.write_text(TEMPLATE.replace(old, new, 1))
    return path


# the issue's four slips as a file holds them: the line, and what becomes of it (warned; refused unless forced; refused
# whatever is given: a clock of 3600 GHz is past the range no real machine comes near, where the model's times break)
SLIPS = {
    "GPU memory in MiB": ("hbm_gb = 12 ", "hbm_gb = 12288 ", f"[gpu] hbm_gb = 12288 {GPU_MIB}", "refused"),
    "DRAM bandwidth in MB/s": ("dram_gbps = 51.2 ", "dram_gbps = 51200 ",
                               "[cpu] dram_gbps = 51200 is more DRAM bandwidth than any CPU socket has (at most ~2000 "
                               "GB/s); 51200 MB/s would be 51.2 GB/s: is it MB/s?", "refused"),
    "a clock in MHz": ("ghz = 4.2 ", "ghz = 3600 ", "[cpu] ghz must be from 0.01 to 100 GHz (no real machine comes "
                                                   "near that), got 3600; 3600 MHz would be 3.6 GHz: is it MHz?",
                       "absurd"),
    "PCIe in Gbit/s": ("gbps = 32 ", "gbps = 256 ", "[link] gbps = 256 is more bandwidth than any PCIe link has (at "
                                                   "most ~128 GB/s); 256 Gbit/s would be 32 GB/s: is it Gbit/s?",
                       "warned"),
}


@pytest.mark.parametrize("slip", list(SLIPS))
def test_each_slip_of_the_issue_is_one_line_naming_it(cli, tmp_path, slip):
    old, new, line, fate = SLIPS[slip]
    path = box(tmp_path, old, new)
    code, _, err = cli("hardware", "--show", path)
    if fate == "warned":
        assert (code, err) == (0, f"moesim: warning: {path}: {line}\n")
    elif fate == "refused":
        assert (code, err) == (1, f"moesim: error: {path}: {line} (--force takes it)\n")
        code, _, err = cli("hardware", "--show", path, "--force")
        assert (code, err) == (0, f"moesim: warning: {path}: {line}\n")
    else:  # past what the model computes with: no flag takes it
        assert (code, err) == (1, f"moesim: error: {path}: {line}\n")
        assert cli("hardware", "--show", path, "--force")[:3:2] == (1, f"moesim: error: {path}: {line}\n")


@pytest.mark.parametrize("old, new, line", [
    ("hbm_gb = 12 ", "hbm_gb = 2048 ", "[gpu] hbm_gb = 2048 is more GPU memory than any GPU has (at most ~512 GiB); "
                                       "2048 MiB would be 2 GiB: is it MiB?"),
    ("hbm_gbps = 360 ", "hbm_gbps = 40000 ", "[gpu] hbm_gbps = 40000 is more memory bandwidth than any GPU has (at "
                                             "most ~32000 GB/s); 40000 Gbit/s would be 5000 GB/s: is it Gbit/s?"),
    ("dram_gbps = 51.2 ", "dram_gbps = 2457.6 ", "[cpu] dram_gbps = 2457.6 is more DRAM bandwidth than any CPU socket "
                                                 "has (at most ~2000 GB/s); 2457.6 Gbit/s would be 307.2 GB/s: is it "
                                                 "Gbit/s?"),
    ("ram_gb = 32 ", "ram_gb = 32768 ", "[cpu] ram_gb = 32768 is more RAM than any CPU socket holds (at most ~8192 "
                                        "GiB); 32768 MiB would be 32 GiB: is it MiB?"),
    ("tflops = 25.6 ", "tflops = 25600 ", "[gpu] tflops = 25600 is more dense bf16 FLOP/s than any GPU has (at most "
                                          "~5000 TFLOP/s); 25600 GFLOP/s would be 25.6 TFLOP/s: is it GFLOP/s?"),
    ("ghz = 4.2 ", "ghz = 36 ", "[cpu] ghz = 36 is a faster clock than any CPU runs at (at most ~7 GHz)"),  # 36 MHz: no
    ("# sockets = 1 ", "sockets = 2 ", None),  # 32 GiB on two sockets: as plausible as on one
])
def test_a_number_past_every_real_parts_is_warned_of_and_taken(tmp_path, old, new, line):
    path = box(tmp_path, old, new)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_hardware(path)
    assert [str(w.message) for w in caught] == ([f"{path}: {line}"] if line else [])
    assert all(w.category is MoesimWarning for w in caught)


def test_ram_is_bounded_per_socket_and_a_link_by_what_it_is(tmp_path):
    """A server's RAM is its sockets' (12 TiB on two EPYC 9005 sockets is real, on one it is not); PCIe's 128 GB/s
    bounds only a link whose name says PCIe (NVLink-C2C moves 450 GB/s each way)."""
    two = box(tmp_path, "ram_gb = 32 ", "ram_gb = 12288\nsockets = 2 ", "two.toml")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_hardware(two)
        check_hardware(replace(get_hardware("gh200"), link=replace(LINKS["nvlink-c2c"], gbps=900.0)), "gh200")
    with pytest.warns(MoesimWarning, match=r"ram_gb = 12288 is more RAM than any CPU socket holds \(at most ~8192 "
                                           r"GiB\); 12288 MiB would be 12 GiB"):
        load_hardware(box(tmp_path, "ram_gb = 32 ", "ram_gb = 12288 ", "one.toml"))
    with pytest.warns(MoesimWarning, match=r"ram_gb = 65536 is more RAM than any CPU socket holds \(at most ~16384 "
                                           r"GiB for 2 sockets\); 65536 MiB would be 64 GiB"):
        load_hardware(box(tmp_path, "ram_gb = 32 ", "ram_gb = 65536\nsockets = 2 ", "two.toml"))
    c2c = box(tmp_path, 'name = "PCIe 4 x16"', 'name = "NVLink-C2C"', "c2c.toml")
    c2c.write_text(c2c.read_text().replace("gbps = 32 ", "gbps = 1200 "))
    with pytest.warns(MoesimWarning, match=r"\[link\] gbps = 1200 is more bandwidth than any host link has \(at most "
                                           r"~1000 GB/s\); 1200 Gbit/s would be 150 GB/s: is it Gbit/s\?"):
        load_hardware(c2c)


def test_no_preset_and_no_shipped_machine_is_past_a_real_parts(tmp_path):
    """Every preset part in every pairing, every machine of benchmarks/machines, the template and the documented
    examples: none is warned of (each checked afresh: ``get_hardware`` does not check its presets)."""
    shipped = sorted((ROOT / "benchmarks" / "machines").glob("*.toml"))
    assert len(shipped) >= 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in SYSTEMS:
            check_hardware(replace(get_hardware(name)), name)
        for gpu, link, cpu in product(GPUS.values(), LINKS.values(), CPUS.values()):  # (a unified GPU takes its own)
            check_hardware(Hardware("x", gpu, unified_link(gpu) if gpu.unified else link, cpu=cpu), "x")
        for ssd, cpu in product(SSDS.values(), CPUS.values()):
            check_hardware(Hardware("x", None, None, ssd, cpu=replace(cpu, sockets=2)), "x")
        for path in shipped:
            load_hardware(path)
        docs = re.findall(r"```toml\n(.*?)```", (ROOT / "docs" / "hardware.md").read_text(), re.S)
        for i, text in enumerate([TEMPLATE, *docs]):
            (tmp_path / f"{i}.toml").write_text(text)
            load_hardware(tmp_path / f"{i}.toml")


def test_a_warned_machine_runs_with_the_warning_on_stderr_once(cli, tmp_path):
    path = box(tmp_path, "gbps = 32 ", "gbps = 256 ")
    code, out, err = cli("sim", "run", "bundled", "--hardware", path, "--capacity", "2", "--dtype", "int4")
    assert code == 0 and "TPOT" in out, err
    line = SLIPS["PCIe in Gbit/s"][2]
    assert [text for text in err.splitlines() if "moesim:" in text] == [f"moesim: warning: {path}: {line}"]


def test_a_refused_machine_writes_nothing_and_force_takes_it(cli, tmp_path):
    """Each command that takes a machine refuses the GPU memory in MiB before writing anything; --force takes it, with
    the warning, and writes: the saved configuration carries force, so it runs again as it ran."""
    path = box(tmp_path, "hbm_gb = 12 ", "hbm_gb = 12288 ")
    refused = f"moesim: error: {path}: [gpu] hbm_gb = 12288 {GPU_MIB} (--force takes it)\n"
    warned = f"moesim: warning: {path}: [gpu] hbm_gb = 12288 {GPU_MIB}"
    saved, served, shown = tmp_path / "run.toml", tmp_path / "requests.parquet", tmp_path / "shown.toml"
    runs = {saved: ("sim", "run", "bundled", "--hardware", path, "--capacity", "4", "--dtype", "int4",
                    "--save-config", saved),
            served: ("sim", "serve", "bundled", "--hardware", path, "--rate", "1", "--requests", "2", "--dtype", "int4",
                     "--out", served),
            shown: ("hardware", "--show", path, "--save", shown)}
    for out, args in runs.items():
        assert cli(*args)[::2] == (1, refused), args
        assert not out.exists(), args
    for args in (("plan", "--model", "mixtral-8x7b", "--hardware", path),
                 ("replay", "bundled", "--backend", "virtual", "--hardware", path, "--capacity", "4"),
                 ("validate", "bundled", "--backend", "virtual", "--hardware", path, "--capacity", "4")):
        assert cli(*args)[::2] == (1, refused), args
    for out, args in runs.items():
        code, _, err = cli(*args, "--force")
        assert code == 0 and out.exists() and warned in err.splitlines(), (args, err)
    code, out, err = cli("plan", "--model", "mixtral-8x7b", "--hardware", path, "--dtype", "bf16", "--force", "--json")
    rows = json.loads(out)["rows"]  # what the issue saw, now asked for
    assert code == 0 and rows[0]["strategy"] == "all-on-gpu" and warned in err.splitlines(), err
    assert Config.from_toml(saved).hardware.force is True
    code, _, err = cli("sim", "run", "bundled", "--config", saved)
    assert code == 0 and warned in err.splitlines(), err
    with pytest.raises(MoesimError, match=re.escape(f"{shown}: [gpu] hbm_gb = 12288 {GPU_MIB} (force=True takes it)")):
        load_hardware(shown)  # what was written is what was taken, and is refused the same way


def test_memory_sizes_typed_as_options_are_held_to_real_parts_too(cli):
    args = ("sim", "run", "bundled", "--capacity", "4", "--dtype", "int4")
    line = f"--vram 12288 {GPU_MIB}"
    assert cli(*args, "--vram", "12288")[::2] == (1, f"moesim: error: {line} (--force takes it)\n")
    code, out, err = cli(*args, "--vram", "12288", "--force")
    assert code == 0 and "12288 GiB" in " ".join(out.split()) and f"moesim: warning: {line}" in err.splitlines(), err
    code, _, err = cli(*args, "--vram", "2048")
    assert code == 0 and "moesim: warning: --vram 2048 is more GPU memory than any GPU has (at most ~512 GiB); 2048 " \
                         "MiB would be 2 GiB: is it MiB?" in err.splitlines(), err
    code, _, err = cli(*args, "--ram", "65536")
    assert code == 0 and "moesim: warning: --ram 65536 is more RAM than any CPU socket holds (at most ~8192 GiB); " \
                         "65536 MiB would be 64 GiB: is it MiB?" in err.splitlines(), err


def test_the_api_takes_force_as_a_keyword(tmp_path):
    """``force=True`` in ``simulate`` (a file, ``vram``, a machine built in code) and ``moesim.hardware``; the warning
    is Python's (``MoesimWarning``)."""
    path = box(tmp_path, "hbm_gb = 12 ", "hbm_gb = 12288 ")
    trace = moesim.synth_trace(16, 64, 8, sequences=1, tokens=2, seed=0, model="olmoe-1b-7b")
    built = replace(moesim.hardware("rtx4090"), gpu=replace(GPUS["rtx4090"], hbm_gb=12288.0))
    for hardware, settings, where in ((str(path), {}, f"{path}: [gpu] hbm_gb = 12288"),
                                      ("rtx4090", {"vram": 12288}, "vram=12288"),
                                      (built, {}, "hardware 'rtx4090': [gpu] hbm_gb = 12288")):
        with pytest.raises(MoesimError) as caught:
            moesim.simulate(trace, hardware=hardware, capacity=8, **settings)
        assert str(caught.value) == f"{where} {GPU_MIB} (force=True takes it)"
        with pytest.warns(MoesimWarning) as shown:
            r = moesim.simulate(trace, hardware=hardware, capacity=8, force=True, **settings)
        assert [str(w.message) for w in shown] == [f"{where} {GPU_MIB}"] and r.vram_limit_gb == 12288
    with pytest.raises(MoesimError, match=r"\(force=True takes it\)"):
        moesim.hardware(str(path))
    with pytest.warns(MoesimWarning, match="12288 MiB would be 12 GiB"):
        assert moesim.hardware(str(path), force=True).gpu.hbm_gb == 12288
    with pytest.raises(MoesimError, match="force: a hit-rate run does not read it"):
        moesim.hitrate(trace, capacity=4, force=True)


def test_force_changes_no_result_id():
    """A forced run computes what the unforced one would: same ``config_id`` (a sweep resumed with --force finds its
    rows), though the setting is kept (a saved configuration runs again as it ran)."""
    plain, forced = Config.build(vram=12288.0), Config.build(vram=12288.0, force=True)
    assert forced.hardware.force and forced.flat()["force"] is True
    assert config_id("des", "t", forced) == config_id("des", "t", plain) == config_id("des", "t", plain.flat())
    with pytest.raises(MoesimError, match=r"\[hardware\] force must be true or false, got 'yes'"):
        Config.build(force="yes")


def test_a_sweep_takes_force_for_every_row(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = box(tmp_path, "hbm_gb = 12 ", "hbm_gb = 12288 ")
    spec = tmp_path / "spec.toml"
    spec.write_text(f'traces = ["bundled"]\nkind = "des"\n[fixed]\nhardware = "{path}"\ndtype = "int4"\n'
                    '[axes]\ncapacity = [4]\n')
    code, _, err = cli("sweep", spec, "--out", "r.parquet")
    assert code == 1 and f"{GPU_MIB} (force=True takes it)" in err and not (tmp_path / "r.parquet").exists()
    code, _, err = cli("sweep", spec, "--out", "r.parquet", "--force")
    assert code == 0 and (tmp_path / "r.parquet").exists(), err
    assert [line for line in err.splitlines() if "moesim:" in line] == [
        f"moesim: warning: {path}: [gpu] hbm_gb = 12288 {GPU_MIB}"]
    spec.write_text('traces = ["bundled"]\n[axes]\ncapacity = [4]\n')
    assert cli("sweep", spec, "--out", "h.parquet", "--force")[::2] == (
        1, "moesim: error: --force: a hitrate sweep simulates no machine, so nothing reads it\n")
