"""Terminal output shared by the commands: rich tables on stdout, plain one-line errors on stderr."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console()


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
