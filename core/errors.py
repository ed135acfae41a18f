"""The one error type of bad input or usage, and how it reads on one line."""

from __future__ import annotations

import numbers
import re
from contextvars import ContextVar


class MoesimError(Exception):
    """Bad input or usage. The command line prints it as one line and exits non-zero. Its message names settings
    with ``named``; ``str`` renders them for whoever reads it (``READER``)."""

    def __str__(self) -> str:
        return render(super().__str__())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class MoesimWarning(UserWarning):
    """Input that is most likely a slip but may be meant (a hardware number past every real part's: a size in MiB
    where GiB was asked, ``moesim.sim.hardware.PLAUSIBLE``). Given through Python's ``warnings``, each once where it
    is the same; the command line prints it as one line on stderr, and the run goes on."""

    def __str__(self) -> str:
        return render(super().__str__())


def argument(value, name: str, what: str, ok: bool):
    """A function's argument (or a setting) ``name``: ``value`` where ``ok`` (it is what is taken), else the one-line
    refusal that it must be ``what``, with what it got (a string's or a number's value too)."""
    if ok:
        return value
    shown = f" {value!r}" if isinstance(value, (str, bytes, numbers.Number)) else ""
    raise MoesimError(f"{named(name)} must be {what}, got {type(value).__name__}{shown}")


def whole(value) -> bool:
    """A whole number (a NumPy one too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type when empty), for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# who reads the messages: "python" (the API, a notebook) or "cli" (``moesim.cli.app.main`` says so)
READER: ContextVar[str] = ContextVar("moesim_reader", default="python")


# the option a setting was typed as, where a command takes it under a second name (``plan --context`` is --prompt)
TYPED_AS: ContextVar[dict] = ContextVar("moesim_typed_as", default={})


# a setting named in a message: OPEN name [SEP value as text SEP value's repr] CLOSE (characters no message holds)
OPEN, SEP, CLOSE = "\x1e", "\x1f", "\x1d"
NAMED = re.compile(f"{OPEN}([^{SEP}{CLOSE}]*)(?:{SEP}([^{SEP}{CLOSE}]*){SEP}([^{CLOSE}]*))?{CLOSE}")


def named(setting: str, value=None) -> str:
    """A setting (its flat name), with the value it was given or one to give, as a message names it; the message's
    reader renders it (``render``): no module but this one knows how a setting is typed where."""
    return f"{OPEN}{setting}{CLOSE}" if value is None else f"{OPEN}{setting}{SEP}{value}{SEP}{value!r}{CLOSE}"


def render(text: str, reader: str | None = None) -> str:
    """``text`` with every setting ``named`` in it as ``reader`` (default: ``READER``) types it: the command line
    ``--name value`` (the option as typed, ``TYPED_AS``; a switch bare, ``--force`` or ``--no-name``), Python
    ``name=value`` (its repr), a configuration file ``name value`` (the key it holds); a bare name without a value
    (``--rate``, ``rate``)."""
    if OPEN not in text:
        return text
    reader = reader or READER.get()

    def one(found: re.Match) -> str:
        setting, value, shown = found.groups()
        key = setting.replace("-", "_")
        if reader != "cli":
            return key if value is None else f"{key}={shown}" if reader == "python" else f"{key} {value}"
        flag = TYPED_AS.get().get(key, f"--{key.replace('_', '-')}")
        if shown in ("True", "False"):  # a switch: --force, --no-chunked-prefill
            return flag if shown == "True" else f"--no-{flag.removeprefix('--')}"
        return flag if value is None else f"{flag} {value}"

    return NAMED.sub(one, text)


def leading(text: str) -> tuple[str, str | None, int]:
    """The setting a message opens with (``named``; "" if none), its value as text, and where that mention ends: what
    the message is about."""
    found = NAMED.match(text)
    return ("", None, 0) if found is None else (found.group(1).replace("-", "_"), found.group(2), found.end())


def unwind(signum, frame):
    """A signal handler (SIGTERM: ``kill``, ``timeout``, a scheduler's stop) that raises ``SystemExit(128 + signum)``
    where the signal lands, so that every ``finally`` and ``with`` on the way out runs: scratch folders and partly
    written outputs are removed, as they are after Ctrl-C. The default action ends the process on the spot."""
    raise SystemExit(128 + signum)
