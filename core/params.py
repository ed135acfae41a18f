"""A setting's declaration: a ``Config`` section's field or a plug-in's parameter, declared once by what owns it.

A ``Param`` says what its values are (``kind``), its default, its unit, its bounds or named choices, whether it takes
``"auto"`` or may be left out (None), and its help; ``check`` is the one place a value given for it is judged, and a
refusal is a ``SettingError`` that names the setting: the command line gives its option as typed (``--batch``), the
API and a configuration file its section and key (``[workload] batch``). Its kind is declared, never read off its
default, so a count is not checked as a seed. Two plug-ins may share a name (``--seed`` for random and lecar) only by
declaring it alike (one ``Param``, shared); ``moesim.sim.config.declared_params`` refuses two that differ, or one that
takes a section field's name, as the package loads.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from moesim.errors import MoesimError

AUTO = "auto"
INT_MOST = 2 ** 31 - 1  # the most a count (slots, tokens, requests, threads) may be: past it the arrays' int64 sums
SEED_MOST = 2 ** 63 - 1  # overflow (a context of 2^64 tokens raised a traceback; one near 2^63 gave wrong times)
# kind -> what the command line parses its text to
KINDS = {"seed": int, "count": int, "number": float, "size": float, "flag": bool, "name": str, "choice": str,
         "file": str, "trace": str, "shares": str}
WHOLE = {"seed": (0, SEED_MOST), "count": (0, INT_MOST)}  # a whole number's bounds where none is declared


@dataclass(frozen=True)
class Param:
    """``kind``: ``seed`` (a whole number numpy and numba both take), ``count`` (a whole number of things: slots,
    tokens, layers), ``number`` (finite), ``size`` (finite and > 0: GiB, requests/s, seconds), ``flag`` (true or
    false), ``name`` (a non-empty string), ``choice`` (one of ``choices``), ``file`` (a path read when the run starts),
    ``trace`` (a file that is a trace, loaded when the run starts) or ``shares`` (finite numbers >= 0, not all 0,
    one for each of several things, as a list or as the command line's comma-separated text: ``3,1``);
    ``choices``: the names, or a function that gives them where a registry grows as the program runs (a test's toy
    strategy or engine); ``bounds``: the least and
    most a number or a count takes (a size is above 0 whatever it says: only its most is read); ``auto``: it may also be ``"auto"``, resolved from memory when a
    run starts (``moesim.sim.memory``); ``optional``: it may be None (left out)."""

    default: object
    kind: str
    help: str
    bounds: tuple[float, float] | None = None
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()
    auto: bool = False
    unit: str = ""
    optional: bool = False

    def __post_init__(self):
        if self.kind not in KINDS or (self.kind == "choice") != bool(self.choices) or not self.help:
            raise MoesimError(f"a parameter must be one of the kinds {', '.join(KINDS)} with its help (and its choices "
                              f"when it is a choice), got {self!r}")
        if self.default is not None:
            self.check(self.default)

    @property
    def parses(self) -> type:
        """The type a value given as text parses to."""
        return KINDS[self.kind]

    @property
    def names_file(self) -> bool:
        return self.kind in ("file", "trace")

    def check(self, value):
        """``value`` as the run takes it (numpy's numbers become Python's, a path a str), or a ``MoesimError`` saying
        what it must be (its caller names the setting: ``SettingError``)."""
        if (self.auto and value == AUTO) or (self.optional and value is None):
            return value
        wrong, value = self._judged(value)
        if wrong:
            raise MoesimError(f"must be {wrong}")
        return value

    def _judged(self, value) -> tuple[str, object]:
        """What is wrong with ``value`` ("" where nothing is), and ``value`` as the run takes it."""
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if self.names_file:  # (a trace or model in memory is written to a file first: the setting names one)
            ok = isinstance(value, (str, Path)) and bool(str(value))
            return ("", str(value)) if ok else (f"a file's path, got {shown(value)}", value)
        if self.kind in ("choice", "flag", "name"):
            names = self.choices() if callable(self.choices) else self.choices
            what, ok = {"choice": (f"one of {', '.join(names)}", value in names),
                        "flag": ("true or false", isinstance(value, bool)),
                        "name": ("a name", isinstance(value, str) and bool(value))}[self.kind]
            return "" if ok else f"{what}, got {shown(value)}", value
        if self.kind == "size":  # above 0, and at most its bound's top where it has one
            most = self.bounds[1] if self.bounds else math.inf
            ok = number and math.isfinite(value) and 0 < value <= most
            what = "a finite number > 0" + (f" and at most {most:g}" if math.isfinite(most) else "")
            return ("", float(value)) if ok else (what + (f" ({self.unit})" if self.unit else "") +
                                                   f", got {shown(value)}", value)
        if self.kind == "shares":
            return _shares(value)
        if self.kind == "number":
            if not (number and math.isfinite(value)):
                return f"a finite number, got {shown(value)}", value
            low, most = self.bounds or (-math.inf, math.inf)
            return "" if low <= value <= most else f"in [{low}, {most}], got {value!r}", float(value)
        low, most = self.bounds or WHOLE[self.kind]  # numpy's generators take no seed below 0, numba's wrap one past
        if not (number and isinstance(value, numbers.Integral)):  # 2^64 to another's
            return f"{'auto or ' if self.auto else ''}a whole number from {low} to {most:,}, got {shown(value)}", value
        return ("" if low <= value <= most else
                f"at least {low}, got {value:,}" if value < low else f"at most {most:,}, got {value:,}"), int(value)


def _shares(value) -> tuple[str, object]:
    """What is wrong with ``value`` as shares ("" where nothing is), and the shares as a tuple of floats."""
    items = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) or \
        getattr(value, "ndim", None) == 1 else None
    try:  # text, or numbers (not a bool, which float() would take)
        shares = tuple(float(x) for x in items if isinstance(x, str) or not isinstance(x, bool)) \
            if items is not None else ()
    except (TypeError, ValueError):
        shares = ()
    ok = bool(shares) and len(shares) == len(items) and all(math.isfinite(x) and x >= 0 for x in shares) \
        and any(shares)
    return ("", shares) if ok else (f"numbers >= 0, not all 0 (3,1), got {shown(value)}", value)


class SettingError(MoesimError):
    """A value refused for the setting ``setting`` (its flat name): ``problem`` says what it must be; ``where`` is
    the section (``[cache]``) and, for a plug-in's parameter, its owner (``[cache] policy gamma's``), and ``key`` the
    name a TOML file gives it there where that is not the flat name (``[prefetch] prefetcher``). The API shows
    ``[cache] capacity must be ...``; the command line, the option as typed (``--capacity must be ...``)."""

    def __init__(self, setting: str, problem: str, where: str = "", key: str | None = None):
        self.setting, self.problem = setting, problem
        super().__init__(f"{where} {key or setting} {problem}".lstrip())


def shown(value) -> str:
    """A value as an error names it: its repr where that is short, else its type (a Trace's repr runs to pages)."""
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}"
