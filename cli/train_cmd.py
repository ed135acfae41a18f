"""`moesim train ...`: fit learned policies from a routing trace."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from moesim.errors import MoesimError
from moesim.tracegen.trace import trace_file
from moesim.cli.console import console, emit_json, table, working
from moesim.cli.options import PATH, TRACE, Force
from moesim.files import check_output
import moesim

app = typer.Typer(help="Train learned policies: an eviction model (ml-ffn) and a prefetcher (prefetcher).",
                  no_args_is_help=True, rich_markup_mode="markdown")


@app.command("ml-ffn")
def ml_ffn(
    train_trace: Annotated[Path, typer.Argument(metavar="TRAIN_TRACE", callback=trace_file, click_type=TRACE,
                                                help="Trace to learn from (Parquet; bundled: the shipped one).")],
    out: Annotated[Path, typer.Option("--out", "-o", click_type=PATH, help="Model file to write (.npz, plain arrays).")],
    layers: Annotated[str, typer.Option("--layers", help="per-layer: one FFN per layer (FlashMoE); shared: "
                                                         "one for all layers.")] = "per-layer",
    capacity: Annotated[Optional[int], typer.Option(help="Cache size per layer for the validation report [default: "
                                                         "the trace's top-k, the least a step takes].")] = None,
    val_fraction: Annotated[float, typer.Option(help="Share of sequences (the last ones) held out.")] = 0.2,
    horizon: Annotated[int, typer.Option(help="Distances beyond this many tokens count as this many.")] = 64,
    seed: Annotated[int, typer.Option(help="Seed of initialisation and batch order.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    force: Force = False,
) -> None:
    """Train FlashMoE's ML-FFN eviction model; report validation hit rate against LRU and Belady.

    Example: moesim train ml-ffn t.parquet --out ffn.npz --layers shared
    """
    from moesim.policies.ml_ffn_train import save_model, train
    from moesim.sim.config import CacheConfig
    from moesim.sim.hits import check_capacity

    if layers not in ("per-layer", "shared"):
        raise MoesimError(f"--layers must be per-layer or shared, got {layers!r}")
    check_output(out, "model", force=force, inputs=(train_trace,), suffixes=(".npz",))
    trace = moesim.load_trace(train_trace)
    capacity = trace.meta.top_k if capacity is None else capacity
    if capacity < 0:  # named as typed, as sim hitrate names it (the configuration's reader names its field)
        raise MoesimError(f"--capacity must be at least 0, got {capacity}")
    cache, top_k = CacheConfig(policy="ml-ffn", capacity=capacity), trace.meta.top_k
    if cache.semantics == "step" and 1 <= capacity < top_k:  # check_capacity's way out, --semantics sequential,
        # is not among this command's options: its report's runs keep the default semantics
        raise MoesimError(f"--capacity {capacity} is below top_k {top_k}: the validation report's runs keep all k "
                          f"experts of a step resident at once; give --capacity {top_k} or more")
    check_capacity(trace.meta, cache)  # before training, not after
    with working(f"training the {layers} ml-ffn model on {train_trace.name} (torch, up to 400 epochs), then "
                 "validating it"):
        arrays, log = train(trace, layers == "per-layer", horizon=horizon, val_fraction=val_fraction, seed=seed)
        save_model(arrays, out)
        val = trace.select(log["val_sequences"])
        rows = [moesim.hitrate(val, p, capacity, **({"ml_model": str(out)} if p == "ml-ffn" else {}))
                for p in ("ml-ffn", "lru", "belady")]
    report = {"model": str(out), **log, "capacity": capacity,
              "val_hit_rate": {r.policy: r.hit_rate for r in rows}}
    if as_json:
        emit_json(report)
        return
    console.print(f"wrote {out}: {layers} model, {log['epochs']} epochs, validation MSE {log['val_mse']:.4g}")
    table(f"validation: sequences {log['val_sequences']}, C={capacity}",
          ["policy", "hit rate"], [[r.policy, r.hit_rate] for r in rows])


@app.command("prefetcher")
def prefetcher(
    train_trace: Annotated[Path, typer.Argument(metavar="TRAIN_TRACE", callback=trace_file, click_type=TRACE,
                                                help="Trace to learn from (Parquet; bundled: the shipped one).")],
    out: Annotated[Path, typer.Option("--out", "-o", click_type=PATH, help="Model file to write (.npz, plain arrays).")],
    val_fraction: Annotated[float, typer.Option(help="Share of sequences (the last ones) held out.")] = 0.2,
    c: Annotated[float, typer.Option("--c", help="Inverse L2 regularisation strength of each regression.")] = 1.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    force: Force = False,
) -> None:
    """Train the learned prefetcher (scikit-learn: a logistic regression per layer and expert on the routing of the
    layer before and of the previous token); report its held-out precision and recall beside history's.

    Simulate it with --prefetch learned --prefetch-model FILE.

    Example: moesim train prefetcher bundled --out prefetcher.npz --val-fraction 0.5
    """
    check_output(out, "model", force=force, inputs=(train_trace,), suffixes=(".npz",))
    trace = moesim.load_trace(train_trace)
    with working(f"training the learned prefetcher on {train_trace.name} (scikit-learn), then scoring it on the "
                 "held-out sequences"):
        log = moesim.train_prefetcher(trace, out, val_fraction=val_fraction, c=c)
    if as_json:
        emit_json({"model": str(out), **log})
        return
    console.print(f"wrote {out}: a logistic regression per layer and expert on the {log['features']} of the layer "
                  f"before and of the previous token, trained on sequences {log['train_sequences']}")
    table(f"held out: sequences {log['val_sequences']}, decode tokens, mean over the layers",
          ["prefetcher", "precision", "recall"],
          [[name, log[name]["precision"], log[name]["recall"]] for name in ("learned", "history")])
