"""Command-line options that several commands share, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

Force = Annotated[bool, typer.Option("--force", help="Replace OUT if it exists (else an existing file is refused).")]
Gamma = Annotated[Optional[float], typer.Option(help="Decay of the gamma policies (MELINOE; default 0.9).")]
Seed = Annotated[Optional[int], typer.Option(help="Seed of random and lecar (default 0).")]
MlModel = Annotated[Optional[Path], typer.Option("--ml-model", help="Model file from 'moesim train ml-ffn' (needed by "
                                                                    "ml-ffn).")]
PinTrace = Annotated[Optional[Path], typer.Option("--pin-trace", help="Trace whose popularity the static policy pins "
                                                                      "(default: TRACE).")]
