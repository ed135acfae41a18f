"""moesim: a trace-driven cache and prefetch simulator for Mixture-of-Experts inference."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("moesim")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"


class MoesimError(Exception):
    """Bad input or usage. The command line prints it as one line and exits non-zero."""
