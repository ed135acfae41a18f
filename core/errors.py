"""The one error type of bad input or usage, and how it reads on one line."""

from __future__ import annotations


class MoesimError(Exception):
    """Bad input or usage. The command line prints it as one line and exits non-zero."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type when empty), for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
