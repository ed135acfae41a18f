"""Scratch folders for expert files, named after the process that owns them, so a replay or
calibration killed with SIGKILL (which cannot clean up) leaves its folder only until the next one
starts in the same place: that one removes the folders of processes that no longer run."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
from pathlib import Path

from moesim.errors import MoesimError, named

PATTERN = re.compile(r"^moesim-(replay|calibrate|llamacpp)-(\d+)-")


def work_folder(workdir: str | Path | None) -> Path:
    """The folder scratch files go in: ``--workdir``, which must be an existing writable folder, or the system's
    temporary folder."""
    if workdir is None:
        return Path(tempfile.gettempdir())
    folder = Path(workdir)
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise MoesimError(f"{named('workdir', str(folder))}: not a writable folder")
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


@contextlib.contextmanager
def kills_held():
    """SIGTERM and SIGINT held back while a scratch folder is made and handed to its owner, then delivered: a kill
    landing between the two would leave the folder behind (its owner's clean-up not yet holding it). Python runs signal
    handlers in the main thread only: in another, nothing is held (nor can a handler there be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held, before = [], {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        before[sig] = signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        if held:
            os.kill(os.getpid(), held[0])


@contextlib.contextmanager
def scratch(where: Path, kind: str):
    """A scratch folder (``scratch_folder``) for the ``with`` block, removed after it however the block ends: a kill
    too, where SIGTERM unwinds (the command line's ``moesim.errors.unwind``; ``kills_held``). Without such a handler a
    kill ends the process on the spot, and the next scratch folder made there removes this one."""
    folder = None
    try:
        with kills_held():
            folder = scratch_folder(where, kind)
        yield folder
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
