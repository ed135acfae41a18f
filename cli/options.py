"""Command-line options several commands share that are not settings (the settings' options are generated
from their declaration: ``moesim.cli.settings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Force = Annotated[bool, typer.Option("--force", help="Replace OUT if it exists (else an existing file is refused).")]
TracePath = Annotated[Path, typer.Argument(metavar="TRACE", help="Trace file (Parquet).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
