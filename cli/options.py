"""Command-line options several commands share that are not settings (the settings' options are generated
from their declaration: ``moesim.cli.settings``)."""

from pathlib import Path
from typing import Annotated

import typer

from moesim.errors import MoesimError
from moesim.tracegen.trace import trace_file

try:  # a typer that carries a click of its own (0.28 does): a type must be of its kind, else it is called as a function
    from typer.models import TyperPath as _Path
except ImportError:  # an older typer, on click itself
    from click import Path as _Path


class GivenPath(_Path):
    """A path typed on the command line, of which an empty one is refused, naming the option: typer turns ``""``
    into ``Path(".")``, before any callback sees it, and the command said '.: a folder'. ``hint`` follows the
    message (what the path should name)."""

    def __init__(self, hint: str = ""):
        super().__init__()
        self.hint = hint

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            raise MoesimError(f"{param_name(param)}: the path is empty{self.hint}")
        return super().convert(value, param, ctx)


def param_name(param) -> str:
    """An option as typed (its long flag), an argument by its metavar (TRACE)."""
    if param is None:
        return "path"
    if param.param_type_name == "option":
        return max(param.opts, key=lambda o: (o.startswith("--"), len(o)))
    return param.human_readable_name.strip("[]")  # an optional argument's metavar: [TRACE]


PATH = GivenPath()  # any path a command takes
TRACE = GivenPath(" (name a trace file, or bundled for the shipped one)")  # a trace's

Force = Annotated[bool, typer.Option("--force", help="Replace OUT if it exists (else an existing file is refused).")]
TracePath = Annotated[Path, typer.Argument(metavar="TRACE", callback=trace_file, click_type=TRACE,
                                           help="Trace file (Parquet); bundled: the shipped Mixtral-8x7B trace.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
