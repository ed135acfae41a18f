"""Hardware presets: the GPU that computes, the link experts cross, the host CPU and its memory, the SSD.

A machine is a GPU (HBM bandwidth, dense bf16 FLOP/s, the fraction of each a decode kernel
reaches, launch overhead per kernel, memory size), a host link (nominal bandwidth, the fraction a
pinned copy reaches, latency per transfer, copy engines), a host CPU (cores, clock, vector ISA, DRAM
bandwidth and size: what computes experts kept on the host) and optionally an SSD (read bandwidth,
latency). Memory sizes are GiB (2^30 bytes), as GPUs and DIMMs are sold and nvidia-smi counts.
Nominal figures are the vendors'; PCIe 3/4/5 x16 are 16/32/64 GB/s as the papers quote them
(MELINOE Tab. 9, CommitMoE Tab. 1), the SSD is FlashMoE Tab. 2's PCIe 5 drive (7.4 GB/s).
The efficiencies are typical measured fractions (pinned host-to-device copies reach ~80–85% of a
PCIe link; memory-bound decode kernels ~80% of HBM), not fitted to any paper: `moesim calibrate`
(replay) measures them on a real machine and writes the TOML file this module reads.

TOML layout (every key optional except those a section needs to exist)::

    name = "my-box"
    [gpu]
    name = "RTX 4090"; hbm_gbps = 1008; tflops = 165; mem_eff = 0.8; flop_eff = 0.6; launch_us = 5
    [link]
    name = "PCIe 4 x16"; gbps = 32; efficiency = 0.8; latency_us = 10; engines = 1
    [ssd]
    name = "PCIe 4 NVMe"; gbps = 7.0; latency_us = 80
    [cpu]
    name = "Ryzen 9 7950X"; cores = 16; ghz = 5.0; isa = "avx512-256"; dram_gbps = 83.2; ram_gb = 128
    dram_eff = 0.7; kernel_eff = 0.5; task_us = 5; sync_us = 25   # and, measured: bf16_gflops = ...
    [compute]    # measured times for one model, replacing the roofline for it (see MeasuredCompute)
    name = "olmoe-1b-7b"; layer_s = 9e-5; expert_s = 1.2e-5; expert_token_s = 2e-8

A section may instead name a preset: ``gpu = "rtx4090"``, ``link = "pcie4"``, ``ssd = "pcie5-nvme"``,
``cpu = "ryzen-7950x"``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from moesim.errors import MoesimError
from moesim.files import atomic_output, read_toml
from moesim.tracegen.model_spec import FORMATS


@dataclass(frozen=True)
class GPU:
    name: str
    hbm_gbps: float          # GB/s
    tflops: float            # dense bf16 (fp16 where the GPU has no bf16), 1e12 FLOP/s
    hbm_gb: float = 0.0      # memory, GiB (0: not known, not checked)
    mem_eff: float = 0.8     # fraction of HBM bandwidth a decode kernel reaches
    flop_eff: float = 0.6    # fraction of peak FLOP/s a GEMM reaches
    launch_us: float = 5.0   # per kernel launch

    @property
    def mem_bw(self) -> float:
        """Bytes/s a kernel streams from HBM."""
        return self.hbm_gbps * 1e9 * self.mem_eff

    @property
    def flops(self) -> float:
        return self.tflops * 1e12 * self.flop_eff


@dataclass(frozen=True)
class Link:
    name: str
    gbps: float              # nominal GB/s, one direction
    efficiency: float = 0.8  # fraction a pinned copy reaches
    latency_us: float = 10.0
    engines: int = 1         # copy engines working in parallel (transfers stay FIFO on each)

    @property
    def bandwidth(self) -> float:
        return self.gbps * 1e9 * self.efficiency


# Peak FLOP per cycle and core of an expert kernel whose weights are in each format class, by the
# widest vector or matrix extension the CPU has (the vendors' instruction tables):
#   avx2:       two 256-bit FMA pipes: fp32 32; bf16 widened to fp32 first, half of that; int8 dot
#               products (vpmaddubsw + vpmaddwd) 64; 4-bit weights unpacked to int8 first, half of that;
#   avx512:     two 512-bit FMA pipes (Xeon): fp32 64; AVX512-BF16 (vdpbf16ps) 128; VNNI (vpdpbusd) 256; 4-bit 128;
#   avx512-256: AVX-512 on 256-bit pipes (AMD Zen 4): half the avx512 rates;
#   amx:        Sapphire Rapids and later: AMX-BF16 1024, AMX-INT8 2048 per cycle; fp32 on AVX-512;
#               4-bit weights dequantised on AVX-512 first: 256;
#   neon:       Arm Neoverse V2 (Grace), four 128-bit SVE2 pipes: fp32 32; BFMMLA 64; SDOT/I8MM 128; 4-bit 64.
# ``kernel_eff`` says what share of that peak an expert kernel reaches (default 0.5, an estimate:
# ``moesim calibrate`` measures the rates instead).
ISA_FLOP_PER_CYCLE = {
    "avx2": {"fp32": 32, "bf16": 16, "int8": 64, "int4": 32},
    "avx512": {"fp32": 64, "bf16": 128, "int8": 256, "int4": 128},
    "avx512-256": {"fp32": 32, "bf16": 64, "int8": 128, "int4": 64},
    "amx": {"fp32": 64, "bf16": 1024, "int8": 2048, "int4": 256},
    "neon": {"fp32": 32, "bf16": 64, "int8": 128, "int4": 64},
}
# the kernel class a weight format runs as on a CPU (``moesim.tracegen.model_spec.FORMATS``; fp8 has no CPU
# instructions: it is widened like int8)
FORMAT_CLASS = {name: f.cpu_class for name, f in FORMATS.items()}


@dataclass(frozen=True)
class CPU:
    """The host CPU that computes experts kept in its DRAM (llama.cpp ``--n-cpu-moe``, kTransformers,
    Fiddler). An expert on T tokens takes ``task_us`` + max(its weights / DRAM bandwidth reached,
    2·params·T / the format's FLOP/s): weights stream from DRAM once per layer, the tokens share them,
    and a quantised format's unpacking can make it compute-bound (``moesim.sim.costs.cpu_expert_s``)."""

    name: str
    cores: int
    ghz: float               # all-core clock
    isa: str                 # a key of ISA_FLOP_PER_CYCLE
    dram_gbps: float         # nominal: channels x MT/s x 8 B
    ram_gb: float = 0.0      # DRAM, GiB (0: not known, not checked)
    dram_eff: float = 0.7    # share of the nominal bandwidth a streaming read reaches (STREAM-like)
    kernel_eff: float = 0.5  # share of the ISA's peak an expert kernel reaches
    task_us: float = 5.0     # per expert kernel: waking the threads and joining them
    sync_us: float = 25.0    # per layer handed to the CPU: the activations' two trips' latency, the waits
    fp32_gflops: float = 0.0  # measured rates per format class (0: from the ISA table)
    bf16_gflops: float = 0.0
    int8_gflops: float = 0.0
    int4_gflops: float = 0.0

    @property
    def dram_bw(self) -> float:
        """Bytes/s a streaming read of expert weights reaches."""
        return self.dram_gbps * 1e9 * self.dram_eff

    def flops(self, dtype: str) -> float:
        """FLOP/s of an expert kernel whose weights are in ``dtype``: measured, or from the ISA table."""
        cls = FORMAT_CLASS[dtype]
        measured = getattr(self, f"{cls}_gflops")
        if measured > 0:
            return measured * 1e9
        return self.cores * self.ghz * 1e9 * ISA_FLOP_PER_CYCLE[self.isa][cls] * self.kernel_eff


@dataclass(frozen=True)
class SSD:
    name: str
    gbps: float              # sequential read, GB/s
    latency_us: float = 80.0


@dataclass(frozen=True)
class MeasuredCompute:
    """Measured compute times for one model on this machine (what `moesim calibrate` fits); they
    replace the roofline for that model (``moesim.sim.costs``). A layer's attention + router + shared
    experts take ``layer_s + layer_token_s · T + layer_ctx_s · ctx`` for T tokens whose sequences
    hold ctx KV tokens; one expert on T tokens ``expert_s + expert_token_s · (T − 1)``; a fused MoE
    kernel adds ``moe_launch_s``, a per-expert kernel ``expert_launch_s``."""

    name: str                # the model preset these were measured for
    layer_s: float
    expert_s: float
    layer_token_s: float = 0.0
    layer_ctx_s: float = 0.0
    expert_token_s: float = 0.0
    moe_launch_s: float = 0.0
    expert_launch_s: float = 0.0


@dataclass(frozen=True)
class Hardware:
    name: str
    gpu: GPU
    link: Link
    ssd: SSD | None = None
    source: str = field(default="", compare=False)
    compute: MeasuredCompute | None = None
    cpu: CPU | None = None

    def as_dict(self) -> dict:
        return asdict(self)


GPUS = {g.name.lower().replace(" ", ""): g for g in [
    GPU("H100", 3350, 989, 80),                   # SXM5, HBM3
    GPU("A100-40G", 1555, 312, 40),
    GPU("A6000", 768, 154.8, 48),                 # RTX A6000, GDDR6
    GPU("RTX4090", 1008, 165.2, 24),
    GPU("RTX4090D", 1008, 147.0, 24),             # China-market 4090: 14592 CUDA cores
    GPU("RTX4080", 716.8, 97.5, 16),
    GPU("RTX2080", 448, 40.3, 8),
    GPU("RTX2080Ti", 616, 53.8, 11),              # fp16 tensor cores with fp32 accumulate (no bf16)
    GPU("RTX5070Ti", 896, 175.8, 16),             # GDDR7; bf16 dense from the Blackwell whitepaper
    GPU("GH200", 4000, 989, 96),                  # H100 with HBM3 96 GB
]}
LINKS = {lk.name: lk for lk in [
    Link("pcie3", 16, 0.8, 10),
    Link("pcie4", 32, 0.8, 10),
    Link("pcie5", 64, 0.85, 10),
    Link("nvlink-c2c", 450, 0.9, 5),              # GH200 CPU-GPU, 450 GB/s each way
]}
SSDS = {s.name: s for s in [
    SSD("pcie5-nvme", 7.4, 80),                   # FlashMoE Tab. 2: SK hynix P51
    SSD("pcie4-nvme", 7.0, 80),                   # a typical PCIe 4 drive (Samsung 990 Pro class)
]}
CPUS = {c.name.lower().replace(" ", "-"): c for c in [
    # nominal DRAM bandwidth = channels x MT/s x 8 B; RAM as the paper's machine had it, else a typical build
    CPU("Ryzen-7950X", 16, 5.0, "avx512-256", 83.2, 128),      # 2 x DDR5-5200 (AMD's rated maximum)
    CPU("Ryzen-9600X", 6, 5.0, "avx512", 96.0, 64),            # FlashMoE Tab. 2: 4 x 16 GB DDR5-6000, dual channel
    CPU("i9-10900X", 10, 4.0, "avx512", 93.9, 128),            # 4 x DDR4-2933 (Intel's rated maximum)
    CPU("Xeon-E5-2680v4", 14, 2.9, "avx2", 76.8, 128),         # CommitMoE Tab. 2 env. 2: 4 x DDR4-2400
    CPU("Xeon-W5-3435X", 16, 4.0, "amx", 307.2, 128),          # CommitMoE Tab. 2 env. 1: 8 x DDR5-4800
    CPU("Xeon-8470", 52, 2.6, "amx", 307.2, 2048),             # MELINOE Tab. 9 (H100 host): 8 x DDR5-4800 per socket
    CPU("Xeon-6454S", 32, 2.8, "amx", 307.2, 512),             # kTransformers' host, one socket: 8 x DDR5-4800
    CPU("EPYC-7J13", 64, 3.0, "avx2", 204.8, 216),             # MELINOE Tab. 9 (A100 host): 8 x DDR4-3200
    CPU("EPYC-7B13", 64, 3.0, "avx2", 204.8, 270),             # MELINOE Tab. 9 (RTX 4090 host): 8 x DDR4-3200
    CPU("Grace", 72, 3.1, "neon", 512.0, 480),                 # GH200: 480 GB LPDDR5X at up to 512 GB/s
]}
# machines as the papers ran them: GPU, its host link, its host CPU. The rtx4090 machine is a desktop
# (MELINOE's RTX 4090 sits in an EPYC 7B13 server: --cpu epyc-7b13 gives that); the a6000's CPU is assumed
# (Speculating Experts Tab. 3 gives its 128 GB of DRAM only).
SYSTEMS = {
    "h100": ("h100", "pcie5", "xeon-8470"),               # MELINOE Tab. 9
    "a100-40g": ("a100-40g", "pcie4", "epyc-7j13"),       # MELINOE Tab. 9, Speculating Experts Tab. 3 (A100)
    "a6000": ("a6000", "pcie4", "xeon-w5-3435x"),         # Speculating Experts Tab. 3
    "rtx4090": ("rtx4090", "pcie4", "ryzen-7950x"),       # GPU and link as MELINOE Tab. 9, a desktop host
    "rtx4080": ("rtx4080", "pcie4", "ryzen-7950x"),       # desktops people run llama.cpp MoE offload on
    "rtx2080": ("rtx2080", "pcie3", "i9-10900x"),
    "rtx2080ti": ("rtx2080ti", "pcie3", "xeon-e5-2680v4"),  # CommitMoE's PCIe Gen3 environment
    "rtx5070ti": ("rtx5070ti", "pcie5", "ryzen-9600x"),   # FlashMoE Tab. 2 desktop
    "gh200": ("gh200", "nvlink-c2c", "grace"),            # Speculating Experts Tab. 3
}


def _pick(table: dict, name: str, what: str):
    try:
        return table[name.lower().replace(" ", "")]
    except KeyError:
        raise MoesimError(f"unknown {what} '{name}' (presets: {', '.join(table)})") from None


def is_file_name(name: str) -> bool:
    """Whether a hardware name is a TOML file rather than a preset."""
    return name.endswith(".toml") or Path(name).is_file()


def get_hardware(name: str, link: str | None = None, ssd: str | None = None, cpu: str | None = None,
                 vram: float | None = None, ram: float | None = None) -> Hardware:
    """A system preset (``rtx4090``) or a TOML file; ``link`` / ``ssd`` / ``cpu`` swap in presets, ``vram`` /
    ``ram`` (GiB) replace the GPU's and the host's memory sizes."""
    if is_file_name(name):
        hw = load_hardware(Path(name))
    else:
        gpu, default_link, default_cpu = _pick(SYSTEMS, name, "hardware")
        hw = Hardware(name.lower(), GPUS[gpu], LINKS[default_link], source="preset", cpu=CPUS[default_cpu])
    if link is not None:
        hw = replace(hw, link=_pick(LINKS, link, "link"), name=f"{hw.name}+{link}")
    if ssd is not None:
        hw = replace(hw, ssd=_pick(SSDS, ssd, "ssd"))
    if cpu is not None:
        hw = replace(hw, cpu=_pick(CPUS, cpu, "cpu"), name=f"{hw.name}+{cpu}")
    if vram is not None:
        hw = replace(hw, gpu=replace(hw.gpu, hbm_gb=float(vram)))
    if ram is not None:
        if hw.cpu is None:
            raise MoesimError(f"hardware '{hw.name}' has no [cpu] section whose RAM --ram could set")
        hw = replace(hw, cpu=replace(hw.cpu, ram_gb=float(ram)))
    return hw


def load_hardware(path: Path) -> Hardware:
    """A machine from a TOML file (layout in the module docstring); errors name the file."""
    data = read_toml(path, "hardware file")
    parts = {}
    for key, cls, table in (("gpu", GPU, GPUS), ("link", Link, LINKS), ("ssd", SSD, SSDS), ("cpu", CPU, CPUS),
                            ("compute", MeasuredCompute, {})):
        value = data.get(key)
        if value is None:
            if key in ("gpu", "link"):
                raise MoesimError(f"{path}: missing [{key}] section")
            parts[key] = None
        elif isinstance(value, str):
            parts[key] = _pick(table, value, key)
        elif isinstance(value, dict):
            parts[key] = _section(path, key, cls, value)
        else:
            raise MoesimError(f"{path}: '{key}' must be a preset name or a table")
    unknown = sorted(set(data) - {"name", "gpu", "link", "ssd", "cpu", "compute"})
    if unknown:
        raise MoesimError(f"{path}: unknown section(s) {', '.join(unknown)} (known: gpu, link, ssd, cpu, compute)")
    return Hardware(str(data.get("name", path.stem)), parts["gpu"], parts["link"], parts["ssd"], source=str(path),
                    compute=parts["compute"], cpu=parts["cpu"])


# what each number of a hardware file may be; anything else would give silently wrong times
RULES = {"hbm_gbps": "positive", "tflops": "positive", "hbm_gb": "non-negative", "mem_eff": "fraction",
         "flop_eff": "fraction", "launch_us": "non-negative", "gbps": "positive", "efficiency": "fraction",
         "latency_us": "non-negative", "engines": "engines", "layer_s": "positive", "expert_s": "positive",
         "cores": "cores", "ghz": "positive", "dram_gbps": "positive", "ram_gb": "non-negative",
         "dram_eff": "fraction", "kernel_eff": "fraction", "isa": "isa"}
MAX_ENGINES = 64
MAX_CORES = 4096


def _section(path: Path, key: str, cls, values: dict):
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise MoesimError(f"{path}: [{key}] has unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")
    values = {"name": key, **values}
    try:
        obj = cls(**values)
    except TypeError as exc:
        raise MoesimError(f"{path}: [{key}] {exc}") from None
    if not isinstance(obj.name, str):
        raise MoesimError(f"{path}: [{key}] name must be a string, got {obj.name!r}")
    for name in known:
        if name != "name":
            _check_number(path, key, name, getattr(obj, name), RULES.get(name, "non-negative"))
    return obj


def _check_number(path: Path, key: str, name: str, v, rule: str) -> None:
    """One value of a hardware file against its rule (``RULES``); a one-line error naming file, table and key."""
    if rule == "isa":
        if v not in ISA_FLOP_PER_CYCLE:
            raise MoesimError(f"{path}: [{key}] isa must be one of {', '.join(ISA_FLOP_PER_CYCLE)}, got {v!r}")
        return
    number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ok = number and {"positive": lambda: v > 0, "non-negative": lambda: v >= 0, "fraction": lambda: 0 < v <= 1,
                     "engines": lambda: isinstance(v, int) and 1 <= v <= MAX_ENGINES,
                     "cores": lambda: isinstance(v, int) and 1 <= v <= MAX_CORES}[rule]()
    if not ok:
        want = {"positive": "a finite number > 0", "non-negative": "a finite number >= 0",
                "fraction": "a fraction in (0, 1]", "engines": f"a whole number of copy engines, 1..{MAX_ENGINES}",
                "cores": f"a whole number of cores, 1..{MAX_CORES}"}
        raise MoesimError(f"{path}: [{key}] {name} must be {want[rule]}, got {v!r}")


def write_hardware(hw: Hardware, path: Path) -> None:
    """Write ``hw`` as the TOML file ``load_hardware`` reads (atomically); a number ``load_hardware`` would
    refuse (a calibration that fitted a negative bandwidth) is refused here, before anything is written."""
    lines = [f"name = {json.dumps(hw.name)}"]
    for key in ("gpu", "link", "ssd", "cpu", "compute"):
        part = getattr(hw, key)
        if part is None:
            continue
        lines.append(f"\n[{key}]")
        for name, value in asdict(part).items():
            if name != "name":
                _check_number(path, key, name, value, RULES.get(name, "non-negative"))
            lines.append(f"{name} = {json.dumps(value) if isinstance(value, str) else repr(value)}")
    with atomic_output(path) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n")
