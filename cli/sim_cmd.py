"""`moesim sim ...`: exact hit rates of replacement policies, and the golden table CI guards."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import polars as pl
import typer

from moesim import MoesimError
from moesim.console import console, emit_json, table
from moesim.policies import POLICIES
from moesim.sim.hitrate import simulate
from moesim.tracegen.io import load_trace

app = typer.Typer(help="Simulate caches over a trace.", no_args_is_help=True)


def int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise MoesimError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise MoesimError(f"{what} is empty")
    return values


@app.command()
def hitrate(
    trace_path: Annotated[Path, typer.Argument(metavar="TRACE", help="Trace file (Parquet).")],
    policy: Annotated[str, typer.Option(help=f"Comma-separated policies: {', '.join(POLICIES)}.")] = "belady,lru",
    capacity: Annotated[str, typer.Option(help="Comma-separated cache sizes in experts (per layer, or in the "
                                               "pool with --scope global).")] = "4",
    scope: Annotated[str, typer.Option(help="per-layer: C slots in every layer; global: one pool.")] = "per-layer",
    semantics: Annotated[str, typer.Option(help="step: a step's k experts arrive at once and are never "
                                                "evicted for each other; sequential: one by one, a "
                                                "textbook cache.")] = "step",
    reset: Annotated[bool, typer.Option("--reset", help="Empty the cache at every new sequence.")] = False,
    gamma: Annotated[float, typer.Option(help="Decay of the gamma policy (MELINOE).")] = 0.9,
    seed: Annotated[int, typer.Option(help="Seed of random and lecar.")] = 0,
    ml_model: Annotated[Optional[Path], typer.Option("--ml-model", help="Model file from 'moesim train "
                                                                        "ml-ffn' (needed by ml-ffn).")] = None,
    pin_trace: Annotated[Optional[Path], typer.Option("--pin-trace", help="Trace whose popularity the static "
                                                                          "policy pins (default: TRACE).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Exact hit rates of each policy at each capacity.

    Example: moesim sim hitrate t.parquet --policy belady,lru,lfu,arc --capacity 2,4,6 --semantics sequential
    """
    trace = load_trace(trace_path)
    params = {"gamma": gamma, "seed": seed}
    if ml_model is not None:
        params["ml_model"] = ml_model
    if pin_trace is not None:
        params["pin_trace"] = load_trace(pin_trace)
    names = [p.strip() for p in policy.split(",") if p.strip()]
    results = [simulate(trace, name, c, scope, semantics, reset, **params)
               for name in names for c in int_list(capacity, "--capacity")]
    if as_json:
        emit_json({"trace": str(trace_path), "results": [r.as_dict() for r in results]})
        return
    table(f"{trace_path}: {trace.meta.model or 'trace'}, {trace.accesses} accesses, scope {scope}, "
          f"semantics {semantics}",
          ["policy", "capacity", "hit rate", "hits", "misses", "worst layer", "best layer", "M acc/s"],
          [[r.policy, r.capacity, r.hit_rate, r.hits, r.misses, min(r.per_layer_hit_rate),
            max(r.per_layer_hit_rate), r.accesses_per_s / 1e6] for r in results])


@app.command()
def golden(
    path: Annotated[Path, typer.Option("--file", help="Golden table (CSV).")] = Path("tests/golden/hitrates.csv"),
    update: Annotated[bool, typer.Option("--update", help="Rewrite the file with the current numbers.")] = False,
) -> None:
    """Compare hit rates with the golden table CI guards; --update rewrites it and prints what moved.

    Example: moesim sim golden --update
    """
    from moesim.sim.golden import diff, golden_table, write_golden

    new = golden_table()
    old = pl.read_csv(path) if path.exists() else new.clear()
    changed = diff(old, new)
    if changed.height:
        table(f"{changed.height} golden row(s) differ", changed.columns, changed.rows())
    else:
        console.print(f"{path}: all {new.height} rows match")
    if update:
        write_golden(new, path)
        console.print(f"wrote {path}")
    elif changed.height:
        raise MoesimError(f"{path}: {changed.height} row(s) differ; review them, then run 'moesim sim golden --update'")
