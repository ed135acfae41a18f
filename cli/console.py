"""Terminal output shared by the commands: rich tables on stdout, plain one-line errors on stderr."""

from __future__ import annotations

import json
import logging
import math
import re
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console(markup=False)  # nothing moesim prints is markup: names and paths keep their [brackets]


def progress_bar(*columns):
    """A rich progress bar of ``columns`` on the console, gone when done; off a terminal, none (it drew nothing there
    and left an empty line on stdout)."""
    from rich.progress import Progress

    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)

# what the command is doing, on one status line: the task a command names (``working``) or, while it lasts, what is
# being compiled (numba's events in this process; the simulator's log records from worker processes)
_activity: dict = {"task": None, "compiling": None, "workers": None, "live": None}
_lock = threading.RLock()


def _show() -> None:
    """The status line as ``_activity`` says; never an error (the work goes on without a status line where the
    terminal cannot show one, e.g. inside another live display of an older rich)."""
    with _lock:
        # a compilation here says more than the workers' (it is what runs now); either, more than the task (why it
        # waits)
        text = _activity["compiling"] or _activity["workers"] or _activity["task"]
        live = _activity["live"]
        try:
            if text and live is None:
                live = console.status(text)
                live.start()
                _activity["live"] = live
            elif text:
                live.update(text)
            elif live is not None:
                _activity["live"] = None
                live.stop()
        except Exception:  # noqa: BLE001 - a status line must not stop the work it describes
            pass


def _set(key: str, text: str | None) -> None:
    with _lock:
        _activity[key] = text
        _show()


@contextmanager
def working(message: str):
    """A status line saying ``message`` while the block runs (and what is compiled meanwhile)."""
    _set("task", message)
    try:
        yield
    finally:
        _set("task", None)


class _Compiles(logging.Handler):
    """The simulator's notes on compilation in worker processes (``extra={"activity": text or None}``)."""

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "activity"):
            _set("workers", record.activity)


def watch_compiles() -> None:
    """Show every compilation on the status line, from its start to its end: a stretch of a first run that
    would otherwise be silent. Registers once per process."""
    from numba.core import event

    from moesim.sim.engine import COMPILE_NOTE

    with _lock:
        if _activity.get("watching"):
            return
        _activity["watching"] = True
    depth = threading.local()

    class Notice(event.Listener):
        def on_start(self, ev):
            depth.n = getattr(depth, "n", 0) + 1
            if depth.n == 1:
                fn = ev.data["dispatcher"].py_func  # a bound loop's name ends in its sources' digest
                name = f"{fn.__module__.rsplit('.', 1)[-1]}.{re.sub(r'_[0-9a-f]{12}$', '', fn.__name__)}"
                _set("compiling", f"compiling {name} for this CPU ({COMPILE_NOTE})")

        def on_end(self, ev):
            depth.n = getattr(depth, "n", 1) - 1
            if depth.n == 0:
                _set("compiling", None)

    event.register("numba:compile", Notice())
    logger = logging.getLogger("moesim")
    logger.addHandler(_Compiles())
    logger.setLevel(logging.INFO)


def table(title: str, columns: list[str], rows: list[list]) -> None:
    """A table that never cuts a value short or breaks it across lines: each column is exactly as wide as
    its widest value or header word (headers wrap at spaces), so a part is 1 + Σ (width + 3) characters;
    a table wider than the terminal is printed in parts, each with the first column again."""
    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max([len(r[i]) for r in cells] + [max(map(len, name.split()), default=1)])
              for i, name in enumerate(columns)]

    def build(keep: list[int], titled: bool) -> Table:
        out = Table(title=title if titled else None, title_justify="left", header_style="bold")
        for i in keep:
            out.add_column(columns[i], justify="left" if i == 0 else "right", width=widths[i], overflow="fold")
        for row in cells:
            out.add_row(*(row[i] for i in keep))
        return out

    part, parts = [0], []
    for i in range(1, len(columns)):
        if len(part) > 1 and 1 + sum(widths[j] + 3 for j in part + [i]) > console.width:
            parts.append(part)
            part = [0]
        part.append(i)
    parts.append(part)
    for n, keep in enumerate(parts):
        console.print(build(keep, n == 0))


def fmt(value) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def seconds_text(seconds: float) -> str:
    """A duration in the unit a person reads it in, to 4 significant digits: 87.17 ms, 10.66 s, 450 µs."""
    if math.isnan(seconds):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds * 1e6:.4g} µs"


def slots_text(capacity) -> str:
    """A capacity as a table shows it: the number, or a per-layer list's total and range."""
    if isinstance(capacity, tuple):
        return f"{sum(capacity)} ({min(capacity)}-{max(capacity)}/layer)"
    return str(capacity)


def emit_json(payload) -> None:
    """JSON on stdout with nothing else on it, so it pipes into jq; NaN and infinities are null (JSON has
    no such numbers, and jq and most parsers refuse them)."""
    sys.stdout.write(json.dumps(_json_ready(payload), indent=2, allow_nan=False) + "\n")


def warn(message: str) -> None:
    print(message, file=sys.stderr)


def _json_ready(value):
    """``value`` with numpy arrays and scalars as Python ones, and non-finite floats as None."""
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if hasattr(value, "tolist"):
        return _json_ready(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def with_interval(value: float, low: float | None, high: float | None) -> str:
    """A prediction and, where it has one, its 80% interval: ``35.1 (29-41)`` (two digits, no exponent)."""
    short = lambda x: f"{x:.0f}" if x >= 10 else f"{x:.2g}"  # noqa: E731
    mid = f"{value:.3g}" if value < 1000 else f"{value:.0f}"
    return mid if low is None else f"{mid} ({short(low)}-{short(high)})"
