"""`moesim sim ...`: exact hit rates, time per token from the discrete-event simulator, and the golden
table CI guards."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import polars as pl
import typer

from moesim.cli.console import console, emit_json, slots_text, table
from moesim.cli.options import (AsJson, ConfigFile, Context, Cpu, CpuLayers, DramCapacity, Dtype, Gamma, Hardware, Kernel,
                                Link, LowbitDtype, LowbitThreshold, MlModel, Mode, Model, OtherDtype, PinTrace, Prompt,
                                Ram, Scope, Seed, Split, Ssd, Strategy, TrainTrace, Vram)
from moesim.errors import MoesimError
from moesim.policies import POLICIES
from moesim.policies.prefetch import PREFETCHERS
from moesim.sim.config import SETTINGS, CacheConfig, Config, check_params_used, params_for
from moesim.sim.strategies import STRATEGIES
from moesim.sim.hitrate import simulate
from moesim.tracegen.io import load_trace

app = typer.Typer(help="Simulate caches over a trace.", no_args_is_help=True, rich_markup_mode="markdown")


def int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise MoesimError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise MoesimError(f"{what} is empty")
    return values


def capacity_list(text: str) -> list:
    """--capacity: comma-separated slot counts, or auto (as many as GPU memory holds)."""
    if text.strip() == "auto":
        return ["auto"]
    return int_list(text, "--capacity")


def auto_or_int(text: str | None, what: str):
    """An option that is a whole number or auto."""
    if text is None or text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise MoesimError(f"{what} must be a whole number or auto, got {text!r}") from None


def names(text: str) -> list[str]:
    """A comma-separated list of policy names."""
    return [p.strip() for p in text.split(",") if p.strip()]


def policy_params(**given) -> dict:
    """The policy and prefetcher parameters given on the command line (None: not given; the policy's default)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in given.items() if v is not None}



@app.command()
def hitrate(
    trace_path: Annotated[Path, typer.Argument(metavar="TRACE", help="Trace file (Parquet).")],
    policy: Annotated[str, typer.Option(help=f"Comma-separated policies: {', '.join(POLICIES)}.")] = "belady,lru",
    capacity: Annotated[str, typer.Option(help="Comma-separated cache sizes in experts (per layer, or in the "
                                               "pool with --scope global).")] = "4",
    scope: Annotated[str, typer.Option(help="per-layer: C slots in every layer; global: one pool.")] = "per-layer",
    split: Split = "uniform",
    semantics: Annotated[str, typer.Option(help="step: a step's k experts arrive at once and are never "
                                                "evicted for each other; sequential: one by one, a "
                                                "textbook cache.")] = "step",
    reset: Annotated[bool, typer.Option("--reset", help="Empty the cache at every new sequence.")] = False,
    gamma: Gamma = None,
    seed: Seed = None,
    ml_model: MlModel = None,
    pin_trace: PinTrace = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Exact hit rates of each policy at each capacity.

    Example: moesim sim hitrate t.parquet --policy belady,lru,lfu,arc --capacity 2,4,6 --semantics sequential
    """
    trace = load_trace(trace_path)
    given = policy_params(gamma=gamma, seed=seed, ml_model=ml_model, pin_trace=pin_trace)
    check_params_used(names(policy), given)
    results = [simulate(trace, CacheConfig(policy=name, capacity=c, scope=scope, split=split, semantics=semantics,
                                           reset=reset, params=params_for(name, given)))
               for name in names(policy) for c in int_list(capacity, "--capacity")]
    if as_json:
        emit_json({"trace": str(trace_path), "results": [r.as_dict() for r in results]})
        return
    table(f"{trace_path}: {trace.meta.model or 'trace'}, {trace.accesses} accesses, scope {scope}, "
          f"semantics {semantics}",
          ["policy", "capacity", "hit rate", "hits", "misses", "worst layer", "best layer", "M acc/s"],
          [[r.policy, slots_text(r.capacity), r.hit_rate, r.hits, r.misses, min(r.per_layer_hit_rate),
            max(r.per_layer_hit_rate), r.accesses_per_s / 1e6] for r in results])


@app.command()
def run(
    ctx: typer.Context,
    trace_path: Annotated[Path, typer.Argument(metavar="TRACE", help="Trace file (Parquet).")],
    model: Model = None,
    hardware: Hardware = "rtx4090",
    link: Link = None,
    ssd: Ssd = None,
    cpu: Cpu = None,
    vram: Vram = None,
    ram: Ram = None,
    strategy: Strategy = "gpu-cache",
    cpu_layers: CpuLayers = None,
    lowbit_threshold: LowbitThreshold = None,
    lowbit_dtype: LowbitDtype = None,
    policy: Annotated[str, typer.Option(help=f"Comma-separated policies: {', '.join(POLICIES)}.")] = "lru",
    capacity: Annotated[str, typer.Option(help="Comma-separated GPU expert slots per layer (or in the pool with "
                                               "--scope global); 0: no expert cache; auto: as many as GPU memory "
                                               "holds.")] = "4",
    scope: Scope = "per-layer",
    split: Split = "uniform",
    dram_capacity: DramCapacity = None,
    prefetch: Annotated[str, typer.Option(help=f"Prefetcher: {', '.join(PREFETCHERS)}.")] = "none",
    mode: Mode = "fallback",
    kernel: Kernel = "fused",
    batch: Annotated[int, typer.Option(help="Sequences decoded in lockstep.")] = 1,
    context: Context = 0,
    prompt: Prompt = 0,
    warmup: Annotated[int, typer.Option(help="Batches run first and not measured (steady state).")] = 0,
    dtype: Dtype = None,
    other_dtype: OtherDtype = None,
    reset: Annotated[bool, typer.Option("--reset", help="Empty the cache at every new batch.")] = False,
    gamma: Gamma = None,
    seed: Seed = None,
    ml_model: MlModel = None,
    pin_trace: PinTrace = None,
    train_trace: TrainTrace = None,
    config_file: ConfigFile = None,
    save_config: Annotated[Optional[Path], typer.Option("--save-config", help="Write the configuration of the "
                                                        "first run as TOML (for --config).")] = None,
    as_json: AsJson = False,
) -> None:
    """Time per output token: the discrete-event simulation of decoding TRACE on a model and machine, with
    the GPU memory and host RAM it needs (a configuration that does not fit is refused).

    Example: moesim sim run t.parquet --hardware rtx4090 --dtype int4 --policy lru,belady --capacity auto --prefetch oracle
    """
    from moesim.sim.des import simulate_des

    given = policy_params(gamma=gamma, seed=seed, ml_model=ml_model, pin_trace=pin_trace)
    configs = command_configs(ctx, config_file, policy, capacity, given, cpu_layers, lowbit_threshold, lowbit_dtype,
                              train_trace)
    base = configs[0]
    if save_config is not None:
        configs[0].to_toml(save_config)
    trace = load_trace(trace_path)
    spec, hw = base.model.spec(trace.meta), base.hardware.spec()
    results = [simulate_des(trace, config, spec, hw) for config in configs]
    if as_json:
        emit_json({"trace": str(trace_path), "results": [r.as_dict() for r in results]})
        return
    ttft = any(r.ttft_s is not None for r in results)
    uses_cpu = STRATEGIES[base.execution.strategy].CPU
    scope, prefetch, mode = base.cache.scope, base.prefetch.prefetcher, base.prefetch.mode
    table(f"{trace_path}: {spec.name} on {hw.name} ({hw.gpu.name}, {hw.link.name}"
          f"{', ' + hw.cpu.name if uses_cpu else ''}), strategy {base.execution.strategy}, {scope}, prefetch "
          f"{prefetch} ({mode}), {base.execution.kernel} kernel, batch {base.workload.batch}; times per step in ms, "
          f"memory in GiB",
          ["policy", "C", "TPOT", "p99", "tok/s", "compute", "copy", "stall"] + ["CPU", "on CPU"] * uses_cpu
          + ["hit rate", "VRAM", "RAM"] + ["TTFT"] * ttft,
          [[r.policy, slots_text(r.capacity), r.tpot_s * 1e3, r.tpot_p99_s * 1e3, r.tokens_per_s, r.compute_s * 1e3,
            r.copy_s * 1e3, r.stall_s * 1e3] + [r.cpu_s * 1e3, r.cpu_share] * uses_cpu
           + [r.hit_rate, r.vram_gb, r.ram_gb] + [(r.ttft_s or float("nan")) * 1e3] * ttft for r in results])
    if base.execution.strategy == "cpu-experts":
        console.print(f"{results[0].config.execution.params['cpu_layers']} of {spec.num_layers} layers' experts on "
                      "the CPU")
    if prefetch != "none":
        for r in results:
            console.print(f"{r.policy} @ {slots_text(r.capacity)}: prefetch precision {_pct(r.prefetch_precision)}, recall "
                          f"{_pct(r.prefetch_recall)}, {r.prefetch_loads} prefetched, {r.prefetch_used} used"
                          + (f"; {r.substitutions} substitutions carrying {r.substituted_weight:.3f} router weight "
                             f"per layer and step" if mode == "commit" else ""))


def command_configs(ctx: typer.Context, config_file: Path | None, policy: str, capacity: str, given: dict,
                    cpu_layers, lowbit_threshold, lowbit_dtype, train_trace) -> list[Config]:
    """The configurations a command line asks for: the --config file's (or the defaults), with every setting
    typed on the command line over it, one per policy and capacity listed."""
    base = Config.from_toml(config_file) if config_file is not None else Config()
    typed = {k: v for k, v in ctx.params.items() if getattr(ctx.get_parameter_source(k), "name", "") == "COMMANDLINE"}
    placing = policy_params(cpu_layers=auto_or_int(cpu_layers, "--cpu-layers"), lowbit_threshold=lowbit_threshold,
                            lowbit_dtype=lowbit_dtype)
    check_params_used([], placing, strategies=[typed.get("strategy", base.execution.strategy)])
    base = base.replace(**{k: v for k, v in typed.items() if k in SETTINGS and k not in ("policy", "capacity")},
                        **policy_params(train_trace=train_trace), **placing)
    policies = names(policy) if "policy" in typed or config_file is None else [base.cache.policy]
    capacities = capacity_list(capacity) if "capacity" in typed or config_file is None else [base.cache.capacity]
    check_params_used(policies, given)
    return [base.replace(policy=name, capacity=c, **params_for(name, given)) for name in policies
            for c in capacities]


def _pct(value) -> str:
    return "-" if value is None else f"{value:.1%}"


@app.command()
def golden(
    path: Annotated[Path, typer.Option("--file", help="Golden table (CSV).")] = Path("tests/golden/hitrates.csv"),
    update: Annotated[bool, typer.Option("--update", help="Rewrite the file with the current numbers.")] = False,
) -> None:
    """Compare hit rates with the golden table CI guards; --update rewrites it and prints what moved.

    Example: moesim sim golden --update
    """
    from moesim.experiments.golden import diff, golden_table, write_golden

    if not path.exists() and not update:
        raise MoesimError(f"{path}: no golden table here (run from the repository, pass --file, or --update to "
                          "write one)")
    new = golden_table()
    old = pl.read_csv(path, glob=False) if path.exists() else new.clear()
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
