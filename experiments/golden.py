"""The golden hit-rate table CI guards: every policy x capacity x scope x semantics on two traces.

Traces: the bundled real Mixtral-8x7B trace and a seeded synthetic one. Capacities 2..6 are slots
per layer; with global scope the pool holds that many slots per layer (C x L), so both scopes get
the same memory. ml-ffn is left out: it needs a trained model file, and its training goes through
torch, whose kernels are not bit-stable across versions and machines. Every other policy is
deterministic (random and lecar are seeded), so the comparison is exact.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from moesim.files import atomic_output
from moesim.policies import POLICIES
from moesim.sim.config import SCOPES, SEMANTICS, CacheConfig
from moesim.sim.hitrate import simulate
from moesim.tracegen.io import load_trace
from moesim.tracegen.trace import bundled_trace_path
from moesim.tracegen.synth import synth_trace

GOLDEN_POLICIES = tuple(p for p in POLICIES if p != "ml-ffn")
CAPACITIES = (2, 3, 4, 5, 6)
KEY = ["trace", "policy", "scope", "semantics", "capacity"]


def golden_traces() -> dict:
    return {"mixtral-gsm8k": load_trace(bundled_trace_path()),
            "synth-l8-e16-k2": synth_trace(layers=8, experts=16, top_k=2, sequences=4, tokens=96, seed=7)}


def golden_table() -> pl.DataFrame:
    rows = []
    for name, trace in golden_traces().items():
        for policy in GOLDEN_POLICIES:
            for scope in SCOPES:
                for semantics in SEMANTICS:
                    for c in CAPACITIES:
                        slots = c if scope == "per-layer" else c * trace.meta.num_layers
                        cache = CacheConfig(policy=policy, capacity=slots, scope=scope, semantics=semantics)
                        r = simulate(trace, cache)
                        rows.append({"trace": name, "policy": policy, "scope": scope, "semantics": semantics,
                                     "capacity": slots, "accesses": r.accesses, "hits": r.hits,
                                     "hit_rate": round(r.hit_rate, 6)})
    return pl.DataFrame(rows)


COLUMNS = {"trace": pl.String, "policy": pl.String, "scope": pl.String, "semantics": pl.String,
           "capacity": pl.Int64, "accesses": pl.Int64, "hits": pl.Int64, "hit_rate": pl.Float64}
VALUES = ["accesses", "hits", "hit_rate"]


def read_golden(path: Path) -> pl.DataFrame:
    """A golden table as ``write_golden`` writes it: its columns, their types, one row per key; anything else is
    a one-line error naming the file."""
    from moesim.errors import MoesimError, first_line
    from moesim.tracegen.io import READ_FAILURES

    if path.is_dir():
        raise MoesimError(f"{path}: a folder, not a golden table")
    try:
        table = pl.read_csv(path, glob=False, schema=COLUMNS)
    except READ_FAILURES as exc:
        raise MoesimError(f"{path}: not a golden table (columns {', '.join(COLUMNS)}: {first_line(exc)})") from None
    if table.null_count().sum_horizontal().item() or table.select(pl.col("hit_rate").is_nan().any()).item():
        raise MoesimError(f"{path}: empty or NaN cells; a golden table has every one")
    if table.select(KEY).is_duplicated().any():
        raise MoesimError(f"{path}: a row repeats another's trace, policy, scope, semantics and capacity")
    return table


def diff(old: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """Rows whose accesses, hits or hit rate changed, appeared or vanished, old and new side by side."""
    joined = old.select(KEY + VALUES).join(new.select(KEY + VALUES), on=KEY, how="full", suffix="_new", coalesce=True)
    moved = pl.any_horizontal(pl.col(c).ne_missing(pl.col(f"{c}_new")) for c in VALUES)
    return joined.filter(moved).rename({c: f"{c}_old" for c in VALUES})


def write_golden(table: pl.DataFrame, path: Path) -> None:
    with atomic_output(path) as tmp:
        table.write_csv(tmp)
