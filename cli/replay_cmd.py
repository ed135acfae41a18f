"""`moesim calibrate`, `moesim replay`, `moesim validate`: the simulator against this machine."""

from pathlib import Path
from typing import Annotated, Optional

import typer

import moesim
from moesim.errors import MoesimError
from moesim.cli.console import console, emit_json, slots_text, table, working
from moesim.cli.options import PATH, TRACE, Force, TracePath
from moesim.cli.settings import Asked, takes
from moesim.replay.run import FORMATS, MACHINE, PRESETS, REPLAY_SETTINGS, check_given
from moesim.sim.config import CACHE_PARAMS, DECLARED
from moesim.sim.strategies import get_strategy
from moesim.tracegen.trace import trace_file

Layers = Annotated[Optional[int], typer.Option(help="Keep only the first N MoE layers (recorded in the output).")]
Scale = Annotated[float, typer.Option(help="Multiply the model's widths by S (0 < S <= 1; recorded).")]
Backend = Annotated[str, typer.Option(help="cpu: experts in files on disk, RAM slots, torch on the CPU; cuda: "
                                            "experts in pinned host memory, GPU slots, a copy stream; virtual: "
                                            "the simulator's durations on a virtual clock (checks the executor).")]
Workdir = Annotated[Optional[Path], typer.Option(click_type=PATH, help="Folder for the expert files (removed after).")]
HARDWARE_HELP = ("Calibrated hardware file for the simulated side (default: calibrate this machine now; virtual: "
                 "rtx4090, or any preset or file).")


Engine = Annotated[Optional[str], typer.Option(help="llama.cpp: time the real llama.cpp on this CPU instead of "
                                                   "moesim's replay (pip install 'moesim[llamacpp]').")]
EngineThreads = Annotated[Optional[str], typer.Option(help="--engine llama.cpp: comma-separated thread counts "
                                                            "(default 1, 2, 4, ... and every core).")]
Runs = Annotated[Optional[int], typer.Option(min=1, help="--engine llama.cpp: timed runs per configuration (the "
                                                          "median counts), after one warm-up. Default: 5.")]
RUNS = 5


def _engine_only(note: str = "", **given) -> None:
    """The options that only time llama.cpp, refused without --engine (nothing would read them); ``note`` adds why."""
    named = [f"--{name}" for name, value in given.items() if value is not None]
    if named:
        raise MoesimError(f"{', '.join(named)}: only with --engine llama.cpp (moesim's own replay reads "
                          f"{'it' if len(named) == 1 else 'them'} nowhere{note})")


REPEATS = 15  # a calibration's measurements per quantity


def calibrate(
    out: Annotated[Path, typer.Option("--out", "-o", click_type=PATH, help="Hardware file to write (TOML).")],
    model: Annotated[Optional[str], typer.Option(help="Model preset whose dims are measured (the replay).")] = None,
    backend: Backend = "cpu",
    layers: Layers = None,
    scale: Scale = 1.0,
    repeats: Annotated[int, typer.Option(help="Measurements per quantity (see docs/replay.md: which are medians, "
                                              "which means).")] = REPEATS,
    workdir: Annotated[Optional[Path], typer.Option(click_type=PATH, help="Folder for the scratch files.")] = None,
    engine: Engine = None,
    threads: EngineThreads = None,
    runs: Runs = None,
    force: Force = False,
) -> None:
    """Measure copies and compute on this machine and write the hardware file the simulator takes; with --engine
    llama.cpp, fit the CPU model to llama.cpp's decode and write a CPU-only file.

    Example: moesim calibrate --model olmoe-1b-7b --scale 0.5 --out hw.toml

    Example: moesim calibrate --engine llama.cpp --out here.toml
    """
    if engine is not None:
        from moesim.cli import llamacpp_cmd

        llamacpp_cmd.check_engine(engine)
        replays = [flag for flag, given in (("--model", model is not None), ("--layers", layers is not None),
                                            ("--scale", scale != 1.0), ("--backend", backend != "cpu"),
                                            ("--repeats", repeats != REPEATS)) if given]  # each the replay's alone
        if replays:
            raise MoesimError(f"--engine llama.cpp calibrates its own models on the CPU; {', '.join(replays)} "
                              f"{'is' if len(replays) == 1 else 'are'} the replay's (llama.cpp's decodes are "
                              "repeated --runs times)")
        llamacpp_cmd.calibrate(out, threads, runs or RUNS, workdir, force)
        return
    _engine_only(threads=threads, runs=runs)
    if model is None:
        raise MoesimError("calibrate needs --model (the replay's model), or --engine llama.cpp")
    from moesim.replay.calibrate import calibrate as measure
    from moesim.files import check_output
    from moesim.replay.run import check_fits, shrink
    from moesim.sim.hardware import write_hardware
    from moesim.tracegen.models import get_model
    from moesim.tracegen.synth import synth_trace

    check_output(out, "hardware file", force=force, suffixes=(".toml",))
    spec = get_model(model)
    _, spec = shrink(synth_trace(spec.num_layers, spec.num_experts, spec.top_k, 1, 1, seed=0), spec, layers, scale)
    if backend != "virtual":
        from moesim.replay.scratch import work_folder

        check_fits(spec, spec.top_k * spec.num_layers, backend, work_folder(workdir))
    with working(f"calibrating ({backend}): copies, compute, then the replay's executor"):
        result = measure(spec, backend, repeats, workdir)
    hw, c = result.hardware, result.hardware.compute
    write_hardware(hw, out)
    pageable = "" if result.pageable_gbps is None else f" (pageable: {result.pageable_gbps:.2f} GB/s)"
    console.print(f"wrote {out} ({spec.name}: d={spec.d_model}, d_expert={spec.d_expert})\n"
                  f"  copies: {hw.link.name}, {hw.link.latency_us:.0f} us + {hw.link.gbps:.2f} GB/s{pageable}, fitted to "
                  f"the replay's all-miss steps (microbenchmark: {result.microbenchmark.latency_us:.0f} us + "
                  f"{result.microbenchmark.gbps:.2f} GB/s)\n"
                  f"  layer: {c.layer_s * 1e6:.0f} us + {c.layer_token_s * 1e6:.2f} us/token + "
                  f"{c.layer_ctx_s * 1e9:.2f} ns/KV token (the replay's own; timed alone "
                  f"{(c.layer_s - result.layer_overhead_s) * 1e6:.0f} us)\n"
                  f"  expert: {c.expert_s * 1e6:.0f} us + {c.expert_token_s * 1e6:.2f} us per extra token "
                  f"(the replay's own; timed alone {(c.expert_s - result.expert_overhead_s) * 1e6:.0f} us)\n"
                  f"  once a row (dense layers, head): {c.row_s * 1e6:.0f} us + {c.row_token_s * 1e6:.2f} us/token\n"
                  f"  host CPU ({hw.cpu.cores * hw.cpu.sockets} cores, {hw.cpu.workers} threads, {hw.cpu.isa}): DRAM probe "
                  f"{hw.cpu.dram_gbps:.1f} GB/s, the kernel reaches {hw.cpu.dram_eff:.2f} of it; per thread "
                  + ", ".join(f"{f} {u:.2f} GB/s at one token, {dict(hw.cpu.matmul_gflops)[f]:.1f} GFLOP/s on many"
                              for f, u in hw.cpu.unpack_gbps)
                  + f"; {hw.cpu.task_us:.0f} us an expert, {hw.cpu.sync_us:.0f} us per CPU layer")


def _hardware(asked: Asked) -> str | None:
    """The machine asked for (None: calibrate this one, or on the virtual backend the default preset)."""
    return asked.base.hardware.machine if "hardware" in asked.given else None


# what a real backend does not read (``moesim.replay.run.check_given``), in the help of the settings concerned
VIRTUAL_ONLY = " Read by the virtual backend; cpu and cuda run on this machine, each in its own format, and refuse it."
HELPS = {"hardware": HARDWARE_HELP,
         **{name: DECLARED[name].help + VIRTUAL_ONLY for name in FORMATS + PRESETS + MACHINE}}


@takes(REPLAY_SETTINGS, helps=HELPS)
def replay(
    trace_path: TracePath,
    backend: Backend = "cpu",
    layers: Layers = None,
    scale: Scale = 1.0,
    workdir: Workdir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    *,
    asked: Asked,
) -> None:
    """Execute the simulator's decisions with real reads and compute (or, --backend virtual, on the
    simulator's own durations); report measured TPOT.

    Example: moesim replay t.parquet --model olmoe-1b-7b --layers 4 --scale 0.5 --policy lru --capacity 16
    """
    config = asked.config("replay")
    check_given(asked.typed, backend)
    trace = moesim.load_trace(trace_path)
    with working("replaying" + (" (calibrating this machine first)" if _hardware(asked) is None
                                       and backend != "virtual" else "")):
        r = moesim.run_replay(trace, config, backend=backend, hardware=_hardware(asked), layers=layers, scale=scale,
                          workdir=workdir)
    if as_json:
        emit_json({"trace": str(trace_path), "model": r.model, "hardware": r.hardware, **r.as_dict()})
        return
    row = r.as_dict()
    columns, cells = _placement(get_strategy(r.strategy), row)
    table(f"{trace_path}: {r.model}, {r.layers} layers, {backend}, {r.strategy}, experts {r.dtype}, "
          f"{r.kernel} kernel; times per step in ms",
          columns + ["TPOT", "p50", "p99", "copy", "hit rate", "sim TPOT", "sim hit rate"],
          [cells + [r.tpot_s * 1e3, r.tpot_p50_s * 1e3, r.tpot_p99_s * 1e3, r.copy_s * 1e3, r.hit_rate,
                    r.sim_tpot_s * 1e3, r.sim_hit_rate]])


def _placement(strategy, row: dict) -> tuple[list[str], list]:
    """A replayed row's placement, its columns and cells: for a strategy that places experts without a cache, the
    placement as ``sim run``'s table reads it (``layers on CPU 1/16``); for any other, its policy and slots."""
    placed = strategy.places
    if placed:
        return ["placement"], [strategy.label({placed: row[placed]}, row["layers"])]
    return ["policy", "C"], [row["policy"], slots_text(row["capacity"])]


@takes(REPLAY_SETTINGS, listed=("policy", "capacity", "cpu_layers", "dtype", "threads"),
       defaults={"policy": "lru,belady", "cpu_layers": "0"},
       helps={**HELPS,
              "hardware": HARDWARE_HELP + " --engine llama.cpp: the file 'moesim calibrate --engine llama.cpp' wrote "
                                          "(default: calibrate first).",
              "policy": "Comma-separated replacement policies; speedups are over the first.",
              "cpu_layers": "For a strategy that places whole layers' experts on the CPU: comma-separated numbers of "
                            "CPU layers to run; speedups are over the first.",
              "dtype": HELPS["dtype"] + " --engine llama.cpp: comma-separated weight formats (default bf16,q8_0,"
                                        "q4_k_m,q4_0,mxfp4).",
              "threads": HELPS["threads"] + " --engine llama.cpp: comma-separated thread counts (default 1, 2, 4, "
                                            "... and every core)."},
       aliases={"policy": ("--policies",)})
def validate(
    trace_path: Annotated[Optional[Path], typer.Argument(metavar="[TRACE]", callback=trace_file, click_type=TRACE,
                                                         help="Trace file (Parquet; bundled: the shipped one); none "
                                                              "with --engine llama.cpp.")] = None,
    backend: Backend = "cpu",
    layers: Layers = None,
    scale: Scale = 1.0,
    workdir: Workdir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
    engine: Engine = None,
    contexts: Annotated[Optional[str], typer.Option(help="--engine llama.cpp: comma-separated KV tokens filled "
                                                         "before the timed decode (default 0).")] = None,
    prompts: Annotated[Optional[str], typer.Option(help="--engine llama.cpp: comma-separated prompt lengths whose "
                                                        "processing is timed too (default 256; 0: none).")] = None,
    runs: Runs = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", click_type=PATH, help="--engine llama.cpp: write the "
                                                "calibrated hardware file with this machine's own 80% decode "
                                                "interval, measured here (band_low, band_high, band_held), which plan "
                                                "and sim run then give on it (not the --hardware file itself).")] = None,
    *,
    asked: Asked,
) -> None:
    """Simulate and replay each configuration; print simulated against measured TPOT and the error. With --engine
    llama.cpp: predict and time llama.cpp's CPU decode of models, formats, thread counts and contexts that
    calibration did not run, and (--out) write this machine's own interval from them.

    Example: moesim validate t.parquet --model olmoe-1b-7b --layers 4 --scale 0.5 --policies lru,belady --capacity 16,32

    Example: moesim validate --engine llama.cpp --hardware here.toml --threads 1,2 --json
    """
    if engine is not None:
        from moesim.cli import llamacpp_cmd

        llamacpp_cmd.check_engine(engine)
        if trace_path is not None:
            raise MoesimError("--engine llama.cpp decodes models of its own; it takes no trace")
        llamacpp_cmd.refuse_replay_options(asked, backend != "cpu", scale != 1.0)
        llamacpp_cmd.validate(_hardware(asked), asked.base.model.name if "model" in asked.given else None, layers,
                              asked.each.get("dtype"), asked.each.get("threads"), contexts, prompts, runs or RUNS,
                              workdir, as_json, asked.base.hardware.force, out)
        return
    threads = asked.each.get("threads", [])  # the replay's one thread count, as sim run's; a list is llama.cpp's
    listed = len(threads) > 1
    _engine_only("; it takes one thread count, as sim run does" if listed else "",
                 threads=",".join(map(str, threads)) if listed else None, contexts=contexts, prompts=prompts, runs=runs,
                 out=out)
    if trace_path is None:
        raise MoesimError("validate needs a trace (or --engine llama.cpp)")
    # each listed, else the configuration file's (the command's own defaults apply where the file sets none)
    policies = asked.each.pop("policy", [asked.base.cache.policy])
    capacities = asked.each.pop("capacity", [asked.base.cache.capacity])
    cpu_layers = asked.each.pop("cpu_layers", [asked.base.execution.params.get("cpu_layers", 0)])
    params = {k: asked.params.pop(k) for k in list(asked.params) if k in CACHE_PARAMS}  # for each policy taking it
    config = asked.config("validate")
    check_given(asked.typed, backend)
    trace = moesim.load_trace(trace_path)
    with working("simulating and replaying"):
        placing = get_strategy(config.execution.strategy).places  # the lists are a cache's runs
        rows = moesim.validate(trace, config, policies=None if placing else policies,
                               capacities=None if placing else capacities, cpu_layers=cpu_layers,
                               backend=backend, hardware=_hardware(asked), layers=layers, scale=scale, workdir=workdir,
                               **params)
    if as_json:
        emit_json({"trace": str(trace_path), "model": rows[0]["model"], "hardware": rows[0]["hardware"],
                   "rows": rows})
        return
    strategy = get_strategy(config.execution.strategy)
    table(f"{trace_path}: {rows[0]['model']}, {rows[0]['layers']} layers, {backend} ({rows[0]['hardware']}), "
          f"{strategy.name}, experts {rows[0]['dtype']}; TPOT in ms",
          _placement(strategy, rows[0])[0]
          + ["sim TPOT", "real TPOT", "error %", "sim speedup", "real speedup", "hit rate"],
          [_placement(strategy, r)[1]
           + [r["sim_tpot_s"] * 1e3, r["real_tpot_s"] * 1e3, r["error_pct"], r["sim_speedup"], r["real_speedup"],
              r["hit_rate_real"]] for r in rows])
