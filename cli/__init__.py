"""moesim: a trace-driven cache and prefetch simulator for Mixture-of-Experts inference."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("moesim")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"


class MoesimError(Exception):
    """Bad input or usage. The command line prints it as one line and exits non-zero."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type when empty), for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
