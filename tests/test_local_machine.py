"""``--hardware local`` (``moesim.sim.local_machine``): the readers on fixed /proc and nvidia-smi texts (a two-socket
Sapphire Rapids Xeon, a Zen 4 desktop, an Arm server, VMs without socket or core ids, GPUs named as nvidia-smi
names them), ``detect`` with those texts fed in, one real DRAM read (finite and positive; no speed is checked),
and every reader fuzzed: a result or a one-line MoesimError, never another exception."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.sim import local_machine as lm
from moesim.sim.cpu_rates import ISA_FLOP_PER_CYCLE
from moesim.sim.hardware import load_hardware, write_hardware
from moesim.sim.presets import GPUS, LINKS
from moesim.sim.machine import GPU, Hardware


def _x86(vendor, family, model, name, flags, topology, mhz="2000.000"):
    """A /proc/cpuinfo of x86 processors; ``topology``: (physical id or None, core id or None) per logical CPU."""
    blocks = []
    for n, (phys, core) in enumerate(topology):
        lines = [f"processor\t: {n}", f"vendor_id\t: {vendor}", f"cpu family\t: {family}", f"model\t\t: {model}",
                 f"model name\t: {name}", "stepping\t: 8", f"cpu MHz\t\t: {mhz}", "cache size\t: 107520 KB"]
        if phys is not None:
            lines.append(f"physical id\t: {phys}")
        lines.append("siblings\t: 4")
        if core is not None:
            lines.append(f"core id\t\t: {core}")
        lines += ["cpu cores\t: 2", f"flags\t\t: {flags}", "bugs\t\t: spectre_v1 spectre_v2", ""]
        blocks.append("\n".join(lines))
    return "\n".join(blocks) + "\n"


X86_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep sse sse2 ht syscall nx lm avx fma avx2 bmi1 bmi2"
AVX512 = X86_FLAGS + " avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 avx512_vnni"
# two sockets x two cores x two threads
XEON = _x86("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8470", AVX512 + " amx_bf16 amx_tile amx_int8",
            [(p, c) for p in (0, 1) for c in (0, 1)] * 2, mhz="2000.000")
# a cloud VM's two vCPUs: one core's two hyperthreads, AMX and AVX-512 listed
XEON_VM = _x86("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
               AVX512 + " amx_bf16 amx_tile amx_int8", [(0, 0)] * 2, mhz="2699.998")
# one socket, four cores x two threads
ZEN4 = _x86("AuthenticAMD", 25, 97, "AMD Ryzen 9 7950X 16-Core Processor", AVX512,
            [(0, c) for c in range(4)] * 2, mhz="4500.000")
ZEN5 = _x86("AuthenticAMD", 26, 68, "AMD Ryzen 9 9950X 16-Core Processor", AVX512, [(0, c) for c in range(4)])
ZEN3 = _x86("AuthenticAMD", 25, 33, "AMD Ryzen 9 5950X 16-Core Processor", X86_FLAGS, [(0, c) for c in range(4)])
VM_NO_SOCKET = _x86("GenuineIntel", 6, 85, "Intel Xeon Processor (Cascadelake)", AVX512, [(None, c) for c in range(3)])
VM_NO_IDS = _x86("GenuineIntel", 6, 85, "Intel Xeon Processor", X86_FLAGS, [(None, None)] * 5)
ARM = "".join(f"""processor\t: {n}
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm sve sve2 i8mm bf16
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd4f
CPU revision\t: 0

""" for n in range(4))
LSCPU_ARM = "Architecture:  aarch64\nVendor ID:     ARM\nModel name:    Neoverse-V2\nSocket(s):     1\n"
MEMINFO = "MemTotal:       263921424 kB\nMemFree:        250000000 kB\nMemAvailable:   255000000 kB\nHugePages_Total:       0\n"
SMI_4090 = "NVIDIA GeForce RTX 4090, 24564\n"


def _machine(cpuinfo, meminfo=MEMINFO, max_freq=None, llc=None, smi=None, pcie="4, 16\n", lscpu=None):
    """(read, run) over fixed texts: ``llc`` (size, shared_cpu_list) is cpu0's L3; ``smi`` None: no nvidia-smi,
    an int: nvidia-smi fails with that status."""
    files = {lm.CPUINFO: cpuinfo, lm.MEMINFO: meminfo, lm.MAX_FREQ: max_freq}
    caches = [("1", "Data", "48K", "0"), ("1", "Instruction", "32K", "0"), ("2", "Unified", "2048K", "0")]
    if llc is not None:
        caches.append(("3", "Unified", *llc))
    for i, (level, kind, size, shared) in enumerate(caches):
        for key, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            files[lm.CACHE.format(i, key)] = value + "\n"
    calls = []

    def run(args, **kwargs):
        calls.append(args)
        if args[0] == "lscpu":
            if lscpu is None:
                raise FileNotFoundError("lscpu")
            return subprocess.CompletedProcess(args, 0, lscpu, "")
        if smi is None:
            raise FileNotFoundError(args[0])
        if isinstance(smi, int):
            return subprocess.CompletedProcess(args, smi, "", "NVIDIA-SMI has failed")
        return subprocess.CompletedProcess(args, 0, pcie if "pcie" in args[1] else smi, "")

    run.calls = calls
    return files.get, run


class Measure:
    """A DRAM measure that records the buffer it was asked for."""

    def __init__(self, gbps=100.0):
        self.gbps, self.asked = gbps, []

    def __call__(self, nbytes):
        self.asked.append(nbytes)
        return self.gbps


# ---------------------------------------------------------------- the readers


@pytest.mark.parametrize("text, sockets, cores, isa", [
    (XEON, 2, 2, "amx"),
    (XEON_VM, 1, 1, "amx"),         # a 2-vCPU cloud VM: one core, its two hyperthreads
    (ZEN4, 1, 4, "avx512-256"),     # Zen 4: AVX-512 on 256-bit pipes
    (ZEN5, 1, 4, "avx512"),         # family 1Ah: a 512-bit datapath
    (ZEN3, 1, 4, "avx2"),           # family 19h without AVX-512
    (ARM, 1, 4, "neon"),            # no core ids: every processor listed is a core
    (VM_NO_SOCKET, 1, 3, "avx512"),  # core ids without a physical id: one socket
    (VM_NO_IDS, 1, 5, "avx2"),
])
def test_cpuinfo(text, sockets, cores, isa):
    info = lm.parse_cpuinfo(text)
    assert (info.sockets, info.cores, info.isa) == (sockets, cores, isa)
    assert lm.isa(text) == isa


def test_cpuinfo_fields():
    info = lm.parse_cpuinfo(XEON)
    assert (info.model, info.vendor, info.family, info.processors, info.mhz) == (
        "Intel(R) Xeon(R) Platinum 8470", "GenuineIntel", 6, 8, 2000.0)
    assert lm.parse_cpuinfo(ARM).model == ""  # Arm's cpuinfo names no model: lscpu does
    # no blank line between two processors still gives two
    assert lm.parse_cpuinfo("processor : 0\ncore id : 0\nprocessor : 1\ncore id : 1\n").cores == 2
    assert lm.parse_cpuinfo("cpu family : 0x19\nvendor_id : AuthenticAMD\nflags : avx512f\n").isa == "avx512-256"


def test_unreadable_cpuinfo():
    """avx2, no clock and the OS's logical CPUs where /proc says nothing."""
    usable = len(os.sched_getaffinity(0))  # the CPUs this process may run on bound every count
    assert lm.physical_cores("") == lm.physical_cores("hello") == usable
    # two sockets of two cores, two threads each; four cores, two threads each
    assert lm.physical_cores(XEON) == lm.physical_cores(ZEN4) == min(4, usable) and lm.thread_counts(8) == [1, 2, 4, 8] and lm.thread_counts(6) == [1, 2, 4, 6]
    assert lm.thread_counts(1) == [1]
    assert lm.isa("") == lm.isa("not a cpuinfo") == "avx2"
    assert lm.cpuinfo_ghz(ZEN4) == 4.5 and lm.cpuinfo_ghz(ARM) is None and lm.cpuinfo_ghz("") is None
    with pytest.raises(MoesimError, match="no processor"):
        lm.parse_cpuinfo("hello\nworld")


def test_clock():
    assert lm.clock_ghz(lm.parse_cpuinfo(ZEN4), "5881000\n") == 5.881  # cpufreq's maximum first
    assert lm.clock_ghz(lm.parse_cpuinfo(ZEN4), None) == 4.5           # then cpuinfo's cpu MHz
    assert lm.clock_ghz(lm.parse_cpuinfo(ARM), None) == lm.DEFAULT_GHZ
    assert lm.clock_ghz(lm.parse_cpuinfo(ZEN4), "1\n") == 4.5          # 1 kHz is no clock


def test_meminfo():
    mem = lm.parse_meminfo(MEMINFO)
    assert mem["MemTotal"] == 263921424 * 1024 and mem["MemAvailable"] == 255000000 * 1024
    assert "HugePages_Total" not in mem  # not a kB field
    with pytest.raises(MoesimError, match="MemTotal"):
        lm.parse_meminfo("MemFree: 12 kB\n")


def test_cache_and_buffer():
    assert lm.parse_size("32768K") == 32 << 20 and lm.parse_size("1M") == 1 << 20 and lm.parse_size("x") is None
    assert lm.parse_cpulist("0-7,96-103") == 16 and lm.parse_cpulist("3") == 1 and lm.parse_cpulist("7-3") == 0
    read, _ = _machine(XEON, llc=("107520K", "0-3"))
    assert lm.llc_bytes(read, 8) == 2 * 107520 * 1024  # one L3 per four CPUs, eight CPUs
    read, _ = _machine(XEON)
    assert lm.llc_bytes(read, 8) == 8 * 2048 * 1024     # no L3: the L2, one per CPU
    assert lm.llc_bytes(lambda path: None, 8) == 0
    assert lm.buffer_bytes(0, None) == lm.MIN_BUFFER
    assert lm.buffer_bytes(200 << 20, None) == 800 << 20
    assert lm.buffer_bytes(200 << 20, 1 << 30) == 256 << 20  # a quarter of what is available


def test_nvidia_smi():
    assert lm.parse_nvidia_smi(SMI_4090) == (("NVIDIA GeForce RTX 4090", 24564.0),)
    assert lm.parse_nvidia_smi("NVIDIA H100 80GB HBM3, 81559\nNVIDIA GeForce RTX 3090, 24576\n") == (
        ("NVIDIA H100 80GB HBM3", 81559.0), ("NVIDIA GeForce RTX 3090", 24576.0))
    for bad in ("", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090, N/A", ", 1024"):
        with pytest.raises(MoesimError):
            lm.parse_nvidia_smi(bad)
    # no memory: a GPU that shares the host's (a DGX Spark's); only such a preset is taken without it
    assert lm.parse_nvidia_smi("NVIDIA GB10, [N/A]\n") == (("NVIDIA GB10", None),)
    _, run = _machine(ZEN4, smi="NVIDIA GeForce RTX 4090, [N/A]\n")
    with pytest.raises(MoesimError, match="nvidia-smi gave no memory for GPU 0 'NVIDIA GeForce RTX 4090'"):
        lm.detect_gpu(run, host_gb=64.0)
    assert lm.parse_pcie("4, 16\n") == (4, 16) and lm.parse_pcie("[N/A], [N/A]") == (None, None)
    assert lm.parse_pcie("") == (None, None) and lm.parse_pcie("4, 16\n4, 8\n", 1) == (4, 8)
    assert lm.parse_pcie("4, 16\n", 1) == (None, None)


@pytest.mark.parametrize("name, preset", [
    ("NVIDIA GeForce RTX 4090", "rtx4090"), ("NVIDIA GeForce RTX 4090 D", "rtx4090d"),
    ("NVIDIA GeForce RTX 2080 Ti", "rtx2080ti"), ("NVIDIA GeForce RTX 5070 Ti", "rtx5070ti"),
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-40GB", "a100-40g"), ("NVIDIA RTX A6000", "a6000"),
    ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA H100 PCIe", None), ("NVIDIA A100-SXM4-80GB", None), ("NVIDIA GeForce RTX 4080 SUPER", None),
    ("NVIDIA GeForce RTX 3070", None),
])
def test_gpu_names(name, preset):
    assert lm.match_gpu(name) == preset


# ---------------------------------------------------------------- detect


def detect(**parts) -> Hardware:
    """``lm.detect`` on fixed inputs; the clock not measured (cpufreq's or cpuinfo's) unless a test gives one."""
    return lm.detect(**{"clock": lambda isa: None, **parts})


def test_the_clock_under_load_replaces_the_nominal_one_where_it_can_be_measured():
    read, run = _machine(XEON, max_freq="3800000\n", llc=("107520K", "0-3"), smi=SMI_4090)
    asked = []
    hw = detect(measure=Measure(400.0), run=run, read=read, clock=lambda isa: asked.append(isa) or 3.1234)
    assert asked == ["amx"] and hw.cpu.ghz == 3.123 and "3.123 GHz measured under load" in hw.source
    for nonsense in (None, 0.0, 50.0, float("nan")):  # not measurable, or not a clock: cpufreq's maximum
        assert detect(measure=Measure(400.0), run=run, read=read, clock=lambda isa: nonsense).cpu.ghz == 3.8
    assert lm.measure_clock_ghz("neon") is None  # the chain's 4 cycles are x86's


def test_the_clock_chain_runs_on_x86():
    ghz = lm.measure_clock_ghz("avx2", steps=100_000, passes=1)  # a rate, not checked against a time
    assert isinstance(ghz, float) and math.isfinite(ghz) and ghz > 0


@pytest.mark.parametrize("cpu_share, seconds", [(0.5, 0.0005), (1.0, 0.001), (2.0, 0.001)])
def test_the_clock_counts_the_cpu_time_the_chains_got_on_shared_cores(monkeypatch, cpu_share, seconds):
    """Each pass lasts 1 ms of wall clock (the stand-in clocks tick 1 ms a reading); where the threads got half of it
    (another process on their cores) a pass is their 0.5 ms of CPU time, else (all of it, or more: threads waiting
    at the end of a pass) the wall clock's 1 ms: 4 cycles x 100,000 steps in that."""
    import itertools

    lanes = lm.get_num_threads()
    wall, cpu = itertools.count(0.0, 0.001), itertools.count(0.0, cpu_share * 0.001 * lanes)
    monkeypatch.setattr(lm, "time", SimpleNamespace(perf_counter=lambda: next(wall), process_time=lambda: next(cpu)))
    assert lm.measure_clock_ghz("amx", steps=100_000) == pytest.approx(4 * 100_000 / seconds / 1e9, rel=1e-9)


def test_xeon_with_an_rtx4090():
    read, run = _machine(XEON, max_freq="3800000\n", llc=("107520K", "0-3"), smi=SMI_4090)
    measure = Measure(400.0)
    hw = detect(measure=measure, run=run, read=read)
    assert measure.asked == [4 * 2 * 107520 * 1024]  # 4x both sockets' L3 (840 MiB, over 512 MiB)
    cpu = hw.cpu
    assert (hw.name, cpu.sockets, cpu.cores, cpu.isa, cpu.ghz, cpu.ram_gb) == ("local", 2, 2, "amx", 3.8, 251.7)
    assert (cpu.dram_gbps, cpu.dram_eff) == (200.0, 1.0)  # per socket, measured
    assert cpu.name == "Intel(R) Xeon(R) Platinum 8470 (measured 200.0 GB/s per socket)"
    assert hw.gpu == GPU("NVIDIA GeForce RTX 4090", 1008, 165.2, 23.99)
    assert hw.link == LINKS["pcie4"]
    assert hw.source.startswith("local: detected 2 x Intel(R) Xeon(R) Platinum 8470")
    assert "preset rtx4090" in hw.source and "read by nvidia-smi" in hw.source


def test_two_gpus_each_on_its_link():
    """nvidia-smi lists an RTX 4090 in an x16 slot and an RTX 3060 in an x4 one: both, each with its link."""
    read, run = _machine(ZEN4, llc=("32768K", "0-7"), smi=SMI_4090 + "NVIDIA GeForce RTX 3060, 12288\n",
                         pcie="4, 16\n4, 4\n")
    hw = detect(measure=Measure(61.2), run=run, read=read)
    assert [(g.name, g.hbm_gb, lk) for g, lk in hw.gpus] == [
        ("NVIDIA GeForce RTX 4090", 23.99, LINKS["pcie4"]), ("NVIDIA GeForce RTX 3060", 12.0, LINKS["pcie4-x4"])]
    assert "GPU 1: NVIDIA GeForce RTX 3060 (12 GiB, bandwidth and FLOP/s of preset rtx3060)" in hw.source


def test_zen4_desktop_without_a_gpu():
    read, run = _machine(ZEN4, llc=("32768K", "0-7"))
    hw = detect(measure=Measure(61.2), run=run, read=read)
    assert hw == Hardware("local", None, None, cpu=hw.cpu)
    cpu = hw.cpu
    assert (cpu.name, cpu.sockets, cpu.cores, cpu.isa, cpu.ghz, cpu.dram_gbps, cpu.dram_eff) == (
        "AMD Ryzen 9 7950X 16-Core Processor (measured 61.2 GB/s)", 1, 4, "avx512-256", 4.5, 61.2, 1.0)
    assert "no GPU" in hw.source and hw.describe().startswith("no GPU, AMD Ryzen 9 7950X")
    assert [c[0] for c in run.calls] == ["nvidia-smi", "rocm-smi"]  # cpuinfo named the model: no lscpu


@pytest.mark.parametrize("status", [6, 9])
def test_failing_nvidia_smi_is_a_cpu_only_machine(status):
    read, run = _machine(ZEN4, smi=status)
    assert detect(measure=Measure(), run=run, read=read).gpu is None


def test_arm_server_takes_its_name_from_lscpu():
    read, run = _machine(ARM, lscpu=LSCPU_ARM)
    cpu = detect(measure=Measure(500.0), run=run, read=read).cpu
    assert (cpu.name, cpu.cores, cpu.isa, cpu.ghz) == ("Neoverse-V2 (measured 500.0 GB/s)", 4, "neon", lm.DEFAULT_GHZ)
    read, run = _machine(ARM)  # no lscpu either
    assert detect(measure=Measure(), run=run, read=read).cpu.name.startswith("neon CPU")


@pytest.mark.parametrize("name, pcie, preset, link", [
    ("NVIDIA H100 80GB HBM3, 81559", "5, 16", "h100", LINKS["pcie5"]),
    ("NVIDIA GeForce RTX 2080 Ti, 11264", "3, 8", "rtx2080ti", None),  # PCIe 3 x8: checked below
    ("NVIDIA RTX A6000, 49140", "[N/A], [N/A]", "a6000", LINKS["pcie4"]),  # not read: PCIe 4 x16
    ("NVIDIA GH200 480GB, 97871", "5, 16", "gh200", LINKS["nvlink-c2c"]),
])
def test_gpus_and_links(name, pcie, preset, link):
    from moesim.sim.presets import GPUS

    read, run = _machine(VM_NO_SOCKET, smi=name + "\n", pcie=pcie + "\n")
    hw = detect(measure=Measure(), run=run, read=read)
    assert (hw.gpu.hbm_gbps, hw.gpu.tflops) == (GPUS[preset].hbm_gbps, GPUS[preset].tflops)
    assert hw.gpu.hbm_gb == float(f"{int(name.rsplit(',')[1]) / 1024:.4g}")
    if link is None:  # PCIe 3 on 8 lanes: half of x16
        assert (hw.link.name, hw.link.gbps, hw.link.efficiency) == ("pcie3-x8", 8.0, LINKS["pcie3"].efficiency)
    else:
        assert hw.link == link


def test_a_gpu_not_among_the_presets():
    read, run = _machine(ZEN4, smi="NVIDIA GeForce RTX 3070, 12288\n")
    asked = []

    def unknown(name, hbm_gb):
        asked.append((name, hbm_gb))
        props = SimpleNamespace(memory_clock_rate=7_501_000, memory_bus_width=192)
        return lm.gpu_from_properties(name, hbm_gb, props, 20.5)

    hw = detect(measure=Measure(), run=run, read=read, unknown_gpu=unknown)
    assert asked == [("NVIDIA GeForce RTX 3070", 12.0)]
    assert (hw.gpu.hbm_gbps, hw.gpu.tflops, hw.gpu.flop_eff, hw.gpu.hbm_gb) == (360.0, 20.5, 1.0, 12.0)
    with pytest.raises(MoesimError, match="moesim hardware --template"):
        lm.gpu_from_properties("X", 12.0, SimpleNamespace(name="X"), 20.5)  # no memory clock in these properties


def test_torch_gpu_without_cuda_asks_for_a_hardware_file(monkeypatch):
    cuda = SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    with pytest.raises(MoesimError, match="moesim hardware --template") as exc:
        lm.torch_gpu("NVIDIA GeForce RTX 3070", 12.0)
    assert "\n" not in str(exc.value)
    read, run = _machine(ZEN4, smi="NVIDIA GeForce RTX 3070, 12288\n")
    with pytest.raises(MoesimError, match="RTX 3070"):
        detect(measure=Measure(), run=run, read=read)


def test_torch_gpu_reads_the_properties(monkeypatch):
    props = SimpleNamespace(name="NVIDIA GeForce RTX 3070", total_memory=12 << 30, memory_clock_rate=7_501_000,
                            memory_bus_width=192)
    cuda = SimpleNamespace(is_available=lambda: True, get_device_properties=lambda i: props)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(lm, "_gemm_tflops", lambda torch: 19.0)
    gpu = lm.torch_gpu("NVIDIA GeForce RTX 3070", 11.9)
    assert (gpu.hbm_gbps, gpu.tflops, gpu.hbm_gb, gpu.flop_eff) == (360.0, 19.0, 11.9, 1.0)
    assert gpu.name == "NVIDIA GeForce RTX 3070 (measured 19 TFLOP/s)"


def test_detect_refuses_what_it_cannot_read():
    read, run = _machine(ZEN4)
    with pytest.raises(MoesimError, match="/proc/cpuinfo"):
        detect(measure=Measure(), run=run, read=lambda path: None)
    for bad in (0.0, math.nan, -1.0, math.inf):
        with pytest.raises(MoesimError, match="DRAM"):
            detect(measure=Measure(bad), run=run, read=read)


def test_a_detected_machine_is_a_valid_hardware_file(tmp_path):
    read, run = _machine(XEON, max_freq="3800000\n", smi=SMI_4090)
    hw = detect(measure=Measure(123.456), run=run, read=read)
    path = tmp_path / "local.toml"
    write_hardware(hw, path)
    back = load_hardware(path)
    assert (back.gpu, back.link, back.cpu) == (hw.gpu, hw.link, hw.cpu)


def test_the_real_dram_read_gives_a_rate():
    """The real kernel on a small buffer: a finite, positive rate (no speed is asserted)."""
    gbps = lm.measure_dram_gbps(8 << 20, passes=1)
    assert math.isfinite(gbps) and gbps > 0


def test_this_machine():
    """The real readers here (the DRAM read stubbed): whatever /proc and nvidia-smi say, a machine or one line."""
    def no_gpu_measure(nbytes):
        assert nbytes >= 1 << 20
        return 10.0

    try:
        hw = detect(measure=no_gpu_measure, unknown_gpu=lambda name, gb: GPU(name, 100.0, 10.0, gb))
    except MoesimError as exc:
        assert "\n" not in str(exc)
        return
    assert hw.cpu.isa in ISA_FLOP_PER_CYCLE and hw.cpu.cores >= 1 and hw.cpu.ram_gb > 0


# ---------------------------------------------------------------- fuzzing


EXAMPLES = int(os.environ.get("MOESIM_FUZZ_EXAMPLES", "60"))  # as tests/test_fuzz.py: more for a longer campaign
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def outcome(fn):
    """``fn()``'s result, or None after a one-line MoesimError; any other exception fails the test."""
    try:
        return fn()
    except MoesimError as exc:
        assert str(exc) and "\n" not in str(exc).strip(), repr(exc)
        return None


def mutate(text: str, draw) -> str:
    """Lines dropped, duplicated or cut, characters replaced, the whole truncated."""
    lines = text.splitlines()
    for _ in range(draw(st.integers(0, 6))):
        if not lines:
            break
        i, action = draw(st.integers(0, len(lines) - 1)), draw(st.sampled_from(["drop", "dup", "cut", "swap"]))
        if action == "drop":
            del lines[i]
        elif action == "dup":
            lines.insert(i, lines[i])
        elif action == "cut":
            lines[i] = lines[i][:draw(st.integers(0, len(lines[i])))]
        else:
            j = draw(st.integers(0, max(len(lines[i]) - 1, 0)))
            lines[i] = lines[i][:j] + draw(st.sampled_from(list(":, \t-0x9Zé²\x00[N/A]"))) + lines[i][j + 1:]
    out = "\n".join(lines)
    return out[:draw(st.integers(0, len(out)))] if draw(st.booleans()) else out


@st.composite
def mutated(draw, base: list[str]) -> str:
    return mutate(draw(st.sampled_from(base)), draw)


def texts(base: list[str]):
    """Random text, or one of ``base`` mutated."""
    return st.one_of(st.text(max_size=300), mutated(base))


@FUZZ
@given(text=texts([XEON, ZEN4, ARM, VM_NO_IDS]))
def test_fuzz_cpuinfo(text):
    info = outcome(lambda: lm.parse_cpuinfo(text))
    if info is not None:
        assert info.sockets >= 1 and info.cores >= 0 and info.isa in ISA_FLOP_PER_CYCLE
    assert lm.isa(text) in ISA_FLOP_PER_CYCLE
    ghz = lm.cpuinfo_ghz(text)
    assert ghz is None or (math.isfinite(ghz) and ghz > 0)


@FUZZ
@given(text=texts([MEMINFO]))
def test_fuzz_meminfo(text):
    mem = outcome(lambda: lm.parse_meminfo(text))
    assert mem is None or mem["MemTotal"] > 0


@FUZZ
@given(text=texts([SMI_4090, "NVIDIA H100 80GB HBM3, 81559\nNVIDIA H100 80GB HBM3, 81559\n", "4, 16\n"]))
def test_fuzz_nvidia_smi(text):
    gpus = outcome(lambda: lm.parse_nvidia_smi(text))
    assert gpus is None or (gpus and all(name and math.isfinite(mib) and mib > 0 for name, mib in gpus))
    gen, width = lm.parse_pcie(text)
    assert lm.pcie_link(gen, width).gbps > 0
    lm.match_gpu(text)


@FUZZ
@given(text=texts([LSCPU_ARM, "32768K\n", "0-7,96-103\n", "5881000\n"]))
def test_fuzz_small_readers(text):
    assert isinstance(lm.parse_lscpu(text), dict)
    size = lm.parse_size(text)
    assert size is None or size >= 0
    assert lm.parse_cpulist(text) >= 0
    assert 0.1 <= lm.clock_ghz(None, text) <= 10


@FUZZ
@given(data=st.data())
def test_fuzz_detect(data):
    """The whole detection on mutated /proc, sysfs, lscpu and nvidia-smi texts."""
    draw = data.draw
    read, run = _machine(mutate(draw(st.sampled_from([XEON, ZEN4, ARM, VM_NO_SOCKET])), draw),
                         meminfo=mutate(MEMINFO, draw), max_freq=mutate("3800000\n", draw),
                         llc=(mutate("107520K", draw), mutate("0-3", draw)), lscpu=mutate(LSCPU_ARM, draw),
                         smi=draw(st.one_of(st.none(), st.just(9), mutated(
                             [SMI_4090, "NVIDIA RTX A6000, 49140\n", "NVIDIA Foo, 100\n"]))),
                         pcie=mutate("4, 16\n", draw))
    def unknown(name, hbm_gb):
        return lm.gpu_from_properties(name, hbm_gb, SimpleNamespace(memory_clock_rate=1e6, memory_bus_width=64), 5.0)

    hw = outcome(lambda: detect(measure=Measure(50.0), run=run, read=read, unknown_gpu=unknown))
    if hw is not None:
        cpu = hw.cpu
        assert cpu.sockets >= 1 and cpu.cores >= 1 and cpu.isa in ISA_FLOP_PER_CYCLE and cpu.ram_gb > 0
        assert 0.1 <= cpu.ghz <= 10 and cpu.dram_gbps > 0 and cpu.dram_eff == 1.0
        assert (hw.gpu is None) == (hw.link is None)
        assert hw.gpu is None or (hw.gpu.hbm_gb > 0 and hw.gpu.hbm_gbps > 0 and hw.link.gbps > 0)


# ---------------------------------------------------------------- an Apple chip


def _mac(chip="Apple M4 Max", memsize=str(128 * 2 ** 30), cores="16", gpu_cores="40", wired="0"):
    """``run`` on a Mac: sysctl's keys and system_profiler's displays as JSON (None: the command fails)."""
    sysctl = {"machdep.cpu.brand_string": chip, "hw.memsize": memsize, "hw.physicalcpu": cores,
              "iogpu.wired_limit_mb": wired}
    profile = None if gpu_cores is None else (
        '{"SPDisplaysDataType": [{"_name": "%s", "sppci_model": "%s", "sppci_cores": "%s"}]}' % (chip, chip, gpu_cores))

    def run(args, **kwargs):
        out = sysctl.get(args[-1]) if args[0] == "sysctl" else profile if args[0] == "system_profiler" else None
        return subprocess.CompletedProcess(args, 0 if out is not None else 1, (out or "") + "\n", "")
    return run


def test_an_apple_mac_is_its_chip(tmp_path):
    """An M4 Max with its 40-core GPU and 128 GiB: 546 GB/s and 18.4 TFLOP/s (the table's), the GPU mapping macOS's
    default three quarters (96 GiB) or the wired limit a user set (112 GiB), 16 cores reading the same memory; its
    32-core bin reads 410 GB/s at 32/40 of the FLOP/s. The machine is a valid hardware file."""
    hw = lm.detect(run=_mac(), platform="darwin")
    assert hw.gpu == GPU("Apple M4 Max (40-core GPU)", 546.0, 18.4, 96.0, unified=True, vendor="apple")
    assert (hw.cpu.cores, hw.cpu.isa, hw.cpu.dram_gbps, hw.cpu.ram_gb) == (16, "neon", 546.0, 128.0)
    assert hw.link.name == "unified" and "macOS's default 75%" in hw.source
    assert lm.detect(run=_mac(wired="114688"), platform="darwin").gpu.hbm_gb == 112.0
    small = lm.detect(run=_mac(gpu_cores="32", memsize=str(36 * 2 ** 30)), platform="darwin").gpu
    assert (small.hbm_gbps, small.tflops, small.hbm_gb) == (410.0, 14.72, 24.0)  # 2/3 of 36 GiB
    write_hardware(hw, tmp_path / "mac.toml")
    assert load_hardware(tmp_path / "mac.toml") == hw


@pytest.mark.parametrize("chip, gpu_cores, gbps, tflops", [
    ("Apple M1", "7", 68.25, 2.275),        # the 7-core bin: 7/8 of Apple's 2.6 TFLOP/s
    ("Apple M1 Pro", "16", 200.0, 5.31), ("Apple M2", "10", 100.0, 3.58), ("Apple M2 Pro", "16", 200.0, 5.726),
    ("Apple M3", "10", 100.0, 3.53), ("Apple M3 Pro", "18", 150.0, 6.36),
    ("Apple M3 Max", "30", 300.0, 10.6), ("Apple M3 Max", "40", 400.0, 14.13),  # two bins, two memory buses
    ("Apple M4", "10", 120.0, 4.04),
])
def test_the_base_and_pro_chips_and_both_m3_max_bins_are_their_spec_sheets(chip, gpu_cores, gbps, tflops):
    """A base or Pro chip, and the M3 Max whose 30-core bin has a 384-bit bus and its 40-core one a 512-bit bus: the
    bandwidth of the bin and FP32 TFLOP/s in proportion to its GPU cores."""
    gpu = lm.detect(run=_mac(chip=chip, gpu_cores=gpu_cores, memsize=str(32 * 2 ** 30)), platform="darwin").gpu
    assert (gpu.hbm_gbps, gpu.tflops, gpu.hbm_gb) == pytest.approx((gbps, tflops, 21.33), rel=1e-3)


@pytest.mark.parametrize("mac, message", [
    (dict(chip="Apple M5"), r"Apple M5: no bandwidth moesim has a source for"),
    (dict(gpu_cores=None), r"Apple M4 Max: system_profiler gave no GPU core count"),
    (dict(gpu_cores="24"), r"no GPU core count moesim has a bandwidth for \(32, 40 cores\)"),
    (dict(memsize="0"), r"sysctl gave no chip, memory or core count"),
    (dict(cores="-2"), r"sysctl gave no chip, memory or core count"),
])
def test_a_mac_moesim_cannot_describe_asks_for_a_hardware_file(mac, message):
    with pytest.raises(MoesimError, match=message + r".*moesim hardware --template"):
        lm.detect(run=_mac(**mac), platform="darwin")


@FUZZ
@given(data=st.data())
def test_fuzz_detect_apple(data):
    """The Mac's detection on mutated sysctl and system_profiler outputs: a machine or one line."""
    draw = data.draw
    run = _mac(mutate("Apple M4 Max", draw), mutate(str(128 * 2 ** 30), draw), mutate("16", draw),
               mutate("40", draw), mutate("0", draw))
    hw = outcome(lambda: lm.detect(run=run, platform="darwin"))
    if hw is not None:
        assert hw.gpu.unified and 0 < hw.gpu.hbm_gb <= hw.cpu.ram_gb and hw.cpu.cores >= 1 and hw.gpu.tflops > 0


# ---------------------------------------------------------------- an AMD GPU


ROCM_SMI = ('{"card1": {"Card series": "Radeon RX 7900 XTX", "Card model": "0x744c", "VRAM Total Memory (B)": '
            '"25753026560"}, "card0": {"Card series": "AMD Radeon RX 7900 XTX", "VRAM Total Memory (B)": "25753026560"},'
            ' "system": {"Driver version": "6.8"}}')


def _with_rocm(text, status=0):
    """``run``: no nvidia-smi, rocm-smi printing ``text`` with ``status``."""
    def run(args, **kwargs):
        if args[0] != "rocm-smi":
            raise FileNotFoundError(args[0])
        return subprocess.CompletedProcess(args, status, text, "")
    return run


def test_amd_gpus_are_read_from_rocm_smi():
    """Without nvidia-smi, rocm-smi's cards in their order, each its preset (bandwidth, FLOP/s, maker) with the memory
    rocm-smi counts, on a PCIe 4 x16 link assumed; an AMD GPU no preset describes asks for a file, and so does text
    rocm-smi did not write."""
    gpus, words = lm.detect_gpu(run=_with_rocm(ROCM_SMI), read=lambda path: None)  # sysfs silent
    assert [g for g, _ in gpus] == [replace(GPUS["rx7900xtx"], name=n, hbm_gb=23.98)
                                    for n in ("AMD Radeon RX 7900 XTX", "Radeon RX 7900 XTX")]
    assert all(link == LINKS["pcie4"] for _, link in gpus) and "(assumed)" in words
    with pytest.raises(MoesimError, match=r"AMD GPU 0 'Radeon Pro W7900' is not a preset"):
        lm.detect_gpu(run=_with_rocm(ROCM_SMI.replace("AMD Radeon RX 7900 XTX", "Radeon Pro W7900")))
    with pytest.raises(MoesimError, match=r"rocm-smi gave no GPU with a name and a memory"):
        lm.detect_gpu(run=_with_rocm('{"card0": {"Card series": "Radeon RX 7900 XTX"}}'))
    assert lm.detect_gpu(run=_with_rocm("", status=2))[0] == ()


def test_a_strix_halo_is_its_cpu_s_own_gpu():
    """rocm-smi's GPU on a Ryzen AI Max (its CPU named so in /proc/cpuinfo) is the chip's own: the radeon8060s preset,
    sharing the host's memory (no link), with the memory rocm-smi counts and FLOP/s in proportion to its compute units
    (the 8050S's 32 of the 8060S's 40); on another CPU an AMD GPU no preset describes still asks for a file."""
    igpu = '{"card0": {"Card series": "AMD Radeon Graphics", "VRAM Total Memory (B)": "103079215104"}}'  # 96 GiB
    gpus, words = lm.detect_gpu(run=_with_rocm(igpu), host_gb=31.0,
                                host_model="AMD RYZEN AI MAX+ 395 w/ Radeon 8060S (measured x)")
    (gpu, link), = gpus
    assert gpu == replace(GPUS["radeon8060s"], name="AMD Radeon Graphics", hbm_gb=96.0)
    assert gpu.unified and link.name == "unified" and "the GPU of the AMD RYZEN AI MAX+ 395" in words
    (smaller, _), = lm.detect_gpu(run=_with_rocm(igpu), host_model="AMD RYZEN AI MAX 390 w/ Radeon 8050S")[0]
    assert smaller.tflops == pytest.approx(GPUS["radeon8060s"].tflops * 32 / 40, rel=1e-3)
    with pytest.raises(MoesimError, match=r"AMD GPU 0 'AMD Radeon Graphics' is not a preset"):
        lm.detect_gpu(run=_with_rocm(igpu), host_model="AMD Ryzen 9 7950X 16-Core Processor")
    # a small carve-out (0.5 GiB of a 128 GiB machine): the GPU maps half of the host's memory through GTT
    small = igpu.replace("103079215104", str(2 ** 29))
    (gtt, _), = lm.detect_gpu(run=_with_rocm(small), host_gb=127.5, host_model="AMD RYZEN AI MAX+ 395 w/ Radeon 8060S")[0]
    assert gtt.hbm_gb == 63.75


def pci_tree(root, hops) -> None:
    """A sysfs in ``root``: a PCI path of ``hops`` (max_link_speed, current_link_width), from the root port down to
    the GPU, which DRM card 1's ``device`` links to."""
    here = root / "devices" / "pci0000:00"
    for i, (speed, width) in enumerate(hops):
        here = here / f"0000:0{i}:00.0"
        here.mkdir(parents=True)
        (here / "max_link_speed").write_text(f"{speed} GT/s PCIe\n")
        (here / "current_link_width").write_text(f"{width}\n")
    (here / "vendor").write_text("0x1002\n")
    (root / "drm" / "card1").mkdir(parents=True)
    (root / "drm" / "card1" / "device").symlink_to(here)
    (root / "drm" / "card0").mkdir()  # a display adapter that is not AMD's (simpledrm's), and card1's connector
    (root / "drm" / "card1-DP-1").mkdir()


def test_an_amd_gpus_link_is_the_least_sysfs_gives_along_its_pci_path(tmp_path, monkeypatch):
    """A Radeon behind the switch on its board, in a PCIe 4 slot of eight lanes: the GPU and the switch's downstream
    port read x16, the slot x8, so the link is PCIe 4 x8; on a PCIe 3 board (its root port at 8 GT/s, as older
    kernels write it), PCIe 3. rocm-smi's first GPU is sysfs's first AMD card (card1 here: card0 is another maker's);
    a second GPU sysfs does not list keeps PCIe 4 x16, said to be assumed."""
    pci_tree(tmp_path, [("16.0", 8), ("16.0", 8), ("16.0", 16), ("16.0", 16)])
    drm = str(tmp_path / "drm")
    assert lm.amd_cards(drm=drm) == [1] and lm.sysfs_pcie(1, drm=drm) == (4, 8) and lm.sysfs_pcie(0, drm=drm) == \
        (None, None)
    monkeypatch.setattr(lm, "SYSFS_DRM", drm)
    gpus, words = lm.detect_gpu(run=_with_rocm(ROCM_SMI))
    assert [link for _, link in gpus] == [lm.pcie_link(4, 8), LINKS["pcie4"]] and lm.pcie_link(4, 8).gbps == \
        LINKS["pcie4"].gbps / 2
    assert "GPU 0: AMD Radeon RX 7900 XTX (23.98 GiB, bandwidth and FLOP/s of its preset), link pcie4-x8 (read by " \
           "sysfs)" in words and words.endswith("link pcie4 (assumed)")
    slower = tmp_path / "pcie3"
    pci_tree(slower, [("8", 16), ("16.0", 16), ("16.0", 16)])
    assert lm.sysfs_pcie(1, drm=str(slower / "drm")) == (3, 16)


@FUZZ
@given(data=st.data())
def test_fuzz_rocm_smi(data):
    """rocm-smi's reader on mutated JSON, sysfs's on mutated link files: GPUs on a link PCIe gives, or one line."""
    gpus = outcome(lambda: lm.detect_gpu(run=_with_rocm(mutate(ROCM_SMI, data.draw)), read=lambda path: None))
    if gpus is not None:
        assert all(g.vendor == "amd" and g.hbm_gb > 0 for g, _ in gpus[0])
    drm = "/nonexistent/drm"  # realpath leaves it as it is: the files below are the whole sysfs
    files = {f"{drm}/card0/{hop}{name}": mutate(text, data.draw) for hop in ("device/", "")
             for name, text in (("max_link_speed", "16.0 GT/s PCIe"), ("current_link_width", "8"))}
    gen, width = lm.sysfs_pcie(0, files.get, drm)
    assert gen in (None, 1, 2, 3, 4, 5, 6) and (width is None or 1 <= width <= 32)
    assert 0 < lm.pcie_link(gen, width).gbps <= LINKS["pcie5"].gbps

