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
    """A table that never cuts a value short: on a narrow terminal cells wrap (fold), they are not
    truncated with an ellipsis."""
    out = Table(title=title, title_justify="left", header_style="bold")
    for i, name in enumerate(columns):
        out.add_column(name, justify="left" if i == 0 else "right", overflow="fold")
    for row in rows:
        out.add_row(*(fmt(v) for v in row))
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
