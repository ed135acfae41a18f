"""Hardware presets and files: machines as the papers and the published measurements ran them, and the
TOML file a user describes their own with (``moesim hardware --template`` prints one; every key, its
unit, default and source: docs/hardware.md).

The presets themselves are in ``moesim.sim.presets``; `moesim calibrate` (replay) measures a real machine
and writes the TOML file this module reads.

A file may name a preset for a whole section (``gpu = "rtx4090"``, ``link = "pcie4"``, ``ssd = "pcie5-nvme"``,
``cpu = "ryzen-7950x"``). The memory sizes the checks depend on (``hbm_gb``, ``ram_gb``) are required; a
file without ``[gpu]`` is a CPU-only machine (everything runs on its CPU).

Every number is checked in one place (``check_hardware``): against its rule, the range no real machine comes near
(refused), and the most a real part has (``PLAUSIBLE``: past it a ``MoesimWarning`` names the likely unit slip; ten
times past it, refused unless ``force``).
"""

from __future__ import annotations

import functools
import json
import math
import warnings
import weakref
from dataclasses import MISSING, asdict, fields, replace
from pathlib import Path
from typing import NamedTuple

from moesim.errors import MoesimError, MoesimWarning, named
from moesim.files import atomic_output, read_toml
from moesim.sim.cpu_rates import ISA_FLOP_PER_CYCLE
from moesim.sim import local_kept
from moesim.sim.local_machine import detect, measure_clock_ghz, measure_dram_gbps, read_text
from moesim.sim.machine import CPU, GPU, SSD, VENDORS, Hardware, Link, MeasuredCompute
from moesim.sim.presets import CPUS, GPUS, LINKS, SSDS, SYSTEMS, UNIFIED, unified_link
from moesim.tracegen.model_spec import FORMATS

LOCAL = "local"  # ``--hardware local``: this machine, detected and measured (``moesim.sim.local_machine``)


def _pick(table: dict, name: str, what: str):
    try:
        return table[name.lower().replace(" ", "")]
    except KeyError:
        raise MoesimError(f"unknown {what} '{name}' (presets: {', '.join(table)})") from None


def is_file_name(name: str) -> bool:
    """Whether a hardware name is a TOML file rather than a preset."""
    return name.endswith(".toml") or Path(name).exists()


@functools.lru_cache(maxsize=1)
def this_machine(remeasure: bool = False) -> Hardware:
    """``--hardware local``: detected once per process, its DRAM read and clock measured once per machine and kept
    (``moesim.sim.local_kept``), so every run of a command and every later command sees the same machine;
    ``remeasure`` measures again and keeps that."""
    path, key = local_kept.folder() / local_kept.FILE_NAME, local_kept.identity(read_text)
    kept = None if remeasure else local_kept.load(path, key)
    if kept is not None:
        hw = detect(measure=lambda nbytes: kept.dram_gbps, clock=lambda isa: kept.ghz)
        return replace(hw, source=f"{hw.source}; measured {kept.measured_at or 'earlier'}, kept in {path} (moesim "
                                  "hardware --show local --remeasure measures again)")
    measured = {}

    def dram(nbytes: int) -> float:
        measured["dram"] = measure_dram_gbps(nbytes)
        return measured["dram"]

    def clock(isa: str) -> float | None:
        measured["ghz"] = measure_clock_ghz(isa)
        return measured["ghz"]

    hw = detect(measure=dram, clock=clock)
    stored = "dram" in measured and local_kept.keep(path, key, measured["dram"], measured.get("ghz"))
    return replace(hw, source=f"{hw.source}; kept in {path} for later runs" if stored else hw.source)


def get_hardware(name: str, link: str | None = None, ssd: str | None = None, cpu: str | None = None,
                 vram: float | None = None, ram: float | None = None, threads: int | None = None,
                 force: bool = False) -> Hardware:
    """A system preset (``rtx4090``), a TOML file, or ``local`` (this machine), with its parts changed as
    ``with_parts`` says; ``force`` takes numbers far past every real part's (``check_hardware``)."""
    if isinstance(name, Path):
        name = str(name)
    if not isinstance(name, str):
        raise MoesimError(f'hardware must be a preset name, a hardware TOML file\'s path or "local", got '
                          f"{type(name).__name__}")
    if is_file_name(name):
        hw = load_hardware(Path(name), force)
    elif name.lower() == LOCAL:
        hw = this_machine()
    else:
        gpu, default_link, default_cpu = _pick(SYSTEMS, name, "hardware")
        own = None if not default_link else \
            unified_link(GPUS[gpu]) if default_link == UNIFIED else LINKS[default_link]
        hw = Hardware(name.lower(), GPUS[gpu] if gpu else None, own, source="preset", cpu=CPUS[default_cpu])
    return _checked(with_parts(hw, link, ssd, cpu, vram, ram, threads, force), force)


def with_parts(hw: Hardware, link: str | None = None, ssd: str | None = None, cpu: str | None = None,
               vram: float | None = None, ram: float | None = None, threads: int | None = None,
               force: bool = False) -> Hardware:
    """``hw`` with ``link`` / ``ssd`` / ``cpu`` swapped for presets (``link``: every GPU's), ``vram`` / ``ram`` (GiB)
    replacing every GPU's and the host's memory sizes (each held to its range and, ``force`` aside, to the most a real
    part has: ``PLAUSIBLE``), ``threads`` the threads the engine computes with on the CPU: a preset's, a file's or a
    machine built in code alike (``moesim.simulate(..., hardware=Hardware(...), link="pcie3")``)."""
    for part, value in (("link", link), ("ssd", ssd), ("cpu", cpu)):
        if value is not None and not isinstance(value, str):
            raise MoesimError(f"{part} must be a {part} preset's name, got {type(value).__name__}")
    for part, value, field, key in (("vram", vram, "hbm_gb", "gpu"), ("ram", ram, "ram_gb", "cpu")):
        wrong = value is not None and out_of_range(field, value, key)
        if wrong:
            raise MoesimError(f"{named(part)} {wrong}")
    if hw.gpu is None and (link is not None or vram is not None):
        raise MoesimError(f"hardware '{hw.name}' has no GPU: {named('link')} and {named('vram')} do not apply")
    if link is not None and hw.gpu.unified:
        raise MoesimError(f"hardware '{hw.name}': its GPU shares the host's memory, so no link reaches it: "
                          f"{named('link')} does not apply")
    if link is not None:  # every GPU's
        swapped = _pick(LINKS, link, "link")
        hw = replace(hw, link=swapped, more_gpus=tuple((g, swapped) for g, _ in hw.more_gpus), name=f"{hw.name}+{link}")
    if ssd is not None:
        hw = replace(hw, ssd=_pick(SSDS, ssd, "ssd"))
    if cpu is not None:
        hw = replace(hw, cpu=_pick(CPUS, cpu, "cpu"), name=f"{hw.name}+{cpu}")
    if vram is not None:  # every GPU's
        hw = replace(hw, gpu=replace(hw.gpu, hbm_gb=float(vram)),
                     more_gpus=tuple((replace(g, hbm_gb=float(vram)), lk) for g, lk in hw.more_gpus))
        _check_plausible(_typed("vram", vram), "gpu", "hbm_gb", vram, hw.gpu, force)
    if ram is not None:
        if hw.cpu is None:
            raise MoesimError(f"hardware '{hw.name}' has no [cpu] section whose RAM {named('ram')} could set")
        hw = replace(hw, cpu=replace(hw.cpu, ram_gb=float(ram)))
        _check_plausible(_typed("ram", ram), "cpu", "ram_gb", ram, hw.cpu, force)
    if threads is not None:
        if hw.cpu is None:
            raise MoesimError(f"hardware '{hw.name}' has no [cpu] section whose threads {named('threads')} could set")
        hw = replace(hw, cpu=replace(hw.cpu, threads=int(threads)))
        _check_threads(hw.cpu, named("threads", int(threads)))
    return hw


def _check_threads(cpu, where: str) -> None:
    """More threads than cores is refused, not capped in silence: the model computes with one a core at most (a
    core's second SMT thread shares its units and its share of DRAM bandwidth)."""
    if cpu.threads > cpu.cores * cpu.sockets:
        raise MoesimError(f"{where}: more threads than the {cpu.name}'s {cpu.cores * cpu.sockets} cores; the model "
                          "computes with one thread a core at most (leave it out for every core)")


SECTIONS = {"gpu": (GPU, GPUS), "link": (Link, LINKS), "ssd": (SSD, SSDS), "cpu": (CPU, CPUS),
            "compute": (MeasuredCompute, None)}
SEVERAL = ("gpu", "link")  # the sections a file may list, one a GPU: several GPUs, each on its own link


def load_hardware(path: Path, force: bool = False) -> Hardware:
    """A machine from a TOML file (docs/hardware.md); errors name the file. Without ``[gpu]`` (and ``[link]``) it is
    CPU-only and needs ``[cpu]``. The top level holds ``name`` (a string) and the sections, or a preset's name for
    one; anything else there is an unknown section (a table) or an unknown top-level key. Every number is checked
    against its rule, its range and the most a real part has (``check_hardware``; ``force`` takes one far past
    that)."""
    data = read_toml(path, "hardware file")
    unknown = sorted(set(data) - {"name", *SECTIONS})
    tables = [u for u in unknown if isinstance(data[u], dict)]
    if tables:
        raise MoesimError(f"{path}: unknown section(s) {', '.join(tables)} (known: {', '.join(SECTIONS)})")
    if unknown:  # a top-level line, not a [table]
        raise MoesimError(f"{path}: unknown top-level key(s) {', '.join(unknown)} (known: name, and a preset's name "
                          f"for {', '.join(k for k, (_, presets) in SECTIONS.items() if presets)})")
    parts = {}
    for key, (cls, presets) in SECTIONS.items():
        value = data.get(key)
        if isinstance(value, list) and key in SEVERAL and value:  # [[gpu]] tables, or a list of presets' names
            parts[key] = [_part(path, key, cls, presets, item) for item in value]
        else:
            parts[key] = None if value is None else _part(path, key, cls, presets, value)
    gpus, links = (parts[key] if isinstance(parts[key], list) else [parts[key]] for key in SEVERAL)
    if links == [None] and gpus[0] is not None and gpus[0].unified:  # its memory is the host's: nothing crosses a link
        links = [unified_link(gpus[0])]
    if len(links) == 1:  # one link named for every GPU
        links = links * len(gpus)
    if len(links) != len(gpus):
        raise MoesimError(f"{path}: {len(gpus)} [[gpu]] and {len(links)} [[link]]: give one link for every GPU, "
                          "in the same order, or one for all")
    hw = Hardware(data.get("name", path.stem), gpus[0], links[0], parts["ssd"], source=str(path),
                  compute=parts["compute"], cpu=parts["cpu"], more_gpus=tuple(zip(gpus[1:], links[1:])))
    check_hardware(hw, path, force)
    return hw


def _part(path: Path, key: str, cls, presets, value):
    """One part of a hardware file: a preset's name, or a table of its fields."""
    if isinstance(value, str) and presets:
        try:
            return _pick(presets, value, key)
        except MoesimError as exc:
            raise MoesimError(f"{path}: {exc}") from None
    if isinstance(value, dict):
        return _section(path, key, cls, value)
    several = " (or a list of them, one a GPU)" if key in SEVERAL else ""
    raise MoesimError(f"{path}: '{key}' must be {'a preset name or ' if presets else ''}a table{several}")


def check_hardware(hw: Hardware, where, force: bool = False) -> None:
    """``hw``'s name a string, its parts of their types, a GPU with its link (a link or a compute table only with
    one), a CPU where there is no GPU; every number of its parts against its rule and its range (``RULES``,
    ``RANGES``) and its threads against its cores: a one-line error naming ``where`` (a file, or the machine as the
    Python API was given it), the part and the key. Then against the most a real part has (``PLAUSIBLE``): past it a
    warning, ten times past it an error unless ``force``. What ``load_hardware`` reads, ``write_hardware`` writes and
    the API takes built in code; a machine this module built and checked (``_checked``) is not checked, nor warned
    of, twice."""
    if _CHECKED.get((id(hw), False)) is hw or (force and _CHECKED.get((id(hw), True)) is hw):
        return
    if not isinstance(hw.name, str):
        raise MoesimError(f"{where}: name must be a string, got {hw.name!r}")
    for key, (cls, _) in SECTIONS.items():
        if not isinstance(getattr(hw, key), (cls, type(None))):
            raise MoesimError(f"{where}: {key} must be {cls.__name__} or None, got {type(getattr(hw, key)).__name__}")
    if (hw.gpu is None and hw.cpu is None) or (hw.gpu is not None and hw.link is None):
        raise MoesimError(f"{where}: a machine needs a GPU with the link experts reach it by ([gpu] and [link], e.g. "
                          "link = \"pcie4\"; a GPU whose memory is the host's: unified = true in [gpu]), a CPU ([cpu]), "
                          "or both")
    if hw.gpu is None and (hw.link is not None or hw.compute is not None or hw.more_gpus):
        raise MoesimError(f"{where}: a link, a compute table and more GPUs ([link], [compute], [[gpu]]) describe a GPU, "
                          "and the machine has none")
    if not isinstance(hw.more_gpus, tuple) or not all(
            isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], GPU) and isinstance(pair[1], Link)
            for pair in hw.more_gpus):
        raise MoesimError(f"{where}: more_gpus must be a tuple of (GPU, Link) pairs, got {hw.more_gpus!r}")
    if hw.more_gpus and hw.compute is not None:
        raise MoesimError(f"{where}: a compute table is measured on one GPU, and the machine has "
                          f"{len(hw.gpus)}")
    if len({g.vendor for g, _ in hw.gpus}) > 1:
        raise MoesimError(f"{where}: GPUs of several makers ({', '.join(g.vendor for g, _ in hw.gpus)}); an engine "
                          "places a model over one maker's GPUs (llama.cpp's Vulkan build mixes them: not modelled)")
    if any(g.unified for g, _ in hw.gpus) and (hw.more_gpus or hw.link.name != UNIFIED):
        raise MoesimError(f"{where}: a GPU that shares the host's memory (unified) is the machine's only GPU, and "
                          "takes no link (nothing is copied to it); leave [link] out")
    every = [(key, getattr(hw, key)) for key in SECTIONS] + [
        (key, part) for pair in hw.more_gpus for key, part in zip(SEVERAL, pair)]
    for key, part in every:
        if part is None:
            continue
        for name, value in asdict(part).items():
            if name in RATE_TABLES:
                _rates(where, key, name, tuple((fmt, _plain(rate)) for fmt, rate in value))
            elif name != "name":
                _check_number(where, key, name, _plain(value), RULES.get(name, "non-negative"), part)
    if hw.cpu is not None:
        _check_threads(hw.cpu, f"{where}: [cpu] threads = {hw.cpu.threads}")
    for key, name in PLAUSIBLE:  # after every rule: a machine refused for one is not warned of first
        # ("pcie": a link, held to it by its name)
        for part in dict.fromkeys(part for k, part in every if k == key and part is not None):
            _check_plausible(f"{where}: [{key}] {name} = {_shown(getattr(part, name))}", key, name,
                             getattr(part, name), part, force)
    _checked(hw, force)


# machines checked (``check_hardware``, ``get_hardware``), by (id, force), held as long as they are alive: the command
# line builds a machine once and hands it to the API, which would otherwise check it again and warn of its numbers
# twice, once under the file's name and once under the machine's
_CHECKED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _checked(hw: Hardware, force: bool) -> Hardware:
    """``hw``, noted as checked (with ``force``)."""
    _CHECKED[id(hw), bool(force)] = hw
    return hw


# what each number of a hardware file may be; anything else would give silently wrong times
RULES = {"hbm_gbps": "positive", "tflops": "positive", "hbm_gb": "positive", "mem_eff": "fraction",
         "flop_eff": "fraction", "launch_us": "non-negative", "gbps": "positive", "efficiency": "fraction",
         "latency_us": "non-negative", "engines": "engines", "layer_s": "positive", "expert_s": "positive",
         "cores": "cores", "ghz": "positive", "dram_gbps": "positive", "ram_gb": "positive",
         "dram_eff": "fraction", "kernel_eff": "fraction", "isa": "isa", "sockets": "sockets", "threads": "threads",
         "band_low": "non-negative", "band_high": "non-negative", "band_held": "non-negative", "unified": "flag",
         "vendor": "vendor"}
# ... and the range it must lie in, checked after its rule: (lowest, highest, unit). No real machine comes near either
# end; past them the model's times overflow to inf or NaN (a link of 1e-310 GB/s, a launch of 1e308 us, a clock of
# 1e-320 GHz) or are absurd without a warning (1e300 s a token), and a memory of 1e300 GiB reads as no limit at all.
#   bandwidths, GB/s (hbm_gbps, gbps, dram_gbps; unpack_gbps per thread; core_gbps, not 0) 1e-3 .. 1e6
#   memory sizes, GiB (hbm_gb, ram_gb)                                                 1e-3 .. 1e6
#   tflops, 1e12 FLOP/s                                                                1e-6 .. 1e6
#   per-thread GFLOP/s (matmul_gflops; attn_gflops, attn_tiled_gflops, where not 0)   1e-3 .. 1e6
#   ghz                                                                                1e-2 .. 100
#   shares (mem_eff, flop_eff, efficiency, dram_eff, kernel_eff)                      1e-3 .. 1
#   attn_thread_eff (what a further thread adds, a share of one's)                     0 .. 1
#   fixed costs, us (launch_us, latency_us, task_us, sync_us, barrier_*_us)           0 .. 1e6 (1 s)
#   a measured band's factors (band_low, band_high; where not 0)                       1e-3 .. 1e3
#   ... and the share it held (band_held, where not 0)                                 1e-3 .. 1
#   [compute] times, s                                                                 0 .. 1
BANDWIDTH, SIZE, SHARE, MICROS, SECONDS = (1e-3, 1e6, "GB/s"), (1e-3, 1e6, "GiB"), (1e-3, 1, ""), (0, 1e6, "us"), \
    (0, 1, "s")
RANGES = {"hbm_gbps": BANDWIDTH, "gbps": BANDWIDTH, "dram_gbps": BANDWIDTH, "unpack_gbps": BANDWIDTH,
          "core_gbps": BANDWIDTH,
          "hbm_gb": SIZE, "ram_gb": SIZE, "tflops": (1e-6, 1e6, "TFLOP/s"), "matmul_gflops": (1e-3, 1e6, "GFLOP/s"),
          "attn_gflops": (1e-3, 1e6, "GFLOP/s"), "attn_tiled_gflops": (1e-3, 1e6, "GFLOP/s"),
          "ghz": (1e-2, 100, "GHz"), "mem_eff": SHARE, "flop_eff": SHARE, "efficiency": SHARE, "dram_eff": SHARE,
          "kernel_eff": SHARE, "launch_us": MICROS, "latency_us": MICROS, "task_us": MICROS, "sync_us": MICROS,
          "barrier_base_us": MICROS, "barrier_thread_us": MICROS, "band_low": (1e-3, 1e3, ""),
          "band_high": (1e-3, 1e3, ""), "band_held": SHARE, "attn_thread_eff": (0, 1, ""),
          **{f.name: SECONDS for f in fields(MeasuredCompute) if f.name != "name"}}
# ... and the most a real part has, with headroom (what has the most beside each). Past it a number is most likely in
# another unit: a warning (``MoesimWarning``) names the key, the value and the unit slip that would make it one a real
# part has (from the least to the most here). Past ``REFUSED`` times the most, the times or what fits would be wrong by
# orders of magnitude (12288 GiB of GPU memory fits a bf16 model that needs 58), so the machine is refused unless forced
# (``force``: --force, ``force=True``). By part ("pcie": a link whose name says PCIe), then key; ``ram_gb``, the
# machine's RAM (all sockets), is held to the bound per socket times ``sockets``. A slip is caught only where it lands
# past the most: an RTX 3060's 360 GB/s typed in Gbit/s (2880) is still within what a GPU has. The most, and what has
# it:
#   [gpu] hbm_gb       512 GiB      MI355X, B300: 288 GB; MI450 (announced, 2026): 432 GB
#   [gpu] hbm_gbps     32000 GB/s   B200, B300, MI355X: 8 TB/s; Rubin, MI450 (announced, 2026): 22, 19.6 TB/s
#   [gpu] tflops       5000         dense bf16: B200 2250, MI355X 2500 TFLOP/s
#   [link] gbps        1000 GB/s    NVLink-C2C (GH200, GB200): 450 GB/s each way
#   PCIe [link] gbps   128 GB/s     PCIe 6 x16: 128 GB/s each way
#   [ssd] gbps         128 GB/s     a PCIe 5 drive: 14.9 GB/s; an array of 8 of them: ~110 GB/s
#   [cpu] dram_gbps    2000 GB/s    a socket: Xeon 6 with MRDIMM-8800, 845 GB/s; Apple M3 Ultra, 819 GB/s; Xeon Max's
#                                   HBM2e, 1.6 TB/s
#   [cpu] ram_gb       8192 GiB     a socket: EPYC 9005, 6 TB
#   [cpu] ghz          7 GHz        Core i9-14900KS: 6.2 GHz (its boost; ghz is the all-core clock)


class Bound(NamedTuple):
    least: float   # what the slips may name, from here ...
    most: float    # ... to here: the most a real part has, with headroom
    unit: str
    what: str      # what a number past ``most`` is
    slips: tuple   # (unit, factor): a number written in that unit is factor times too large


MIB, RATE, CLOCK, FLOPS = (("MiB", 1024),), (("Gbit/s", 8), ("MB/s", 1000)), (("MHz", 1000),), (("GFLOP/s", 1000),)
PLAUSIBLE = {("gpu", "hbm_gb"): Bound(0.5, 512, "GiB", "more GPU memory than any GPU has", MIB),
             ("gpu", "hbm_gbps"): Bound(10, 32000, "GB/s", "more memory bandwidth than any GPU has", RATE),
             ("gpu", "tflops"): Bound(1, 5000, "TFLOP/s", "more dense bf16 FLOP/s than any GPU has", FLOPS),
             ("link", "gbps"): Bound(0.5, 1000, "GB/s", "more bandwidth than any host link has", RATE),
             ("pcie", "gbps"): Bound(0.5, 128, "GB/s", "more bandwidth than any PCIe link has", RATE),
             ("ssd", "gbps"): Bound(0.1, 128, "GB/s", "more read bandwidth than any SSD (or array of them) has", RATE),
             ("cpu", "dram_gbps"): Bound(2, 2000, "GB/s", "more DRAM bandwidth than any CPU socket has", RATE),
             ("cpu", "ram_gb"): Bound(0.5, 8192, "GiB", "more RAM than any CPU socket holds", MIB),
             ("cpu", "ghz"): Bound(0.5, 7, "GHz", "a faster clock than any CPU runs at", CLOCK)}
REFUSED = 10
UNSET = ("attn_gflops", "attn_tiled_gflops", "band_low", "band_high", "band_held", "core_gbps")  # 0: none
RATE_TABLES = ("unpack_gbps", "matmul_gflops")
RETIRED = ("fp32_gflops", "bf16_gflops", "int8_gflops", "int4_gflops")  # per-class rates, now per format  # [cpu] keys whose value is a table of format = rate per thread
MAX_ENGINES = 64
MAX_CORES = 4096
MAX_SOCKETS = 16


def _section(path: Path, key: str, cls, values: dict):
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        placed = [u for u in unknown if u in SECTIONS]  # `link = "pcie4"` written below a [table] belongs to it
        hint = (f"; a preset line such as {placed[0]} = \"...\" goes at the top of the file, before the first "
                "[table]") if placed else ""
        if any(u in RETIRED for u in unknown):
            hint += "; an older moesim calibrate wrote it: calibrate again (per-format unpack_gbps, matmul_gflops)"
        raise MoesimError(f"{path}: [{key}] has unknown key(s) {', '.join(unknown)} (known: {', '.join(known)}){hint}")
    values = {"name": key, **values}
    for table in RATE_TABLES:
        if table in values:
            values[table] = _rates(path, key, table, values[table])
    try:
        obj = cls(**values)
    except TypeError as exc:
        missing = [f.name for f in known.values() if f.name not in values and f.default is MISSING]
        what = f"needs {', '.join(missing)} (docs/hardware.md)" if missing else str(exc)
        raise MoesimError(f"{path}: [{key}] {what}") from None
    if not isinstance(obj.name, str):
        raise MoesimError(f"{path}: [{key}] name must be a string, got {obj.name!r}")
    return obj


def _rates(path: Path, key: str, name: str, table) -> tuple:
    """``unpack_gbps = {q4_0 = 9.5, ...}`` (or ``matmul_gflops``): weight formats to positive rates, sorted pairs."""
    if not isinstance(table, (dict, tuple)):
        raise MoesimError(f"{path}: [{key}] {name} must be a table of format = rate, got {table!r}")
    pairs = sorted(dict(table).items())
    unknown = [fmt for fmt, _ in pairs if fmt not in FORMATS]
    if unknown:
        raise MoesimError(f"{path}: [{key}] {name} names unknown format(s) {', '.join(unknown)} (known: "
                          f"{', '.join(FORMATS)})")
    for fmt, rate in pairs:
        _check_number(path, key, f"{name}.{fmt}", rate, "positive")
    return tuple((fmt, float(rate)) for fmt, rate in pairs)


def _plain(value):
    """A numpy scalar as the Python number it holds; anything else as it is."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, tuple)) else value


def _toml(value) -> str:
    """A value as TOML writes it: a string quoted, a rate table's pairs an inline table, a flag lower case, a number as
    Python's."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (tuple, list)):
        return "{" + ", ".join(f"{name} = {rate!r}" for name, rate in value) + "}"
    return str(value).lower() if isinstance(value, bool) else repr(value)


WANT = {"positive": "a finite number > 0", "non-negative": "a finite number >= 0",
        "fraction": "a fraction in (0, 1]", "engines": f"a whole number of copy engines, 1..{MAX_ENGINES}",
        "cores": f"a whole number of cores, 1..{MAX_CORES}", "sockets": f"a whole number of sockets, 1..{MAX_SOCKETS}",
        "threads": f"a whole number of threads, 0 (every core) to {MAX_CORES * MAX_SOCKETS}"}


def _check_number(path: Path, key: str, name: str, v, rule: str, part=None) -> None:
    """One value of a hardware file (of ``part``) against its rule (``RULES``) and range (``RANGES``); a one-line
    error naming file, table and key."""
    if rule == "flag":
        if not isinstance(v, bool):
            raise MoesimError(f"{path}: [{key}] {name} must be true or false, got {v!r}")
        return
    if rule in ("isa", "vendor"):
        names = ISA_FLOP_PER_CYCLE if rule == "isa" else VENDORS
        if not isinstance(v, str) or v not in names:
            raise MoesimError(f"{path}: [{key}] {name} must be one of {', '.join(names)}, got {v!r}")
        return
    number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    whole = number and isinstance(v, int)
    ok = number and {"positive": lambda: v > 0, "non-negative": lambda: v >= 0, "fraction": lambda: 0 < v <= 1,
                     "engines": lambda: whole and 1 <= v <= MAX_ENGINES,
                     "cores": lambda: whole and 1 <= v <= MAX_CORES,
                     "sockets": lambda: whole and 1 <= v <= MAX_SOCKETS,
                     "threads": lambda: whole and 0 <= v <= MAX_CORES * MAX_SOCKETS}[rule]()
    if not ok:
        raise MoesimError(f"{path}: [{key}] {name} must be {WANT[rule]}, got {v!r}")
    wrong = out_of_range(name.split(".")[0], v, key, part)
    if wrong:
        raise MoesimError(f"{path}: [{key}] {name} {wrong}")


def out_of_range(name: str, v, key: str | None = None, part=None) -> str:
    """What is wrong with a number of a hardware file (of the part ``key``, ``part``) that passed its rule, past the
    range no real machine leaves (``RANGES``): "must be ..., got v", with the unit slip that would make it real
    (``PLAUSIBLE``) where one would, or "" where it is in range."""
    if name not in RANGES or (name in UNSET and v == 0):
        return ""
    low, high, unit = RANGES[name]
    if low <= v <= high:
        return ""
    span = f"at most {_num(high)}" if low == 0 else f"from {_num(low)} to {_num(high)}"
    bound, _ = _plausible(key, name, part)
    return (f"must be {span}{f' {unit}' if unit else ''} (no real machine comes near that), got {v!r}"
            + (_slip(v, bound) if bound else ""))


def _plausible(key: str | None, name: str, part) -> tuple[Bound | None, int]:
    """The ``PLAUSIBLE`` bound of the key ``name`` of ``part`` (the part ``key``; a link whose name says PCIe is held
    to PCIe's; RAM per socket, times its sockets) and the sockets it is for; None where no bound is known."""
    if key == "link" and "pcie" in str(getattr(part, "name", "")).lower():
        key = "pcie"
    sockets = getattr(part, "sockets", 1) if name == "ram_gb" else 1
    bound = PLAUSIBLE.get((key, name))
    return (bound and bound._replace(least=bound.least * sockets, most=bound.most * sockets)), sockets


def _slip(v, bound: Bound) -> str:
    """"; 12288 MiB would be 12 GiB: is it MiB?": the first unit slip that would make ``v`` a number a real part has
    (from ``bound``'s least to its most), or ""."""
    for slip, factor in bound.slips:
        if bound.least <= v / factor <= bound.most:
            return f"; {_shown(v)} {slip} would be {v / factor:.4g} {bound.unit}: is it {slip}?"
    return ""


def _check_plausible(where: str, key: str, name: str, v, part, force: bool) -> None:
    """``v``, the key ``name`` of ``part`` (``where`` names it and its value), against the most a real part has
    (``PLAUSIBLE``): past it a one-line ``MoesimWarning`` naming the likely unit slip; ``REFUSED`` times past it an
    error saying so, unless ``force``."""
    bound, sockets = _plausible(key, name, part)
    if bound is None or v <= bound.most:
        return
    text = (f"{where} is {bound.what} (at most ~{_shown(bound.most)} {bound.unit}"
            f"{f' for {sockets} sockets' if sockets > 1 else ''}){_slip(v, bound)}")
    if v > REFUSED * bound.most and not force:
        raise MoesimError(f"{text} ({named('force', True)} takes it)")
    warnings.warn(text, MoesimWarning)


def _typed(setting: str, v) -> str:
    """A setting and its value as its reader typed it: ``--vram 12288``, ``vram=12288``."""
    return named(setting, int(v) if float(v).is_integer() else v)


def _shown(v) -> str:
    """A number as a message shows it: 12288, 51.2, 1228800 (not 1.2288e+06), 12288 for 12288.0."""
    return f"{v:.15g}"


def _num(x: float) -> str:
    """A bound as the errors write it: 0.001, 1e-6, 1e6."""
    return f"{x:g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def write_hardware(hw: Hardware, path: Path, notes: tuple = (), force: bool = False) -> None:
    """Write ``hw`` as the TOML file ``load_hardware`` reads (atomically), ``notes`` as comments at its top; a
    number ``load_hardware`` would refuse (a calibration that fitted a negative bandwidth; without ``force``, one far
    past every real part's) is refused here, before anything is written."""
    check_hardware(hw, path, force)
    lines = [f"# {' '.join(note.split())}" for note in notes] + [f"name = {json.dumps(hw.name)}"]
    for key in SECTIONS:
        several = key in SEVERAL and hw.more_gpus  # [[gpu]] and [[link]] tables, one a GPU in device order
        parts = [pair[SEVERAL.index(key)] for pair in hw.gpus] if several else [getattr(hw, key)]
        for part in (p for p in parts if p is not None):
            lines.append(f"\n[[{key}]]" if several else f"\n[{key}]")
            for name, value in asdict(part).items():
                # a fit's numbers are often numpy scalars, whose repr (np.float64(...)) is no TOML
                value = tuple((f, _plain(rate)) for f, rate in value) if name in RATE_TABLES else _plain(value)
                if value != ():  # an empty rate table is left out
                    lines.append(f"{name} = {_toml(value)}")
    with atomic_output(path) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n")


TEMPLATE = """\
# A machine for moesim (--hardware this.toml). Every key, its unit, default and source: docs/hardware.md.
# Sizes are GiB (2^30 bytes); bandwidths GB/s (1e9 bytes/s). Delete [gpu] and [link] for a CPU-only machine.
# A number past every real part's (12288 GiB of GPU memory: MiB?) is warned of; ten times past it, refused unless
# --force (the bounds: docs/hardware.md).
# A part may be a preset instead of a table: write e.g. link = "pcie4" here, above the first [table].
# Several GPUs: a [[gpu]] table each (or gpu = ["rtx3090", "rtx3090"]) in the engine's device order, and one link for
# all or a [[link]] each in the same order (llama.cpp's layer split: docs/hardware.md). A GPU that shares the host's
# memory (Apple M-series, Strix Halo, DGX Spark): unified = true in [gpu], hbm_gb the share it may map, no [link].
name = "my-desktop"

[gpu]                    # or, at the top: gpu = "rtx4090" (a preset: moesim hardware)
name = "RTX 3060 12GB"
hbm_gb = 12              # memory, GiB (required)
hbm_gbps = 360           # memory bandwidth, GB/s (spec sheet)
tflops = 25.6            # dense bf16 tensor FLOP/s (fp32 accumulate), 1e12 (spec sheet, no sparsity)
# mem_eff = 0.8          # share of hbm_gbps a decode kernel reaches
# flop_eff = 0.6         # share of tflops a GEMM reaches
# launch_us = 5          # per kernel launch
# vendor = "nvidia"      # nvidia, amd, intel or apple: the engines whose GPU backend runs on it

[link]                   # or, at the top: link = "pcie4"
name = "PCIe 4 x16"
gbps = 32                # nominal, one direction: PCIe 3/4/5 x16 = 16/32/64
# efficiency = 0.8       # share a pinned copy reaches
# latency_us = 10        # per copy
# engines = 1            # copy engines working at once

[cpu]                    # or, at the top: cpu = "ryzen-7950x"
name = "Ryzen 7 5800X"
cores = 8                # physical cores per socket
ghz = 4.2                # all-core clock
isa = "avx2"             # avx2, avx512, avx512-256 (Zen 4), amx (Xeon 4th gen+), neon (Arm)
dram_gbps = 51.2         # per socket, nominal: channels x MT/s x 8 B (2 x DDR4-3200 = 51.2)
ram_gb = 32              # all sockets, GiB (required)
# sockets = 1            # a two-socket server: 2, with cores and dram_gbps per socket
# threads = 0            # threads the engine computes with (llama.cpp -t); 0: every core
# dram_eff = 0.73        # share of dram_gbps a streaming read reaches
# core_gbps = 0          # DRAM read GB/s one core reaches alone (0: no per-core limit)
# kernel_eff = 0.5       # share of the ISA's peak FLOP/s a kernel reaches on many tokens
# sync_us = 113          # per layer handed from the GPU to the CPU and back
# barrier_base_us = 1.15 # a barrier of the engine's threads: base + thread x (threads - 1)
# barrier_thread_us = 0.27
# task_us = 0            # per expert kernel besides the barriers
# unpack_gbps = {q4_0 = 9.5, bf16 = 12}  # GB/s of weights one thread unpacks at decode, by format (measured)
# matmul_gflops = {q4_0 = 60}            # GFLOP/s one thread reaches in prefill's products, by format (measured)
# attn_gflops = 10.7                     # GFLOP/s one thread reaches in attention over the KV cache at decode
# attn_tiled_gflops = 28.6               # ... and on a prompt (llama.cpp's flash attention in tiles; measured)
# attn_thread_eff = 1                    # what each further thread adds to attn_gflops's path, a share (measured)
# band_low = 0.85                        # this machine's 80% decode interval, measured / predicted held out, and
# band_high = 1.21                       # the share such intervals held (moesim validate --engine llama.cpp --out)
# band_held = 0.8

# [ssd]                  # or, at the top: ssd = "pcie4-nvme"; experts beyond DRAM (--dram-capacity)
# name = "PCIe 4 NVMe"
# gbps = 7.0
# latency_us = 80
"""
