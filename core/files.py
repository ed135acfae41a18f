"""Output files appear whole or not at all: write beside the target, then rename."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from moesim.errors import MoesimError, first_line, named

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib


def check_output(path: str | Path, what: str, *, force: bool = True, inputs: tuple = (), suffixes: tuple = ()) -> Path:
    """Refuse, before any work, an output that cannot be written: its folder missing, not a folder or not
    writable, the output one of the command's own ``inputs``, an existing file when not ``force``, or with
    ``suffixes`` a name ending in none of them (a format the writer lacks; a TOML written over a trace by a slip
    of the argument)."""
    path = _as_path(path, what)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise MoesimError(f"{path}: is a folder; give the {what} a file name")
    if not parent.exists():
        raise MoesimError(f"{path}: no such folder {parent} for the {what}")
    if not parent.is_dir():
        raise MoesimError(f"{path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise MoesimError(f"{path}: cannot write in {parent} (permission denied)")
    for source in inputs:
        if source is not None and Path(source).exists() and path.exists() and path.samefile(source):
            raise MoesimError(f"{path}: is also an input of this command; write the {what} elsewhere")
    if suffixes and path.suffix.lower() not in suffixes:
        raise MoesimError(f"{path}: unknown {what} format '{path.suffix}' (use {', '.join(suffixes)})")
    if path.exists() and not force:
        raise MoesimError(f"{path}: exists; pass {named('force', True)} to replace the {what}")
    return path


def output_folder(path: str | Path, what: str) -> Path:
    """Make the folder a command writes its files into, before any work; a file there, or a folder the system does
    not let it make or write in, is a one-line error naming it."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise MoesimError(f"{path}: is a file, not a folder; give the {what} a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MoesimError(f"{path}: cannot be made ({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise MoesimError(f"{path}: cannot write in it (permission denied)")
    return path


@contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; it replaces `path` if the block succeeds, else vanishes. A missing
    folder, a temporary file or rename the system refuses (a read-only or virtual file system such as /proc, a full disk) is
    a one-line error naming `path`."""
    path = Path(path)
    if not path.parent.is_dir():  # not made: a slip in a name would leave folders behind (``check_output``)
        raise MoesimError(f"{path}: {path.parent} is a file, not a folder" if path.parent.exists()
                          else f"{path}: no such folder {path.parent}")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    except OSError as exc:
        raise MoesimError(f"{path}: cannot be written ({exc.strerror or exc})") from None
    try:
        os.close(fd)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the result should look like any new file
        yield Path(tmp)
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise MoesimError(f"{path}: cannot be written ({exc.strerror or exc})") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def read_toml(path: str | Path, what: str) -> dict:
    """A TOML file's tables; a missing or malformed file is a one-line error naming it."""
    path = _as_path(path, what)
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise MoesimError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise MoesimError(f"{path}: a folder, not a {what}") from None
    except PermissionError:
        raise MoesimError(f"{path}: not readable (permission denied)") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MoesimError(f"{path}: not valid TOML ({exc})") from None


def _as_path(path, what: str) -> Path:
    """``path`` as a Path; anything but a str or a path object (a notebook's None) is a one-line error."""
    if not isinstance(path, (str, os.PathLike)):
        raise MoesimError(f"the {what}'s path must be a str or Path, got {type(path).__name__}")
    return Path(path)


def read_arrays(path: str | Path, what: str, writer: str, needs: tuple) -> dict:
    """The arrays of a model file in npz form (plain arrays: never unpickled), with every key of ``needs``; else one
    line naming ``path``, the ``what`` it should be and the command that writes one (``writer``)."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as f:
            if not hasattr(f, "files"):
                raise ValueError("a single array, not an npz archive")
            arrays = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise MoesimError(f"{path}: no such {what} file") from None
    except Exception as exc:  # numpy and zipfile raise many kinds for a damaged file
        # numpy takes a file it does not know for a pickle and suggests unpickling it: never
        why = f"an npz archive of arrays, as '{writer}' writes" if "pickle" in str(exc) else first_line(exc)
        raise MoesimError(f"{path}: not a readable {what} file ({why})") from None
    missing = [k for k in needs if k not in arrays]
    if missing:
        raise MoesimError(f"{path}: holds no {', '.join(missing)}, which '{writer}' writes: not its model file")
    return arrays
