"""Scratch folders for expert files, named after the process that owns them, so a replay or
calibration killed with SIGKILL (which cannot clean up) leaves its folder only until the next one
starts in the same place: that one removes the folders of processes that no longer run."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from moesim.errors import MoesimError, option

PATTERN = re.compile(r"^moesim-(replay|calibrate|llamacpp)-(\d+)-")


def work_folder(workdir: str | Path | None) -> Path:
    """The folder scratch files go in: ``--workdir``, which must be an existing writable folder, or the system's
    temporary folder."""
    if workdir is None:
        return Path(tempfile.gettempdir())
    folder = Path(workdir)
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise MoesimError(f"{option('workdir', str(folder))}: not a writable folder")
    return folder


def scratch_folder(folder: Path, kind: str) -> Path:
    """A new folder ``moesim-<kind>-<pid>-*`` in ``folder``, after removing the stale ones there."""
    for path in folder.glob("moesim-*-*-*"):
        match = PATTERN.match(path.name)
        if match and path.is_dir() and not _alive(int(match.group(2))):
            shutil.rmtree(path, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"moesim-{kind}-{os.getpid()}-", dir=folder))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
