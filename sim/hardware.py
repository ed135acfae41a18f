"""Hardware presets: the GPU that computes, the link experts cross, the SSD behind host memory.

A machine is a GPU (HBM bandwidth, dense bf16 FLOP/s, the fraction of each a decode kernel
reaches, launch overhead per kernel), a host link (nominal bandwidth, the fraction a pinned copy
reaches, latency per transfer, copy engines) and optionally an SSD (read bandwidth, latency).
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
    [compute]    # measured times for one model, replacing the roofline for it (see MeasuredCompute)
    name = "olmoe-1b-7b"; layer_s = 9e-5; expert_s = 1.2e-5; expert_token_s = 2e-8

A section may instead name a preset: ``gpu = "rtx4090"``, ``link = "pcie4"``, ``ssd = "pcie5-nvme"``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from moesim.errors import MoesimError
from moesim.files import atomic_output, read_toml


@dataclass(frozen=True)
class GPU:
    name: str
    hbm_gbps: float          # GB/s
    tflops: float            # dense bf16 (fp16 where the GPU has no bf16), 1e12 FLOP/s
    hbm_gb: float = 0.0
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

    def as_dict(self) -> dict:
        return asdict(self)


GPUS = {g.name.lower().replace(" ", ""): g for g in [
    GPU("H100", 3350, 989, 80),                   # SXM5, HBM3
    GPU("A100-40G", 1555, 312, 40),
    GPU("A6000", 768, 154.8, 48),                 # RTX A6000, GDDR6
    GPU("RTX4090", 1008, 165.2, 24),
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
# machines as the papers ran them: GPU and its host link
SYSTEMS = {
    "h100": ("h100", "pcie5"),                    # MELINOE Tab. 9
    "a100-40g": ("a100-40g", "pcie4"),            # MELINOE Tab. 9, Speculating Experts Tab. 3 (A100)
    "a6000": ("a6000", "pcie4"),                  # Speculating Experts Tab. 3
    "rtx4090": ("rtx4090", "pcie4"),              # MELINOE Tab. 9
    "rtx2080ti": ("rtx2080ti", "pcie3"),          # CommitMoE's PCIe Gen3 environment
    "rtx5070ti": ("rtx5070ti", "pcie5"),          # FlashMoE Tab. 2 desktop
    "gh200": ("gh200", "nvlink-c2c"),             # Speculating Experts Tab. 3
}


def _pick(table: dict, name: str, what: str):
    try:
        return table[name.lower().replace(" ", "")]
    except KeyError:
        raise MoesimError(f"unknown {what} '{name}' (presets: {', '.join(table)})") from None


def is_file_name(name: str) -> bool:
    """Whether a hardware name is a TOML file rather than a preset."""
    return name.endswith(".toml") or Path(name).is_file()


def get_hardware(name: str, link: str | None = None, ssd: str | None = None) -> Hardware:
    """A system preset (``rtx4090``) or a TOML file; ``link`` / ``ssd`` swap in presets."""
    if is_file_name(name):
        hw = load_hardware(Path(name))
    else:
        gpu, default_link = _pick(SYSTEMS, name, "hardware")
        hw = Hardware(name.lower(), GPUS[gpu], LINKS[default_link], source="preset")
    if link is not None:
        hw = replace(hw, link=_pick(LINKS, link, "link"), name=f"{hw.name}+{link}")
    if ssd is not None:
        hw = replace(hw, ssd=_pick(SSDS, ssd, "ssd"))
    return hw


def load_hardware(path: Path) -> Hardware:
    """A machine from a TOML file (layout in the module docstring); errors name the file."""
    data = read_toml(path, "hardware file")
    parts = {}
    for key, cls, table in (("gpu", GPU, GPUS), ("link", Link, LINKS), ("ssd", SSD, SSDS), ("compute", MeasuredCompute, {})):
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
    return Hardware(str(data.get("name", path.stem)), parts["gpu"], parts["link"], parts["ssd"], source=str(path),
                    compute=parts["compute"])


# what each number of a hardware file may be; anything else would give silently wrong times
RULES = {"hbm_gbps": "positive", "tflops": "positive", "hbm_gb": "non-negative", "mem_eff": "fraction",
         "flop_eff": "fraction", "launch_us": "non-negative", "gbps": "positive", "efficiency": "fraction",
         "latency_us": "non-negative", "engines": "engines", "layer_s": "positive", "expert_s": "positive"}
MAX_ENGINES = 64


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
    """One number of a hardware file against its rule (``RULES``); a one-line error naming file, table and key."""
    number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ok = number and {"positive": lambda: v > 0, "non-negative": lambda: v >= 0, "fraction": lambda: 0 < v <= 1,
                     "engines": lambda: isinstance(v, int) and 1 <= v <= MAX_ENGINES}[rule]()
    if not ok:
        want = {"positive": "a finite number > 0", "non-negative": "a finite number >= 0",
                "fraction": "a fraction in (0, 1]", "engines": f"a whole number of copy engines, 1..{MAX_ENGINES}"}
        raise MoesimError(f"{path}: [{key}] {name} must be {want[rule]}, got {v!r}")


def write_hardware(hw: Hardware, path: Path) -> None:
    """Write ``hw`` as the TOML file ``load_hardware`` reads (atomically); a number ``load_hardware`` would
    refuse (a calibration that fitted a negative bandwidth) is refused here, before anything is written."""
    lines = [f"name = {json.dumps(hw.name)}"]
    for key in ("gpu", "link", "ssd", "compute"):
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
