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


def diff(old: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """Rows whose hits changed, appeared or vanished, with old and new hits side by side."""
    joined = old.select(KEY + ["hits"]).join(new.select(KEY + ["hits"]), on=KEY, how="full",
                                             suffix="_new", coalesce=True)
    return joined.filter(pl.col("hits").ne_missing(pl.col("hits_new"))).rename({"hits": "hits_old"})


def write_golden(table: pl.DataFrame, path: Path) -> None:
    with atomic_output(path) as tmp:
        table.write_csv(tmp)
