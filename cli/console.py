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
    """A table that never cuts a value short or breaks it across lines: each column is as wide as its
    widest value (headers wrap at spaces); a table wider than the terminal is printed in parts, each
    with the first column again."""
    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max([len(r[i]) for r in cells] + [max(map(len, name.split()), default=1)])
              for i, name in enumerate(columns)]
    groups, group, used = [], [], widths[0] + 4
    for i in range(1, len(columns)):
        if group and used + widths[i] + 3 > console.width:
            groups.append(group)
            group, used = [], widths[0] + 4
        group.append(i)
        used += widths[i] + 3
    groups.append(group)
    for n, part in enumerate(groups):
        keep = [0, *part]
        out = Table(title=title if n == 0 else None, title_justify="left", header_style="bold")
        for i in keep:
            out.add_column(columns[i], justify="left" if i == 0 else "right", min_width=widths[i],
                           overflow="fold")
        for row in cells:
            out.add_row(*(row[i] for i in keep))
        console.print(out)


def fmt(value) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)


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
