"""Command-line options several commands share that are not settings (the settings' options are generated
from their declaration: ``moesim.cli.settings``)."""

from pathlib import Path
from typing import Annotated

import typer

from moesim.tracegen.trace import trace_file

Force = Annotated[bool, typer.Option("--force", help="Replace OUT if it exists (else an existing file is refused).")]
TracePath = Annotated[Path, typer.Argument(metavar="TRACE", callback=trace_file,
                                           help="Trace file (Parquet); bundled: the shipped Mixtral-8x7B trace.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
