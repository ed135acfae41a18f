"""What ``--hardware local`` measured, kept per machine: every later run answers from the same numbers.

A DRAM read or a clock measured twice gives two answers (12.3 GB/s, then 11.4 on a busy VM), and a plan would
change with it. So the first ``--hardware local`` of a machine measures, and the result is kept in
``$MOESIM_CACHE`` (else ``$XDG_CACHE_HOME/moesim``, else ``~/.cache/moesim``), ``local-machine.json``, under the
machine's identity: ``/etc/machine-id`` (the hostname where there is none), the CPU model, its logical CPUs and the
RAM. A machine whose identity changed (a VM resized, another host sharing the home folder) is measured again;
``moesim hardware --show local --remeasure`` measures again on purpose. A kept file that cannot be read, or holds a
value no measurement gives (not a finite positive rate), is measured over, never used.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import time
from pathlib import Path
from typing import Callable, NamedTuple

from moesim.errors import MoesimError
from moesim.files import atomic_output
from moesim.host import MEMINFO

FILE_NAME = "local-machine.json"
MACHINE_ID = "/etc/machine-id"


class Kept(NamedTuple):
    dram_gbps: float          # the streaming read of every core, GB/s (the whole machine's)
    ghz: float | None         # the clock under load (None: not measurable here, cpuinfo's is taken)
    measured_at: str          # when, UTC


def folder() -> Path:
    """Where kept measurements live."""
    if os.environ.get("MOESIM_CACHE"):
        return Path(os.environ["MOESIM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "moesim"


def identity(read: Callable[[str], str | None]) -> str:
    """This machine as the kept numbers are filed: its machine id (or hostname), CPU model lines, logical CPUs and
    total RAM, hashed."""
    cpuinfo = read("/proc/cpuinfo") or ""
    models = sorted({line for line in cpuinfo.splitlines() if line.lower().startswith(("model name", "cpu part"))})
    ram = next((line for line in (read(MEMINFO) or "").splitlines() if line.startswith("MemTotal")), "")
    parts = [(read(MACHINE_ID) or socket.gethostname()).strip(), *models, str(cpuinfo.count("processor")), ram]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _rate(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def load(path: Path, key: str) -> Kept | None:
    """The measurement kept for machine ``key`` in ``path``; None where there is none or it cannot be trusted."""
    try:
        entry = json.loads(path.read_text()).get(key)
    except (OSError, ValueError, AttributeError, UnicodeDecodeError):
        return None
    if not isinstance(entry, dict) or not _rate(entry.get("dram_gbps")):
        return None
    ghz = entry.get("ghz")
    if ghz is not None and not _rate(ghz):
        return None
    when = entry.get("measured_at")
    return Kept(float(entry["dram_gbps"]), None if ghz is None else float(ghz), when if isinstance(when, str) else "")


def keep(path: Path, key: str, dram_gbps: float, ghz: float | None) -> Kept | None:
    """File a fresh measurement under ``key`` (other machines' entries stay; a clock that is not a rate is kept as
    none); None where the folder cannot be written (the numbers are then used for this process only)."""
    kept = Kept(float(dram_gbps), float(ghz) if _rate(ghz) else None, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    try:
        entries = json.loads(path.read_text())
        entries = entries if isinstance(entries, dict) else {}
    except (OSError, ValueError, UnicodeDecodeError):
        entries = {}
    entries[key] = kept._asdict()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(path) as tmp:
            tmp.write_text(json.dumps(entries, indent=1) + "\n")
    except (OSError, MoesimError):  # a read-only home, a full disk: measuring again next time is the only cost
        return None
    return kept
