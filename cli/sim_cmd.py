"""`moesim sim ...`: exact hit rates, time per token from the discrete-event simulator, and the golden
table CI guards. Options are the settings' declarations (``moesim.cli.settings``); runs go through the
public API."""

from pathlib import Path
from typing import Annotated, Optional

import typer

import moesim
from moesim.cli.console import console, emit_json, slots_text, table, with_interval, working
from moesim.cli.explain_view import show
from moesim.cli.options import PATH, AsJson, TracePath
from moesim.cli.settings import Asked, takes
from moesim.errors import MoesimError, named
from moesim.files import check_output
from moesim.sim.accuracy import interval_words, ttft_words
from moesim.sim.config import RUN_SETTINGS
from moesim.sim.reads import refuse_unread
from moesim.sim.requests import check_prompt
from moesim.sim.strategies import get_strategy
from moesim.sim.weights import weights_of

app = typer.Typer(help="Simulate caches over a trace.", no_args_is_help=True, rich_markup_mode="markdown")



@app.command()
@takes(RUN_SETTINGS["hitrate"], listed=("policy", "capacity"), defaults={"policy": "belady,lru"})
def hitrate(trace_path: TracePath, as_json: AsJson = False, *, asked: Asked) -> None:
    """Exact hit rates of each policy at each capacity.

    Example: moesim sim hitrate t.parquet --policy belady,lru,lfu,arc --capacity 2,4,6 --semantics sequential
    """
    configs = asked.configs()
    with working(f"reading {trace_path}, then {len(configs)} hit-rate run(s)"):
        trace = moesim.load_trace(trace_path)
        results = [moesim.hitrate(trace, config=config) for config in configs]
    if as_json:
        emit_json({"trace": str(trace_path), "results": [r.as_dict() for r in results]})
        return
    first = results[0]
    table(f"{trace_path}: {trace.meta.model or 'trace'}, {trace.accesses} accesses, scope {first.scope}, "
          f"semantics {first.semantics}",
          ["policy", "capacity", "hit rate", "hits", "misses", "worst layer", "best layer", "M acc/s"],
          [[r.policy, slots_text(r.capacity), r.hit_rate, r.hits, r.misses, min(r.per_layer_hit_rate),
            max(r.per_layer_hit_rate), r.accesses_per_s / 1e6] for r in results])


@app.command()
@takes(RUN_SETTINGS["des"], listed=("policy", "capacity", "cpu_layers"))
def run(
    trace_path: TracePath,
    save_config: Annotated[Optional[Path], typer.Option("--save-config", click_type=PATH, help="Write the "
                                                        "configuration of the first run as TOML (for --config), the "
                                                        "files it names (--hardware a.toml) as absolute paths, once "
                                                        "every run is done.")] = None,
    as_json: AsJson = False,
    explain: Annotated[bool, typer.Option("--explain", help="Every step of each run's time per token: the parts "
                                                            "that add up to TPOT, what the link and the CPU did "
                                                            "beside them, what binds, and the constants behind "
                                                            "them with their sources.")] = False,
    *,
    asked: Asked,
) -> None:
    """Time per output token: the discrete-event simulation of decoding TRACE on a model and machine, with
    the GPU memory and host RAM it needs (a configuration that does not fit is refused).

    Example: moesim sim run t.parquet --hardware rtx4090 --dtype int4 --policy lru,belady --capacity auto --prefetch oracle
    """
    if save_config is not None:
        check_output(save_config, "configuration file", inputs=(trace_path, *asked.inputs), suffixes=(".toml",))
    hw = asked.base.hardware.spec()
    configs = asked.configs()
    with working(f"reading {trace_path}, then {len(configs)} simulated run(s)"):
        trace = moesim.load_trace(trace_path)
        base = configs[0]
        spec = base.model.spec(trace.meta)
        refuse_unread(asked.typed, models=[spec])
        check_prompt(trace, base.workload.prompt, asked="prompt" in asked.typed)  # 0 too, where each is recorded
        if "kernel" in asked.typed:  # each run assembled (not run) to see where its experts are computed
            from moesim.sim.des import prepare_des
            from moesim.sim.run import kernel_unread

            unread = [kernel_unread(run, int(run.rows.tokens.max()), c)
                      for c in configs for run in (prepare_des(trace, c, spec, hw).run,)]
            if all(unread):
                raise MoesimError(f"{named('kernel')}: {unread[0]}, so nothing reads it")
        results = [moesim.simulate(trace, config, model=spec, hardware=hw) for config in configs]
        if save_config is not None:  # after the runs: one refused (a model that does not fit) writes no file
            configs[0].to_toml(save_config, absolute=True)  # read from any folder as from this one
    if explain:
        from moesim.sim.explain import explain as explain_run
    explained = [explain_run(r, spec) for r in results] if explain else []
    if as_json:
        emit_json({"trace": str(trace_path), "results": [
            {**r.as_dict(), **({"explain": e.as_dict()} if explain else {})}
            for r, e in zip(results, explained or [None] * len(results))]})
        return
    ttft = any(r.ttft_s is not None for r in results)
    strategy = get_strategy(base.execution.strategy)
    uses_cpu = strategy.cpu
    scope, prefetch, mode = base.cache.scope, base.prefetch.prefetcher, base.prefetch.mode
    cached = strategy.cache and spec.kind != "mole" and any(r.capacity != 0 for r in results)
    formats = {f"weights {spec.storage_text}" if c.model.dtype is None and spec.stored_expert_bytes  # the file's
               else f"experts {weights_of(trace, spec, c.model.dtype, c.model.other_dtype).expert_format}"
               for c in configs}
    stored = f", {formats.pop()}" if len(formats) == 1 else ""  # a --dtype list: each row's own
    engines = list(dict.fromkeys(r.timed_as for r in results))  # the engine each row is timed as: one, or a column
    table(f"{trace_path}: {spec.name} on {hw.name} ({hw.describe()}), strategy {strategy.name}"
          + (f" as {engines[0]}" if len(engines) == 1 else "") + stored
          + (f", {scope}, prefetch {prefetch} ({mode})" if cached else "")
          + (f", {base.execution.kernel} kernel" if spec.kind != "mole" else "")
          + f", batch {base.workload.batch}; times per step in ms, memory in GiB",
          ["placement"] + ["engine"] * (len(engines) > 1) + ["TPOT", "p99", "tok/s", "compute", "copy", "stall"]
          + ["CPU", "on CPU"] * uses_cpu
          + ["hit rate"] * cached + ["VRAM", "RAM"] + ["TTFT"] * ttft,
          [[_placement(strategy, r, spec)] + [r.timed_as] * (len(engines) > 1)
           + [r.tpot_s * 1e3, r.tpot_p99_s * 1e3, with_interval(r.tokens_per_s, r.tokens_per_s_low, r.tokens_per_s_high),
              r.compute_s * 1e3, r.copy_s * 1e3, r.stall_s * 1e3]
           + [r.cpu_s * 1e3, r.cpu_share] * uses_cpu + [r.hit_rate] * cached + [r.vram_gb, r.ram_gb]
           + [ttft_ms(r)] * ttft for r in results])
    if any(r.tokens_per_s_low is not None for r in results):
        learned = any(r.as_engine for r in results)
        console.print(("tok/s: as the engine runs it, the framework time learned for it from published points "
                       "included where one was" if learned else "tok/s: the placement's operations, no engine's "
                       "framework time (--engine NAME, as moesim plan, adds one where it was learned)")
                      + "; " + interval_words(hw, {(r.as_engine, r.side) for r in results}), soft_wrap=True)
    for growth in dict.fromkeys(r.prompt_growth for r in results if r.ttft_s_low is not None):
        console.print(ttft_words(growth), soft_wrap=True)
    if prefetch != "none":
        for r in results:
            console.print(f"{r.policy} @ {slots_text(r.capacity)}: predictions' precision {_pct(r.prefetch_precision)}, "
                          f"recall {_pct(r.prefetch_recall)}; {r.prefetch_loads} copies made, {r.prefetch_used} of them "
                          "used by a GPU kernel"
                          + (f"; {r.substitutions} substitutions carrying {r.substituted_weight:.3f} router weight "
                             f"per layer and step" if mode == "commit" else ""))
    for r, e in zip(results, explained):
        show(_placement(strategy, r, spec), e)


LOOKUP_TABLES = "lookup tables on the host"  # where a MoLE model's experts are, in a table


def _placement(strategy, r, model) -> str:
    """Where a result's experts are, in a table cell: a MoLE model's lookup tables, the placement of a strategy without
    a cache, the policy and its slots, or (no slots) where every expert runs."""
    if model.kind == "mole":
        return LOOKUP_TABLES
    if not strategy.cache:
        return strategy.label(r.config.execution.params, model.num_layers)
    if r.capacity == 0:
        return "no cache: experts on the CPU" if strategy.cpu else "no cache: every expert copied"
    return f"{r.policy}, C {slots_text(r.capacity)}"


def _pct(value) -> str:
    return "-" if value is None else f"{value:.1%}"


@app.command()
def golden(
    path: Annotated[Path, typer.Option("--file", click_type=PATH, help="Golden table (CSV).")] = Path("tests/golden/hitrates.csv"),
    update: Annotated[bool, typer.Option("--update", help="Rewrite the file with the current numbers.")] = False,
) -> None:
    """Compare hit rates with the golden table CI guards; --update rewrites it and prints what moved.

    Example: moesim sim golden --update
    """
    from moesim.experiments.golden import diff, golden_table, read_golden, write_golden

    if not path.exists() and not update:
        raise MoesimError(f"{path}: no golden table here (run from the repository, pass --file, or --update to "
                          "write one)")
    old = None
    if update:
        check_output(path, "golden table", suffixes=(".csv",))
        if path.exists():
            try:
                old = read_golden(path)
            except MoesimError as exc:  # a damaged table (a merge conflict): --update is how it is mended
                console.print(f"{exc}: rewriting it whole")
    elif path.exists():
        old = read_golden(path)
    new = golden_table()
    old = new.clear() if old is None else old
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


def ttft_ms(r) -> str:
    """A run's TTFT in ms with its 80% interval ("-" without a prompt)."""
    if r.ttft_s is None:
        return "-"
    return with_interval(r.ttft_s * 1e3, *(None if x is None else x * 1e3 for x in (r.ttft_s_low, r.ttft_s_high)))
