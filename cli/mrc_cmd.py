"""`moesim sim mrc`: exact hit rates at every capacity in one command, the reference lines, and the
best per-layer split of a slot budget."""

from pathlib import Path
from typing import Annotated, Optional

import typer

import moesim
from moesim.cli.console import console, emit_json, table, working
from moesim.cli.options import PATH, TracePath
from moesim.cli.settings import Asked, takes
from moesim.cli.sim_cmd import app
from moesim.errors import MoesimError
from moesim.sim.config import RUN_SETTINGS

REFERENCES = ("belady", "static")  # the optimum without bypass and each layer's Top-C by whole-trace popularity


@app.command()
@takes([n for n in RUN_SETTINGS["hitrate"] if n != "split"], listed=("policy", "capacity"),
       helps={"capacity": "Comma-separated capacities to report (default: every one, from 1, or top-k under step "
                          "semantics, to all experts), all from one curve."})
def mrc(
    trace_path: TracePath,
    reference: Annotated[bool, typer.Option("--reference/--no-reference", help="Add Belady (the offline optimum of "
                                            "caches that admit every miss; a policy that bypasses, as static does, "
                                            "can beat it) and static (each layer's Top-C by whole-trace "
                                            "popularity).")] = True,
    budget: Annotated[Optional[int], typer.Option(help="Total slots over all layers (per-layer scope): print the "
                                                       "split that maximises each policy's hits against a uniform "
                                                       "one.")] = None,
    plot: Annotated[Optional[Path], typer.Option(click_type=PATH, help="Draw hit rate against capacity into this "
                                                                       "figure (PNG, SVG or PDF).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    *,
    asked: Asked,
) -> None:
    """Miss-ratio curves: each policy's exact hit rate at every capacity (what 'sim hitrate' gives at each),
    in one pass for a stack algorithm (LRU, Belady and gamma under sequential semantics, Belady under step
    semantics too).

    Example: moesim sim mrc t.parquet --policy lru,lfu,gamma --semantics sequential --budget 96 --plot mrc.png
    """
    sizes = asked.each.pop("capacity", None)
    configs = asked.configs()
    if reference:  # the bounds as themselves, with no admission in front of them
        ran = {c.cache.composed for c in configs}
        configs += [configs[0].replace(policy=name, admission="all") for name in REFERENCES if name not in ran]
    scope, semantics = configs[0].cache.scope, configs[0].cache.semantics
    if budget is not None and scope != "per-layer":
        raise MoesimError("--budget splits slots over layers: it needs --scope per-layer")
    if plot is not None:
        from moesim.files import check_output
        from moesim.plots.trace import SUFFIXES

        check_output(plot, "figure", inputs=(trace_path,), suffixes=SUFFIXES)
    with working(f"reading {trace_path}, then {len(configs)} miss-ratio curve(s)"):
        trace = moesim.load_trace(trace_path)
        if budget is not None:
            from moesim.sim.budget import check_budget

            for c in configs:
                check_budget(trace, c.cache, budget)
        curves = {c.cache.composed: moesim.mrc(trace, config=c, capacities="all" if budget is not None else sizes)
                  for c in configs}
        splits = {c.cache.composed: moesim.best_split(trace, budget, config=c, curve=curves[c.cache.composed])
                  for c in configs} if budget is not None else {}
    rows = [{**r.as_dict(), "per_layer_hits": r.per_layer_hits} for rs in curves.values() for r in rs
            if sizes is None or r.capacity in sizes]
    if plot is not None:
        import polars as pl

        # the figure adds the rows' scope and semantics to this source
        moesim.plot(pl.DataFrame(rows).drop("per_layer_hit_rate"), "hitrate-vs-capacity", plot,
                    source=f"{trace.meta.model or 'trace'} routing ({trace_path.name})")
    if as_json:
        emit_json({"trace": str(trace_path), "results": rows,
                   **({"budget": {"slots": budget, "allocations": {
                       n: {"slots": a.slots, "hits": a.hits, "hit_rate": a.hits / a.accesses,
                           "uniform_hit_rate": a.uniform_hits / a.accesses} for n, a in splits.items()}}}
                      if splits else {})})
        return
    m = trace.meta
    policies = list(curves)
    gib = m.expert_bytes * (m.num_layers if scope == "per-layer" else 1) / 2 ** 30 if m.expert_bytes else None
    # a stack algorithm's curve has every capacity, one run per capacity a spread of them (a global pool): the
    # table's rows are the capacities every curve has (--json gives each curve whole)
    caps = sorted(set.intersection(*({r["capacity"] for r in rows if r["policy"] == p} for p in policies)))
    some = len(caps) < len({r["capacity"] for r in rows})
    by = {(r["policy"], r["capacity"]): r["hit_rate"] for r in rows}
    table(f"{trace_path}: {m.model or 'trace'}, {trace.accesses} accesses, hit rate by capacity ({scope}, "
          f"{semantics} semantics{'; the capacities every curve ran, --json for each whole' if some else ''})",
          ["capacity"] + (["GiB (bf16)"] if gib else []) + policies,
          [[c] + ([c * gib] if gib else []) + [by[(p, c)] for p in policies] for c in caps])
    if splits:
        table(f"{budget} slots over {m.num_layers} layers: the best split against {budget // m.num_layers} in every "
              f"layer", ["policy", "hit rate", "uniform", "gain (points)", "slots per layer"],
              [[n, a.hits / a.accesses, a.uniform_hits / a.accesses, 100 * a.gain, " ".join(map(str, a.slots))]
               for n, a in splits.items()])
    if plot is not None:
        console.print(f"wrote {plot}")
