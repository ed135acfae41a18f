"""The one error type of bad input or usage, and how it reads on one line."""

from __future__ import annotations

from contextvars import ContextVar


class MoesimError(Exception):
    """Bad input or usage. The command line prints it as one line and exits non-zero."""


class MoesimWarning(UserWarning):
    """Input that is most likely a slip but may be meant (a hardware number past every real part's: a size in MiB
    where GiB was asked, ``moesim.sim.hardware.PLAUSIBLE``). Given through Python's ``warnings``, each once where it
    is the same; the command line prints it as one line on stderr, and the run goes on."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type when empty), for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# who reads the messages: "python" (the API, a notebook) or "cli" (``moesim.cli.app.main`` says so)
READER: ContextVar[str] = ContextVar("moesim_reader", default="python")


# the option a setting was typed as, where a command takes it under a second name (``plan --context`` is --prompt)
TYPED_AS: ContextVar[dict] = ContextVar("moesim_typed_as", default={})


def option(name: str, value=None) -> str:
    """A setting as its reader gives it: ``--name value`` on the command line (the name typed), ``name='value'`` in
    Python; with no value, the bare name (``--rate``, ``rate``)."""
    if READER.get() == "cli":
        flag = TYPED_AS.get().get(name.replace("-", "_"), f"--{name.replace('_', '-')}")
        return flag + ("" if value is None else f" {value}")
    key = name.replace("-", "_")
    return key if value is None else f"{key}={value!r}"


def switch(name: str) -> str:
    """A yes/no setting turned on: ``--force`` on the command line, ``force=True`` in Python."""
    return f"--{name.replace('_', '-')}" if READER.get() == "cli" else f"{name.replace('-', '_')}=True"


def unwind(signum, frame):
    """A signal handler (SIGTERM: ``kill``, ``timeout``, a scheduler's stop) that raises ``SystemExit(128 + signum)``
    where the signal lands, so that every ``finally`` and ``with`` on the way out runs: scratch folders and partly
    written outputs are removed, as they are after Ctrl-C. The default action ends the process on the spot."""
    raise SystemExit(128 + signum)
