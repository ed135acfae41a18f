"""`moesim sim mrc`: exact hit rates at every capacity in one command, the reference lines, and the
best per-layer split of a slot budget."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import polars as pl
import typer

from moesim.cli.console import console, emit_json, table
from moesim.cli.options import Gamma, MlModel, PinTrace, Seed
from moesim.cli.sim_cmd import app, int_list, names, policy_params
from moesim.errors import MoesimError
from moesim.policies import POLICIES
from moesim.sim.config import CacheConfig, check_params_used, params_for
from moesim.tracegen.io import load_trace

REFERENCES = ("belady", "static")  # the offline optimum and each layer's Top-C by whole-trace popularity


@app.command()
def mrc(
    trace_path: Annotated[Path, typer.Argument(metavar="TRACE", help="Trace file (Parquet).")],
    policy: Annotated[str, typer.Option(help=f"Comma-separated policies: {', '.join(POLICIES)}.")] = "lru",
    capacity: Annotated[Optional[str], typer.Option(help="Comma-separated capacities (default: every one, from 1, "
                                                         "or top-k under step semantics, to all experts).")] = None,
    scope: Annotated[str, typer.Option(help="per-layer: C slots in every layer; global: one pool.")] = "per-layer",
    semantics: Annotated[str, typer.Option(help="step or sequential (see 'moesim sim hitrate').")] = "step",
    reset: Annotated[bool, typer.Option("--reset", help="Empty the cache at every new sequence.")] = False,
    reference: Annotated[bool, typer.Option("--reference/--no-reference", help="Add Belady (the offline optimum) "
                                            "and static (each layer's Top-C by whole-trace popularity).")] = True,
    budget: Annotated[Optional[int], typer.Option(help="Total slots over all layers (per-layer scope): print the "
                                                       "split that maximises each policy's hits against a uniform "
                                                       "one.")] = None,
    gamma: Gamma = None,
    seed: Seed = None,
    ml_model: MlModel = None,
    pin_trace: PinTrace = None,
    plot: Annotated[Optional[Path], typer.Option(help="Draw hit rate against capacity into this PNG.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Miss-ratio curves: each policy's exact hit rate at every capacity (what 'sim hitrate' gives at each),
    LRU, Belady and gamma in one pass under sequential semantics, Belady under step semantics too.

    Example: moesim sim mrc t.parquet --policy lru,lfu,gamma --semantics sequential --budget 96 --plot mrc.png
    """
    from moesim.sim.budget import allocate
    from moesim.sim.mrc import capacities, curve, hits_table

    trace = load_trace(trace_path)
    policies = list(dict.fromkeys(names(policy) + (list(REFERENCES) if reference else [])))
    given = policy_params(gamma=gamma, seed=seed, ml_model=ml_model, pin_trace=pin_trace)
    check_params_used(policies, given)
    if budget is not None and scope != "per-layer":
        raise MoesimError("--budget splits slots over layers: it needs --scope per-layer")
    sizes = None if capacity is None else int_list(capacity, "--capacity")
    curves = {}
    for name in policies:
        cache = CacheConfig(policy=name, scope=scope, semantics=semantics, reset=reset, params=params_for(name, given))
        curves[name] = curve(trace, cache, sizes if budget is None else capacities(trace, cache))
    low = min(capacities(trace, CacheConfig(scope=scope, semantics=semantics)))
    splits = {name: allocate(hits_table(rows), budget, low, rows[0].accesses) for name, rows in curves.items()} \
        if budget is not None else {}
    rows = [{**r.as_dict(), "per_layer_hits": r.per_layer_hits} for rs in curves.values() for r in rs
            if sizes is None or r.capacity in sizes]
    if plot is not None:
        from moesim.plots.results import plot_results

        plot_results(pl.DataFrame(rows).drop("per_layer_hit_rate"), "hitrate-vs-capacity", plot,
                     source=f"{trace.meta.model or 'trace'} routing ({trace_path.name}), {scope}, "
                            f"{semantics} semantics")
    if as_json:
        emit_json({"trace": str(trace_path), "results": rows,
                   **({"budget": {"slots": budget, "allocations": {
                       n: {"slots": a.slots, "hits": a.hits, "hit_rate": a.hits / a.accesses,
                           "uniform_hit_rate": a.uniform_hits / a.accesses} for n, a in splits.items()}}}
                      if splits else {})})
        return
    m = trace.meta
    gib = m.expert_bytes * (m.num_layers if scope == "per-layer" else 1) / 2 ** 30 if m.expert_bytes else None
    caps = sorted({r["capacity"] for r in rows})
    by = {(r["policy"], r["capacity"]): r["hit_rate"] for r in rows}
    table(f"{trace_path}: {m.model or 'trace'}, {trace.accesses} accesses, hit rate by capacity ({scope}, "
          f"{semantics} semantics)", ["capacity"] + (["GiB (bf16)"] if gib else []) + policies,
          [[c] + ([c * gib] if gib else []) + [by[(p, c)] for p in policies] for c in caps])
    if splits:
        table(f"{budget} slots over {m.num_layers} layers: the best split against {budget // m.num_layers} in every "
              f"layer", ["policy", "hit rate", "uniform", "gain (points)", "slots per layer"],
              [[n, a.hits / a.accesses, a.uniform_hits / a.accesses, 100 * a.gain, " ".join(map(str, a.slots))]
               for n, a in splits.items()])
    if plot is not None:
        console.print(f"wrote {plot}")
