"""Terminal output shared by the commands: rich tables on stdout, plain one-line errors on stderr."""

from __future__ import annotations

import json
import math
import sys

from rich.console import Console
from rich.table import Table

console = Console()


def table(title: str, columns: list[str], rows: list[list]) -> None:
    out = Table(title=title, title_justify="left", header_style="bold")
    for i, name in enumerate(columns):
        out.add_column(name, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for row in rows:
        out.add_row(*(fmt(v) for v in row))
    console.print(out)


def fmt(value) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def emit_json(payload) -> None:
    """JSON on stdout with nothing else on it, so it pipes into jq."""
    sys.stdout.write(json.dumps(payload, indent=2, default=_plain) + "\n")


def warn(message: str) -> None:
    print(message, file=sys.stderr)


def _plain(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
