"""`moesim sweep SPEC.toml`: every configuration of a spec, in parallel, resumable, one Parquet row each."""

import signal
from pathlib import Path
from typing import Annotated

import typer

from moesim.cli.console import console, progress_bar
from moesim.cli.options import PATH
from moesim.files import check_output


def sweep(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", click_type=PATH, help="Sweep spec (TOML): traces, kind, [axes], "
                                                                   "[fixed], [[exclude]].")],
    out: Annotated[Path, typer.Option("--out", "-o", click_type=PATH, help="Results file (Parquet), one row per configuration.")],
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Worker processes (at most one per CPU this process may "
                                                           "use; more are cut to that).")] = 1,
    resume: Annotated[bool, typer.Option("--resume", help="Keep the rows OUT has and run only the missing "
                                                          "configurations.")] = False,
    flush_seconds: Annotated[float, typer.Option("--flush-seconds", help="Rewrite OUT with the rows so far at "
                                                 "most this often (a kill loses at most this much work).")] = 2.0,
    executor: Annotated[str, typer.Option(help="local: worker processes here; ray: Ray tasks on the cluster "
                                               "RAY_ADDRESS names, or a local Ray (pip install 'moesim[ray]').")]
    = "local",
    force: Annotated[bool, typer.Option("--force", help="Every row takes machines whose numbers are far past every "
                                                        "real part's (12288 GiB of GPU memory: MiB?), refused "
                                                        "otherwise as a likely unit slip: force = true in [fixed].")]
    = False,
) -> None:
    """Run the cartesian product of a spec's axes over its traces.

    Example: moesim sweep examples/flashmoe_fig6.toml --out fig6.parquet --jobs 2
    """
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    import moesim
    from moesim.experiments.sweep import STOP, load_spec

    spec = load_spec(spec_path)
    check_output(out, "results", inputs=(spec_path, *spec.traces))
    with progress_bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("eta"), TimeRemainingColumn()) as bar:
        task = bar.add_task(f"sweep ({spec.kind})", total=None)

        def stop(*_) -> None:
            """`kill` (SIGTERM) and Ctrl-C end the sweep after the configurations running now (a first compile can
            take half a minute): their rows are written, nothing is left half-written, --resume continues."""
            STOP.set()
            bar.update(task, description=f"sweep ({spec.kind}): stopping")

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        summary = moesim.sweep(spec, out, jobs, resume, executor, flush_seconds,
                               progress=lambda done, total: bar.update(task, completed=done, total=total), force=force)
    console.print(f"wrote {out}: {summary.ran} configuration(s) run"
                  + (f", {summary.skipped} already there" if summary.skipped else "")
                  + (f", {summary.failed} failed (see the error column)" if summary.failed else "")
                  + (f", {summary.other} row(s) of other settings kept" if summary.other else "")
                  + f" in {summary.seconds:.1f} s"
                  + (f" on {summary.workers} worker(s), one per CPU this process may use" if summary.workers < jobs
                     else ""))
