"""This machine, detected and measured: ``--hardware local`` ("what should I run on this box" in one command).

What is detected (Linux; nothing is downloaded and nothing leaves the machine):

- **CPU**, from /proc/cpuinfo (the model name from lscpu where cpuinfo has none, as on Arm): sockets (distinct
  ``physical id``; 1 where absent), physical cores per socket (distinct ``(physical id, core id)`` pairs per
  socket; the logical CPUs listed, or ``os.cpu_count()``, where there are no core ids), the instruction-set
  class (``isa``: amx, avx512, avx512-256 for AMD family 19h — Zen 4 runs AVX-512 on 256-bit pipes — neon,
  else avx2) and the RAM (/proc/meminfo ``MemTotal``).
- **Clock**, measured on x86 with every core busy (``measure_clock_ghz``): each thread runs a chain of
  ``x = x * x + i``, one 64-bit multiply (3 cycles' latency on every x86 core since Intel's Nehalem and AMD's
  Zen) and one add (1 cycle) per step, that no compiler can shorten (a quadratic recurrence has no closed
  form), so 4 cycles a step; steps per second x 4 is the clock the cores run at under load, boost included,
  which a VM's ``cpu MHz`` does not tell. A pass is timed by the threads' CPU time where they got less than the
  wall clock's (cores shared with another process), so a busy machine does not read as a slow one. Elsewhere
  (Arm, where a fused multiply-add's latency differs by core) cpufreq's ``cpuinfo_max_freq``, else cpuinfo's
  ``cpu MHz``, else 3 GHz.
- **DRAM bandwidth**, measured in a second or two (numba caches the compiled kernels): a streaming
  read (a sum, as STREAM's read kernels) of a float64 buffer of at least 4x the last-level cache of every
  socket and at least 512 MiB, capped at a quarter of ``MemAvailable``, on every core numba runs (the buffer is
  first written by the same threads in the same chunks, so a socket's pages sit in its own DRAM); one warm-up
  sweep, then the median of 3 timed passes. The CPU's ``dram_gbps`` is that rate per socket and its
  ``dram_eff`` 1.0: the rate is what a streaming read reached here, not a nominal figure.
- **GPU**: the GPUs ``nvidia-smi`` lists (without it, the AMD ones ``rocm-smi`` lists: presets only, on the PCIe link
  sysfs gives each card, ``sysfs_pcie``, or PCIe 4 x16 assumed, or a Ryzen AI Max's own GPU, ``strix_halo``). Its name is matched to a preset
  (``moesim.sim.presets.GPUS``),
  which gives its bandwidth and FLOP/s; its memory is what nvidia-smi counts. A GPU not among the presets is
  built from ``torch.cuda.get_device_properties`` (bandwidth from the memory clock and bus width, nominal, so
  ``mem_eff`` stays at its default; FLOP/s measured on a large bf16 GEMM, so ``flop_eff`` 1.0); without torch
  and CUDA a one-line error asks for a hardware file. The link is the PCIe generation and width nvidia-smi
  reads (``pcie.link.gen.max``, ``pcie.link.width.max``: PCIe 3/4/5, scaled below x16), PCIe 4 x16 where it
  cannot be read, NVLink-C2C for a GH200. Without nvidia-smi (or where it fails) the machine is CPU-only.

On a Mac (``detect_apple``): the chip, its cores, memory and GPU cores from ``sysctl`` and ``system_profiler``, the
bandwidth and FLOP/s from the chip's spec sheet (``APPLE_CHIPS``), the GPU's share from ``iogpu.wired_limit_mb``
or macOS's default; nothing is measured.

Limits: a GPU's bandwidth is the preset's or the memory clock's, never measured; on Arm the clock is cpufreq's
maximum (a boost clock: all cores under load run lower), or the current one a VM reports; the CPU's FLOP/s and unpacking
rates come from the ISA tables (``moesim.sim.cpu_rates``; ``moesim calibrate`` measures them); a second GPU is
not used. Every reader takes its text (``parse_cpuinfo``, ``parse_meminfo``, ``parse_nvidia_smi`` ...) and
``detect`` its file reader, command runner and bandwidth measure, so each can be tested on fixed inputs.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
from numba import get_num_threads, njit, prange, uint64

from moesim.errors import MoesimError, named
from moesim.host import MEMINFO, parse_meminfo, usable_cpus
from moesim.sim.cpu_rates import ISA_FAMILY
from moesim.sim.machine import CPU, GPU, Hardware, Link
from moesim.sim.presets import GPUS, LINKS, SYSTEMS, unified_link

CPUINFO = "/proc/cpuinfo"
MAX_FREQ = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"  # kHz
CACHE = "/sys/devices/system/cpu/cpu0/cache/index{}/{}"
NVIDIA_SMI = "nvidia-smi"
DEFAULT_GHZ = 3.0
MIN_BUFFER = 512 << 20      # bytes the DRAM read streams at least
LLC_MULTIPLE = 4            # ... and at least this many times the last-level cache
PASSES = 3                  # timed passes; the median is the rate
MIN_PASS_S = 0.02           # a timed pass repeats the sweep until it lasts this long
COMMAND_TIMEOUT_S = 10
TEMPLATE_HINT = "describe it in a hardware file (moesim hardware --template) and pass --hardware that.toml"
# the names nvidia-smi gives data-centre GPUs (normalised as ``gpu_key``) that are not a preset's own name
GPU_ALIASES = {
    "h10080gbhbm3": "h100",         # H100 SXM5 80 GB (the preset); "H100 PCIe" and "H100 NVL" differ
    "a100-sxm4-40gb": "a100-40g",
    "a100-pcie-40gb": "a100-40g",   # the same 1555 GB/s and 312 TFLOP/s
    "rtxa6000": "a6000",
    "gh200480gb": "gh200",          # GH200 with 96 GB HBM3 (and 480 GB LPDDR5X)
}


def read_text(path: str) -> str | None:
    """A file's text, or None where it cannot be read."""
    try:
        return Path(path).read_text(errors="replace")
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- CPU


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says (``parse_cpuinfo``)."""

    model: str              # "" where it names none (Arm: lscpu has it)
    vendor: str
    family: int | None
    flags: frozenset
    sockets: int
    cores: int              # physical cores per socket; 0: cpuinfo does not say
    processors: int         # logical CPUs listed
    mhz: float | None       # the first CPU's current clock

    @property
    def isa(self) -> str:
        return isa_of(self.flags, self.vendor, self.family)


KNOWN_KEYS = {"processor", "vendor_id", "cpu family", "model name", "physical id", "core id", "cpu MHz", "flags",
              "Features", "CPU implementer"}


def isa_of(flags, vendor: str = "", family: int | None = None) -> str:
    """The widest vector or matrix extension ``flags`` list: amx, avx512 (avx512-256 on AMD family 19h: Zen 4
    runs AVX-512 on 256-bit pipes), neon, else avx2."""
    if "amx_bf16" in flags:
        return "amx"
    if "avx512f" in flags:
        return "avx512-256" if vendor == "AuthenticAMD" and family == 0x19 else "avx512"
    if "asimd" in flags:
        return "neon"
    return "avx2"


def _int(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        try:
            return int(text, 10)
        except ValueError:
            return None


def _positive(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _sig(value: float) -> float:
    """``value`` to 4 significant digits (never 0 where it is positive)."""
    return float(f"{value:.4g}")


def _clean(text: str) -> str:
    return " ".join("".join(ch for ch in text if ch.isprintable()).split())[:120]


def parse_cpuinfo(text: str) -> CpuInfo:
    """/proc/cpuinfo's text read; a MoesimError where it has no processor entry at all."""
    blocks: list[dict] = []
    block: dict = {}
    for line in text.splitlines():
        if not line.strip():
            if block:
                blocks.append(block)
            block = {}
            continue
        if ":" not in line:
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        if key == "processor" and "processor" in block:  # no blank line between two CPUs
            blocks.append(block)
            block = {}
        block.setdefault(key, value)
    if block:
        blocks.append(block)
    if not any(KNOWN_KEYS & set(b) for b in blocks):
        raise MoesimError("/proc/cpuinfo lists no processor (no 'processor', 'model name' or 'flags' line)")

    def first(key: str) -> str:
        return next((b[key] for b in blocks if key in b), "")

    flags = frozenset((first("flags") or first("Features")).split())
    sockets = max(1, len({b["physical id"] for b in blocks if "physical id" in b}))
    pairs = {(b.get("physical id", ""), b["core id"]) for b in blocks if "core id" in b}
    processors = sum("processor" in b for b in blocks)
    cores = max(1, len(pairs) // sockets) if pairs else (max(1, processors // sockets) if processors else 0)
    return CpuInfo(_clean(first("model name")), _clean(first("vendor_id")), _int(first("cpu family")), flags,
                   sockets, cores, processors, _positive(first("cpu MHz")))


def isa(text: str | None = None) -> str:
    """The ISA class of this CPU (``isa_of``) from /proc/cpuinfo's text (read when None); avx2 when it cannot
    be read."""
    text = read_text(CPUINFO) if text is None else text
    try:
        return parse_cpuinfo(text or "").isa
    except MoesimError:
        return "avx2"


def physical_cores(text: str | None = None) -> int:
    """Physical cores of every socket, from /proc/cpuinfo's text (read when None), at most the CPUs this process may
    run on; those where it does not say."""
    text = read_text(CPUINFO) if text is None else text
    usable = usable_cpus()
    try:
        info = parse_cpuinfo(text or "")
    except MoesimError:
        return usable
    # at most the CPUs this process may run on (taskset, a container's cpuset)
    return min(info.cores * info.sockets, usable) if info.cores else usable


def thread_counts(cores: int | None = None) -> list[int]:
    """1, 2, 4, ... up to every core, and every core (default: this machine's physical cores, every socket's)."""
    cores = physical_cores() if cores is None else cores
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    return counts + [cores]


def cpuinfo_ghz(text: str | None = None) -> float | None:
    """The first CPU's ``cpu MHz`` in /proc/cpuinfo's text (read when None), GHz; None where absent."""
    text = read_text(CPUINFO) if text is None else text
    try:
        mhz = parse_cpuinfo(text or "").mhz
    except MoesimError:
        return None
    return mhz / 1e3 if mhz else None


def clock_ghz(info: CpuInfo | None, max_freq_khz: str | None) -> float:
    """The all-core clock: cpufreq's maximum (kHz text), else cpuinfo's ``cpu MHz``, else ``DEFAULT_GHZ``; a
    figure outside 0.1-10 GHz is not taken."""
    khz = _positive((max_freq_khz or "").strip())
    for ghz in (khz / 1e6 if khz else None, info.mhz / 1e3 if info is not None and info.mhz else None):
        if ghz is not None and 0.1 <= ghz <= 10:
            return round(ghz, 3)
    return DEFAULT_GHZ


def parse_lscpu(text: str) -> dict:
    """lscpu's ``Key: value`` lines as a mapping."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out.setdefault(key.strip(), _clean(value))
    return out


def parse_size(text: str) -> int | None:
    """A cache size as sysfs writes it ("32768K", "1M", "512"), in bytes."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    number = (text[:-1] if scale > 1 else text).strip()
    return int(number) * scale if number.isdigit() and number.isascii() else None


def parse_cpulist(text: str) -> int:
    """How many CPUs a list such as "0-7,96-103" names (0 where it cannot be read)."""
    count = 0
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        a, b = _int(lo.strip()), _int((hi or lo).strip())
        if a is None or b is None or b < a or a < 0:
            return 0
        count += b - a + 1
    return count


def llc_bytes(read: Callable[[str], str | None], logical: int) -> int:
    """The last-level cache of the whole machine: cpu0's largest data or unified cache (sysfs) times the
    caches of its kind (``logical`` CPUs over the CPUs sharing one); 0 where sysfs does not say."""
    best = (0, 0, 0)  # level, bytes, CPUs sharing it
    for index in range(16):
        level = read(CACHE.format(index, "level"))
        if level is None:
            break
        if (read(CACHE.format(index, "type")) or "").strip() == "Instruction":
            continue
        size = parse_size(read(CACHE.format(index, "size")) or "")
        lvl = _int(level.strip())
        if size and lvl is not None and lvl >= best[0]:
            best = (lvl, size, parse_cpulist(read(CACHE.format(index, "shared_cpu_list")) or ""))
    _, size, sharing = best
    return size * (max(1, math.ceil(logical / sharing)) if sharing and logical else 1)


def buffer_bytes(llc: int, available: int | None) -> int:
    """The DRAM read's buffer: at least ``LLC_MULTIPLE`` x the last-level cache and ``MIN_BUFFER``, at most a
    quarter of the memory available (never under 1 MiB)."""
    want = max(LLC_MULTIPLE * llc, MIN_BUFFER)
    if available:
        want = min(want, available // 4)
    return max(want, 1 << 20) // 8 * 8


# ---------------------------------------------------------------- DRAM bandwidth


# Both kernels index with an unsigned integer: a signed index may be negative (numba wraps it around), which
# makes LLVM gather the elements one by one, and the read 4-5x slower than the DRAM; fastmath lets the sum be
# reordered into vector adds, so that the read, not the chain of adds, limits it.


@njit(parallel=True, cache=True)
def _fill(buf, chunks):
    """Write ones, each chunk by the thread that will read it (its pages land in that thread's socket)."""
    n = buf.size
    step = (n + chunks - 1) // chunks
    for c in prange(chunks):
        for i in range(c * step, min(n, (c + 1) * step)):
            buf[uint64(i)] = 1.0


@njit(parallel=True, cache=True, fastmath=True)
def _stream_sum(buf, chunks):
    """Sum the buffer, a chunk per thread."""
    n = buf.size
    step = (n + chunks - 1) // chunks
    partial = np.zeros(chunks)
    for c in prange(chunks):
        s = 0.0
        for i in range(c * step, min(n, (c + 1) * step)):
            s += buf[uint64(i)]
        partial[c] = s
    return partial.sum()


def measure_dram_gbps(nbytes: int = MIN_BUFFER, passes: int = PASSES) -> float:
    """GB/s a streaming read of a ``nbytes`` float64 buffer reaches on every thread numba runs: one warm-up
    sweep, then the median of ``passes`` timed passes (each repeats the sweep until it lasts ``MIN_PASS_S``)."""
    n = max(int(nbytes) // 8, 1024)
    chunks = max(1, get_num_threads())
    buf = np.empty(n)
    _fill(buf, chunks)
    if _stream_sum(buf, chunks) != n:  # the warm-up, and a check that every element was read
        raise MoesimError("the DRAM bandwidth read summed the wrong total")
    start = time.perf_counter()
    _stream_sum(buf, chunks)
    reps = min(64, max(1, math.ceil(MIN_PASS_S / max(time.perf_counter() - start, 1e-9))))
    samples = []
    for _ in range(passes):
        start = time.perf_counter()
        for _ in range(reps):
            _stream_sum(buf, chunks)
        samples.append(time.perf_counter() - start)
    return n * 8 * reps / max(statistics.median(samples), 1e-12) / 1e9


# ---------------------------------------------------------------- clock


CHAIN_CYCLES = 4             # cycles of one step of ``_chains`` on x86: imul (3) then add (1), dependent
CHAIN_STEPS = 20_000_000     # steps per thread: ~6 ms at 3.5 GHz


@njit(cache=True, parallel=True)
def _chains(steps, lanes):
    """``lanes`` dependent chains of ``steps`` multiply-adds, one per thread."""
    out = np.empty(lanes, np.uint64)
    for lane in prange(lanes):
        x = uint64(lane + 3)
        for i in range(steps):
            x = x * x + uint64(i)
        out[lane] = x
    return out


def measure_clock_ghz(isa_name: str, steps: int = CHAIN_STEPS, passes: int = PASSES) -> float | None:
    """The clock (GHz) every core runs at under load, from ``_chains`` on all threads: the median of ``passes``, each
    timed by the wall clock or, where the threads got less than all of it (a core shared with another process: a
    second test worker, a busy VM host), by their CPU time; None off x86 (the chain's cycles are x86's)."""
    if ISA_FAMILY.get(isa_name) != "x86":
        return None
    lanes = max(1, get_num_threads())
    _chains(1000, lanes)  # compiled (or loaded from numba's cache) before timing
    samples = []
    for _ in range(passes):
        start, cpu = time.perf_counter(), time.process_time()
        _chains(steps, lanes)
        samples.append(min(time.perf_counter() - start, (time.process_time() - cpu) / lanes))
    return CHAIN_CYCLES * steps / max(statistics.median(samples), 1e-12) / 1e9


# ---------------------------------------------------------------- GPU


def gpu_key(name: str) -> str:
    """A GPU's name as the presets are keyed: lower case, without spaces and the makers' and brands' words."""
    key = name.lower()
    for word in ("nvidia", "geforce", "amd", "radeon"):
        key = key.replace(word, "")
    return "".join(key.split())


def match_gpu(name: str) -> str | None:
    """The preset (a key of ``GPUS``) a GPU named as nvidia-smi names it is; None where none is."""
    key = gpu_key(name)
    key = GPU_ALIASES.get(key, key)
    return key if key in GPUS else None


def parse_nvidia_smi(text: str) -> tuple[tuple[str, float | None], ...]:
    """``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits``: each GPU's name and memory in MiB
    (None where it says "[N/A]": a GPU that shares the host's memory, as a DGX Spark's), in nvidia-smi's order; a
    MoesimError where a line is not that."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise MoesimError("nvidia-smi listed no GPU")
    out = []
    for line in lines:
        name, sep, mib = line.rpartition(",")
        name, memory = _clean(name), _positive(mib.strip())
        if not sep or not name or (memory is None and mib.strip() != "[N/A]"):
            raise MoesimError(f"nvidia-smi gave {_clean(line)[:80]!r}, not 'name, memory MiB'; {TEMPLATE_HINT}")
        out.append((name, memory))
    return tuple(out)


def parse_pcie(text: str, index: int = 0) -> tuple[int | None, int | None]:
    """``nvidia-smi --query-gpu=pcie.link.gen.max,pcie.link.width.max``'s line ``index`` (a GPU's): generation and
    lanes (None where not given, as "[N/A]", or where there is no such line)."""
    lines = [line for line in text.splitlines() if line.strip()]
    line = lines[index] if index < len(lines) else ""
    parts = [_int(p.strip()) for p in line.split(",")] + [None, None]
    gen, width = parts[0], parts[1]
    return (gen if gen is not None and 1 <= gen <= 16 else None, width if width is not None and 1 <= width <= 32 else None)


def pcie_link(gen: int | None, width: int | None) -> Link:
    """The link preset of PCIe ``gen`` (3, 4, 5; PCIe 4 otherwise), its bandwidth scaled by ``width`` below x16."""
    if gen not in (3, 4, 5):
        return LINKS["pcie4"]
    link = LINKS[f"pcie{gen}"]
    if width is not None and width < 16:  # a preset's width (x8, x4), else the same share of the lanes
        link = LINKS.get(f"{link.name}-x{width}") or replace(link, name=f"{link.name}-x{width}",
                                                              gbps=link.gbps * width / 16)
    return link


def memory_gbps(name: str, props) -> float:
    """A GPU's nominal memory bandwidth from torch's device properties: 2 (double data rate) x memory clock (kHz)
    x bus width (bits) / 8; a MoesimError where they do not say."""
    clock, bus = getattr(props, "memory_clock_rate", None), getattr(props, "memory_bus_width", None)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
               for v in (clock, bus)):
        raise MoesimError(f"GPU '{name}' is not a preset and its memory bandwidth cannot be read; {TEMPLATE_HINT}")
    return 2 * clock * 1e3 * bus / 8 / 1e9


def gpu_from_properties(name: str, hbm_gb: float, props, tflops: float) -> GPU:
    """A GPU not among the presets: bandwidth from its properties (``memory_gbps``, nominal: ``mem_eff`` stays),
    ``tflops`` measured (so ``flop_eff`` 1.0)."""
    gbps = memory_gbps(name, props)
    if not (isinstance(tflops, (int, float)) and math.isfinite(tflops) and tflops > 0):
        raise MoesimError(f"GPU '{name}': its FLOP/s could not be measured; {TEMPLATE_HINT}")
    return GPU(f"{name} (measured {tflops:.0f} TFLOP/s)", _sig(gbps), _sig(tflops), hbm_gb, flop_eff=1.0)


def _gemm_tflops(torch, n: int = 4096, passes: int = PASSES) -> float:
    """TFLOP/s of an n x n bf16 GEMM (fp16 without bf16) on CUDA device 0: the median of ``passes``."""
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    a = torch.full((n, n), 0.5, device="cuda", dtype=dtype)
    b = torch.full((n, n), 0.25, device="cuda", dtype=dtype)
    reps, samples = 10, []
    a @ b
    torch.cuda.synchronize()
    for _ in range(passes):
        start = time.perf_counter()
        for _ in range(reps):
            a @ b
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return 2 * n ** 3 * reps / statistics.median(samples) / 1e12


def torch_gpu(name: str, hbm_gb: float) -> GPU:
    """A GPU not among the presets, from torch: its properties and a measured GEMM; a MoesimError without
    torch and CUDA."""
    try:
        import torch
    except (ImportError, OSError):  # not installed, or its CUDA libraries do not load
        torch = None
    if torch is None or not torch.cuda.is_available():
        raise MoesimError(f"GPU '{name}' is not a preset and torch with CUDA is not installed to read it; "
                          f"{TEMPLATE_HINT}")
    props = torch.cuda.get_device_properties(0)
    if props.name != name:  # CUDA's device 0 is not nvidia-smi's first GPU: describe the one measured
        name, hbm_gb = props.name, _sig(props.total_memory / 2 ** 30)
    memory_gbps(name, props)  # refuse before measuring where the bandwidth cannot be read
    return gpu_from_properties(name, hbm_gb, props, _gemm_tflops(torch))


def _output(run, args: list) -> str | None:
    """A command's standard output; None where it is not installed, fails or hangs."""
    try:
        done = run(args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                   env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout if done.returncode == 0 and isinstance(done.stdout, str) else None


ROCM_SMI = "rocm-smi"


def parse_rocm_smi(text: str) -> tuple[tuple[int, str, float], ...]:
    """``rocm-smi --showproductname --showmeminfo vram --json``: each AMD GPU's card key's number ("card1"), name
    ("Card series") and memory in GiB ("VRAM Total Memory (B)"), in its cards' order; a MoesimError where the text is
    not that."""
    try:
        cards = json.loads(text)
        listed = sorted(((int(card.removeprefix("card")), fields) for card, fields in cards.items()
                         if card.startswith("card")), key=lambda pair: pair[0])
        out = tuple((card, _clean(str(fields["Card series"])), int(fields["VRAM Total Memory (B)"]) / 2 ** 30)
                    for card, fields in listed)
    except (ValueError, TypeError, KeyError, AttributeError):
        out = ()
    if not out or any(not name or not gib > 0 for _, name, gib in out):
        raise MoesimError(f"{ROCM_SMI} gave no GPU with a name and a memory ({_clean(text)[:60]!r}); {TEMPLATE_HINT}")
    return out


# Strix Halo: a Ryzen AI Max's integrated GPU by the name its CPU carries -> its compute units (AMD's specifications:
# the Radeon 8060S of the Max+ 395 has 40, the 8050S of the Max 390 and 385 32, the 8040S of the Max 380 16); the
# memory bus, 256-bit LPDDR5X-8000, is every one's (the radeon8060s preset's)
STRIX_HALO_CUS = {"8060s": 40, "8050s": 32, "8040s": 16}


def strix_halo(host_model: str) -> GPU | None:
    """The integrated GPU of a Ryzen AI Max (Strix Halo) whose CPU is named ``host_model`` (``/proc/cpuinfo``'s "AMD
    RYZEN AI MAX+ 395 w/ Radeon 8060S"): the radeon8060s preset at its compute units' share of the FLOP/s; None for
    any other CPU."""
    words = host_model.lower()
    cus = next((n for gpu, n in STRIX_HALO_CUS.items() if gpu in words), None)
    if "ryzen ai max" not in words or cus is None:
        return None
    preset = GPUS["radeon8060s"]
    return replace(preset, tflops=_sig(preset.tflops * cus / STRIX_HALO_CUS["8060s"]))


SYSFS_DRM = "/sys/class/drm"
AMD_VENDOR = "0x1002"
GTS_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}  # a lane's GT/s -> the PCIe generation


def amd_cards(read: Callable[[str], str | None] = read_text, drm: str | None = None) -> list[int]:
    """The DRM card numbers of the AMD GPUs sysfs lists, in order: the i-th is the GPU rocm-smi lists i-th (it counts
    AMD's cards in DRM's order, whether it names them by card number or by its own index)."""
    drm = drm or SYSFS_DRM
    try:
        names = os.listdir(drm)
    except OSError:
        return []
    cards = sorted(int(n[4:]) for n in names if n.startswith("card") and n[4:].isdigit())
    return [n for n in cards if (read(os.path.join(drm, f"card{n}", "device", "vendor")) or "").strip() == AMD_VENDOR]


def _gen(speed: str | None) -> int | None:
    """``max_link_speed``'s generation ("16.0 GT/s PCIe", "8 GT/s"); None where it is not a known speed."""
    try:
        return GTS_GEN.get(float((speed or "").split()[0]))
    except (ValueError, IndexError):
        return None


def sysfs_pcie(card: int, read: Callable[[str], str | None] = read_text,
               drm: str | None = None) -> tuple[int | None, int | None]:
    """The PCIe generation and lanes by which DRM card ``card``'s GPU reaches the CPU, as sysfs says: along the PCI
    path from the GPU to its root port, the least generation of what each hop can run (``max_link_speed``, "16.0
    GT/s PCIe") and the least of the lanes negotiated (``current_link_width``; a GPU that narrows its link when idle
    reads narrower). Every hop counts: a Radeon's own link to the switch on its board reads x16 in any slot. None
    for what no hop says."""
    here = os.path.realpath(os.path.join(drm or SYSFS_DRM, f"card{card}", "device"))
    gens, widths = [], []
    while here != os.path.dirname(here) and (speed := read(os.path.join(here, "max_link_speed"))) is not None:
        gens.append(_gen(speed))
        widths.append(_int((read(os.path.join(here, "current_link_width")) or "").strip()))
        here = os.path.dirname(here)
    gens, widths = [g for g in gens if g is not None], [w for w in widths if w is not None and 1 <= w <= 32]
    return min(gens, default=None), min(widths, default=None)


def detect_amd(run=subprocess.run, host_model: str = "", host_gb: float = 0.0,
               read: Callable[[str], str | None] = read_text) -> tuple[tuple, str]:
    """Every AMD GPU ``rocm-smi`` lists, each a preset's (its name matched as nvidia-smi's are) on the PCIe link sysfs
    gives its card (``amd_cards``, ``sysfs_pcie``; PCIe 4 x16 assumed where it does not), or on a Ryzen AI Max (``host_model``, the
    CPU's name) the chip's own
    GPU (``strix_halo``), which shares the host's memory: the memory carved out for it as rocm-smi counts it, or where
    that is below half of the rest (``host_gb``; a small carve-out) half of it, which amdgpu maps to it by default
    (GTT); ((), why) where rocm-smi is absent, fails or lists none. A GPU not among the presets is refused (a hardware
    file describes it)."""
    out = _output(run, [ROCM_SMI, "--showproductname", "--showmeminfo", "vram", "--json"])
    if out is None or not out.strip():
        return (), "no GPU (nvidia-smi and rocm-smi absent, failing or listing none)"
    gpus, words, own, cards = [], [], strix_halo(host_model), amd_cards(read)
    for index, (_, name, gib) in enumerate(parse_rocm_smi(out)):
        key = match_gpu(name)
        if key is not None and GPUS[key].vendor == "amd":
            gpu, how = replace(GPUS[key], name=name, hbm_gb=_sig(gib)), "bandwidth and FLOP/s of its preset"
        elif own is not None and index == 0:
            gtt = gib < host_gb / 2
            gpu = replace(own, name=name, hbm_gb=_sig(host_gb / 2 if gtt else gib))
            how = (f"the GPU of the {host_model}, preset radeon8060s"
                   + (f"; {gib:g} GiB carved out, so the half of the host's memory amdgpu maps to it (GTT)" if gtt
                      else ""))
        else:
            raise MoesimError(f"AMD GPU {index} '{name}' is not a preset (moesim hardware); {TEMPLATE_HINT}")
        gen, width = sysfs_pcie(cards[index], read) if not gpu.unified and index < len(cards) else (None, None)
        link = unified_link(gpu) if gpu.unified else pcie_link(gen, width)
        gpus.append((gpu, link))
        read_by = ("" if gpu.unified else " (assumed)" if gen not in (3, 4, 5) else
                   " (read by sysfs)" if width else " (its generation read by sysfs, x16 assumed)")
        words.append(f"GPU {index}: {gpu.name} ({gpu.hbm_gb:g} GiB, {how}), link {link.name}{read_by}")
    return tuple(gpus), "; ".join(words)


def detect_gpu(run=subprocess.run, unknown_gpu: Callable[[str, float], GPU] = torch_gpu, host_gb: float = 0.0,
               host_model: str = "", read: Callable[[str], str | None] = read_text) -> tuple[tuple, str]:
    """Every GPU nvidia-smi lists with its link, (GPU, Link) pairs in its order, and a line on where they came from;
    without nvidia-smi (absent, failing or listing none) the AMD GPUs rocm-smi lists (``detect_amd``; ``host_model``:
    the CPU's name, which tells a Ryzen AI Max's own GPU). A GPU not among the presets is read by
    ``unknown_gpu`` where it is the first (or named as the first); another is refused (a hardware file describes
    it). A preset's GPU that shares the host's memory maps what nvidia-smi says, else the host's ``host_gb``, and
    takes no link (``unified_link``)."""
    out = _output(run, [NVIDIA_SMI, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"])
    if out is None or not out.strip():
        return detect_amd(run, host_model, host_gb, read)
    listed = parse_nvidia_smi(out)
    pcie = _output(run, [NVIDIA_SMI, "--query-gpu=pcie.link.gen.max,pcie.link.width.max",
                         "--format=csv,noheader,nounits"]) or ""
    gpus, words = [], []
    for index, (name, mib) in enumerate(listed):
        key = match_gpu(name)
        if mib is None and not (key is not None and GPUS[key].unified and host_gb):
            raise MoesimError(f"nvidia-smi gave no memory for GPU {index} '{name}'; {TEMPLATE_HINT}")
        hbm_gb = _sig(mib / 1024) if mib is not None else host_gb
        if key is not None:
            gpu, how = replace(GPUS[key], name=name, hbm_gb=hbm_gb), f"bandwidth and FLOP/s of preset {key}"
        elif index == 0:
            gpu, how = unknown_gpu(name, hbm_gb), "bandwidth from its memory clock, FLOP/s measured"
        elif name == listed[0][0]:  # the first's kind, read once
            gpu, how = replace(gpus[0][0], hbm_gb=hbm_gb), "as GPU 0"
        else:
            raise MoesimError(f"GPU {index} '{name}' is not a preset, and only the first GPU is read by torch; "
                              f"{TEMPLATE_HINT}")
        if gpu.unified:
            link, link_how = unified_link(gpu), "none: it shares the host's memory"
        elif key is not None and key in SYSTEMS and SYSTEMS[key][1] == "nvlink-c2c":
            link, link_how = LINKS["nvlink-c2c"], "its preset's"
        else:
            gen, width = parse_pcie(pcie, index)
            link = pcie_link(gen, width)
            link_how = "read by nvidia-smi" if gen in (3, 4, 5) else "assumed, nvidia-smi did not say"
        gpus.append((gpu, link))
        words.append(f"{gpu.name} ({gpu.hbm_gb:g} GiB, {how}), link {link.name} ({link_how})")
    return tuple(gpus), "; ".join(f"GPU {i}: {w}" if len(words) > 1 else w for i, w in enumerate(words))


# ---------------------------------------------------------------- the machine


def detect_cpu(measure: Callable[[int], float] = measure_dram_gbps, run=subprocess.run,
               read: Callable[[str], str | None] = read_text,
               clock: Callable[[str], float | None] = measure_clock_ghz) -> tuple[CPU, str]:
    """This machine's CPU and RAM from /proc, its DRAM bandwidth measured (``measure(buffer bytes)`` in GB/s) and
    its clock (``clock(isa)`` in GHz, None: not measurable here); and a line that says so."""
    text = read(CPUINFO)
    if text is None:
        raise MoesimError(f"cannot read {CPUINFO}: {named('hardware', 'local')} reads Linux's /proc; {TEMPLATE_HINT}")
    info = parse_cpuinfo(text)
    model = info.model or parse_lscpu(_output(run, ["lscpu"]) or "").get("Model name", "") or f"{info.isa} CPU"
    cores = info.cores or max(1, (os.cpu_count() or 1) // info.sockets)
    meminfo_text = read(MEMINFO)
    if meminfo_text is not None:
        mem = parse_meminfo(meminfo_text)
        total, available = mem["MemTotal"], mem.get("MemAvailable", mem.get("MemFree"))
    else:
        total, available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), None
    nbytes = buffer_bytes(llc_bytes(read, info.processors or os.cpu_count() or 1), available)
    measured = measure(nbytes)
    if not (isinstance(measured, (int, float)) and math.isfinite(measured) and measured > 0):
        raise MoesimError(f"the DRAM bandwidth could not be measured (got {measured!r}); {TEMPLATE_HINT}")
    per_socket = measured / info.sockets
    rate = f"{measured:.1f} GB/s" if info.sockets == 1 else f"{per_socket:.1f} GB/s per socket"
    measured_ghz = clock(info.isa)
    measured_ghz = measured_ghz if isinstance(measured_ghz, (int, float)) and 0.1 <= measured_ghz <= 10 else None
    ghz = round(measured_ghz, 3) if measured_ghz else clock_ghz(info, read(MAX_FREQ))
    ram_gb = _sig(total / 2 ** 30)
    cpu = CPU(f"{model} (measured {rate})", cores, ghz, info.isa, _sig(per_socket), ram_gb,
              sockets=info.sockets, dram_eff=1.0)
    sockets = f"{info.sockets} x " if info.sockets > 1 else ""
    cpu_line = (f"{sockets}{model} ({cores} cores{' per socket' if sockets else ''}, {info.isa}, {ghz:g} GHz"
                f"{' measured under load' if measured_ghz else ''}, "
                f"{ram_gb:g} GiB), DRAM read {measured:.1f} GB/s measured over {nbytes / 2 ** 20:.0f} MiB")
    return cpu, cpu_line


# ---------------------------------------------------------------- an Apple chip

# the Apple chips whose figures a source gives: chip -> (GPU cores of the figure, FP32 TFLOP/s at those cores, {GPU
# cores: memory GB/s}; None: every bin's). Bandwidths: the presets' (docs/hardware.md, "Unified memory"), the M1 Max's
# and M2 Max's 400 (llama.cpp issue #27525, PR #2188), the M1 Ultra's 800 (applegpuinfo issue #1), the M4 Pro's 273
# (techmoran.com, Apple's announcement), the M1 Pro's and M2 Pro's 200 and the M2's 100 (Apple's announcements, as
# 9to5mac.com and macrumors.com report them), the M3's, M3 Pro's and M3 Max's 100, 150 and 300 or 400 (Apple's tech
# specs, support.apple.com/117737 and notebookcheck.net), the M4's 120 (support.apple.com/121555); the M1's 68.25
# [computed] from its LPDDR4X-4266 on 128 bits (Apple gives none). FLOP/s: Hugging Face's hardware table (its PR #1044
# for the M4s); the M1's 2.6 (Apple's); the others [computed] as cores x 128 FP32 lanes x 2 x the GPU clock
# philipturner/metal-benchmarks and applegpuinfo give (M1 Pro 1.296 GHz, M2 and M2 Pro 1.398, M3s 1.38, the M4's
# 1.578 measured on an M4 Pro: Eclectic Light)
APPLE_CHIPS = {
    "Apple M1": (8, 2.6, {None: 68.25}), "Apple M1 Pro": (16, 5.31, {None: 200.0}),
    "Apple M1 Max": (32, 10.4, {None: 400.0}), "Apple M1 Ultra": (64, 21.0, {None: 800.0}),
    "Apple M2": (10, 3.58, {None: 100.0}), "Apple M2 Pro": (19, 6.8, {None: 200.0}),
    "Apple M2 Max": (38, 13.5, {None: 400.0}), "Apple M2 Ultra": (60, 21.47, {None: 800.0}),
    "Apple M3": (10, 3.53, {None: 100.0}), "Apple M3 Pro": (18, 6.36, {None: 150.0}),
    "Apple M3 Max": (40, 14.13, {30: 300.0, 40: 400.0}), "Apple M3 Ultra": (80, 28.4, {None: 819.0}),
    "Apple M4": (10, 4.04, {None: 120.0}), "Apple M4 Pro": (20, 9.2, {None: 273.0}),
    "Apple M4 Max": (40, 18.4, {32: 410.0, 40: 546.0}),
}
APPLE_DEFAULT_SHARE = ((36, 2 / 3), (math.inf, 3 / 4))  # macOS's default GPU share of the memory: up to 36 GB, above
APPLE_GHZ = 3.5  # the performance cores' clock, assumed (as the m2-ultra preset): no Apple table gives an all-core one


def _sysctl(run, key: str) -> str | None:
    out = _output(run, ["sysctl", "-n", key])
    return out.strip() if out is not None and out.strip() else None


def detect_apple(run=subprocess.run) -> Hardware:
    """An Apple silicon Mac (``sysctl``, ``system_profiler``): the chip (``machdep.cpu.brand_string``) and its GPU's
    cores (``SPDisplaysDataType``'s ``sppci_cores``) give the memory's bandwidth and the GPU's FLOP/s (``APPLE_CHIPS``,
    FLOP/s in proportion to the cores; Apple's GPUs run fp16 at the fp32 rate); ``hw.memsize`` the memory, of which the
    GPU maps ``iogpu.wired_limit_mb`` where it is set, else macOS's default share (``APPLE_DEFAULT_SHARE``);
    ``hw.physicalcpu`` the CPU's cores, which read the same memory. A chip not in the table is one line asking for a
    hardware file."""
    chip = _sysctl(run, "machdep.cpu.brand_string")
    memsize = _positive(_sysctl(run, "hw.memsize") or "")
    cores = _int(_sysctl(run, "hw.physicalcpu") or "")
    if chip is None or memsize is None or cores is None or cores <= 0:
        raise MoesimError(f"sysctl gave no chip, memory or core count; {TEMPLATE_HINT}")
    if chip not in APPLE_CHIPS:
        raise MoesimError(f"{chip}: no bandwidth moesim has a source for ({', '.join(APPLE_CHIPS)}); {TEMPLATE_HINT}")
    listed = _output(run, ["system_profiler", "SPDisplaysDataType", "-json"])
    try:
        gpu_cores = int(json.loads(listed)["SPDisplaysDataType"][0]["sppci_cores"])
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        gpu_cores = None
    table_cores, tflops, bandwidth = APPLE_CHIPS[chip]
    gbps = bandwidth.get(gpu_cores, bandwidth.get(None))
    if gbps is None or not gpu_cores or gpu_cores <= 0:
        raise MoesimError(f"{chip}: system_profiler gave no GPU core count moesim has a bandwidth for "
                          f"({', '.join(map(str, bandwidth))} cores); {TEMPLATE_HINT}")
    ram_gb = _sig(memsize / 2 ** 30)
    wired = _positive(_sysctl(run, "iogpu.wired_limit_mb") or "")
    share = next(f for most, f in APPLE_DEFAULT_SHARE if ram_gb <= most)
    hbm_gb = _sig(wired / 1024) if wired else _sig(ram_gb * share)
    gpu = GPU(f"{chip} ({gpu_cores}-core GPU)", gbps, _sig(tflops * gpu_cores / table_cores), min(hbm_gb, ram_gb),
              unified=True, vendor="apple")
    cpu = CPU(chip, cores, APPLE_GHZ, "neon", gbps, ram_gb)
    limit = f"iogpu.wired_limit_mb {wired:g}" if wired else f"macOS's default {share:.0%}"
    return Hardware("local", gpu, unified_link(gpu), cpu=cpu,
                    source=f"local: detected {chip} ({cores} cores, {gpu_cores}-core GPU, {ram_gb:g} GiB, "
                           f"{gbps:g} GB/s by its spec sheet; the GPU maps {gpu.hbm_gb:g} GiB: {limit})")


def detect(measure: Callable[[int], float] = measure_dram_gbps, run=subprocess.run,
           read: Callable[[str], str | None] = read_text,
           unknown_gpu: Callable[[str, float], GPU] = torch_gpu,
           clock: Callable[[str], float | None] = measure_clock_ghz, platform: str = sys.platform) -> Hardware:
    """This machine: on a Mac its chip (``detect_apple``); elsewhere its CPU (``detect_cpu``), its GPUs and their links
    from nvidia-smi (``run``; a GPU not among the presets: ``unknown_gpu``)."""
    if platform == "darwin":
        return detect_apple(run)
    cpu, cpu_line = detect_cpu(measure, run, read, clock)
    gpus, gpu_line = detect_gpu(run, unknown_gpu, cpu.ram_gb, cpu.name, read)
    gpu, link = gpus[0] if gpus else (None, None)
    return Hardware("local", gpu, link, cpu=cpu, source=f"local: detected {cpu_line}; {gpu_line}",
                    more_gpus=gpus[1:])
