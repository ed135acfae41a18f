"""What this host has: its /proc/meminfo, the RAM free now, which commands check before they allocate, and the CPUs
this process may run on."""

from __future__ import annotations

import os
from pathlib import Path

from moesim.errors import MoesimError

MEMINFO = "/proc/meminfo"


def parse_meminfo(text: str) -> dict:
    """/proc/meminfo's kB fields in bytes (``{"MemTotal": ..., "MemAvailable": ...}``); a MoesimError where it
    has no MemTotal."""
    fields = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit() and parts[0].isascii():
            fields.setdefault(key.strip(), int(parts[0]) * 1024)
    if not fields.get("MemTotal"):
        raise MoesimError("/proc/meminfo has no MemTotal line")
    return fields


def available_ram() -> int | None:
    """Bytes of RAM a new allocation can have without swapping: ``MemAvailable`` (free pages and the page cache
    the kernel drops on demand; ``MemFree`` alone falls to little once files have been written), else the free
    pages; None where neither can be read."""
    try:
        available = parse_meminfo(Path(MEMINFO).read_text(errors="replace")).get("MemAvailable")
    except (OSError, ValueError, MoesimError):
        available = None
    if available:
        return available
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError):
        return None


def usable_cpus() -> int:
    """The logical CPUs this process may run on (its affinity, which a container or ``taskset`` narrows), else all."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
