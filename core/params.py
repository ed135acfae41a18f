"""A plug-in's parameter, declared once by the policy, prefetcher or strategy that owns it.

A ``Param`` says what its values are (``kind``), its default, its bounds or named choices, whether it takes
``"auto"`` and its help; ``check`` is the one place a value given for it is judged. Its kind is declared, never
read off its default, so a count is not checked as a seed. Two owners may share a name (``--seed`` for random and
lecar) only by declaring it alike (one ``Param``, shared); ``moesim.sim.config.declared_params`` refuses two that
differ, or one that takes another section's or a setting's name, as the package loads.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from pathlib import Path

from moesim.errors import MoesimError

AUTO = "auto"
INT_MOST = 2 ** 31 - 1  # the most a count (slots, tokens, requests, threads) may be: past it the arrays' int64 sums
SEED_MOST = 2 ** 63 - 1  # overflow (a context of 2^64 tokens raised a traceback; one near 2^63 gave wrong times)
# kind -> what the command line parses its text to
KINDS = {"seed": int, "count": int, "number": float, "choice": str, "file": str, "trace": str}


@dataclass(frozen=True)
class Param:
    """``kind``: ``seed`` (a whole number numpy and numba both take), ``count`` (a whole number of things, here
    layers), ``number`` (finite, within ``bounds`` where given), ``choice`` (one of ``choices``), ``file`` (a path
    read when the run starts) or ``trace`` (a file that is a trace, loaded when the run starts); ``auto``: it may also
    be ``"auto"``, resolved from memory when a run starts (``moesim.sim.memory``)."""

    default: object
    kind: str
    help: str
    bounds: tuple[float, float] | None = None
    choices: tuple[str, ...] = ()
    auto: bool = False

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
        what it must be (its caller names the parameter)."""
        if self.auto and value == AUTO:
            return value
        if self.names_file:  # (a trace or model in memory is written to a file first: the setting names one)
            what, ok = "a file's path", isinstance(value, (str, Path)) and bool(str(value))
            value = str(value) if ok else value
        elif self.kind == "choice":
            what, ok = f"one of {', '.join(self.choices)}", value in self.choices
        elif self.kind == "number":
            what = "a finite number"
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            value = float(value) if ok else value
        else:  # numpy's generators take no seed below 0, numba's wrap one past 2^64 to another's
            most = SEED_MOST if self.kind == "seed" else INT_MOST
            what = f"{'auto or an integer' if self.auto else 'a whole number'} from 0 to {most:,}"
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and 0 <= value <= most
            value = int(value) if ok else value
        if not ok:
            raise MoesimError(f"must be {what}, got {shown(value)}")
        if self.bounds is not None and not self.bounds[0] <= value <= self.bounds[1]:
            raise MoesimError(f"must be in [{self.bounds[0]}, {self.bounds[1]}], got {value!r}")
        return value


def shown(value) -> str:
    """A value as an error names it: its repr where that is short, else its type (a Trace's repr runs to pages)."""
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}"
