"""`moesim calibrate`, `moesim replay`, `moesim validate`: the simulator against this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

import moesim
from moesim.cli.console import console, emit_json, table
from moesim.cli.options import TracePath
from moesim.cli.settings import Asked, takes
from moesim.replay.run import REPLAY_SETTINGS
from moesim.sim.strategies import get_strategy

Layers = Annotated[Optional[int], typer.Option(help="Keep only the first N MoE layers (recorded in the output).")]
Scale = Annotated[float, typer.Option(help="Multiply the model's widths by S (0 < S <= 1; recorded).")]
Backend = Annotated[str, typer.Option(help="cpu: experts in files on disk, RAM slots, torch on the CPU; cuda: "
                                            "experts in pinned host memory, GPU slots, a copy stream; virtual: "
                                            "the simulator's durations on a virtual clock (checks the executor).")]
Workdir = Annotated[Optional[Path], typer.Option(help="Folder for the expert files (removed after).")]
HARDWARE_HELP = ("Calibrated hardware file for the simulated side (default: calibrate this machine now; virtual: "
                 "rtx4090, or any preset or file).")


def calibrate(
    model: Annotated[str, typer.Option(help="Model preset whose dims are measured.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Hardware file to write (TOML).")],
    backend: Backend = "cpu",
    layers: Layers = None,
    scale: Scale = 1.0,
    repeats: Annotated[int, typer.Option(help="Measurements per quantity (see docs/replay.md: which are medians, "
                                              "which means).")] = 15,
    workdir: Annotated[Optional[Path], typer.Option(help="Folder for the scratch expert file.")] = None,
) -> None:
    """Measure copies and compute on this machine and write the hardware file the simulator takes.

    Example: moesim calibrate --model olmoe-1b-7b --scale 0.5 --out hw.toml
    """
    from moesim.replay.calibrate import calibrate as measure
    from moesim.replay.compute import DTYPE
    from moesim.files import check_output
    from moesim.replay.run import check_fits, shrink
    from moesim.sim.hardware import write_hardware
    from moesim.tracegen.models import get_model
    from moesim.tracegen.synth import synth_trace

    check_output(out, "hardware file")
    spec = get_model(model)
    _, spec = shrink(synth_trace(spec.num_layers, spec.num_experts, spec.top_k, 1, 1, seed=0), spec, layers, scale)
    if backend != "virtual":
        from moesim.replay.scratch import work_folder

        check_fits(spec, spec.top_k * spec.num_layers, backend, work_folder(workdir))
    with console.status(f"calibrating ({backend}): copies, compute, then the replay's executor"):
        result = measure(spec, backend, repeats, workdir)
    hw, c = result.hardware, result.hardware.compute
    write_hardware(hw, out)
    pageable = "" if result.pageable_gbps is None else f" (pageable: {result.pageable_gbps:.2f} GB/s)"
    console.print(f"wrote {out} ({spec.name}: d={spec.d_model}, d_expert={spec.d_expert})\n"
                  f"  copies: {hw.link.name}, {hw.link.latency_us:.0f} us + {hw.link.gbps:.2f} GB/s{pageable}, fitted to "
                  f"the replay's all-miss steps (microbenchmark: {result.microbenchmark.latency_us:.0f} us + "
                  f"{result.microbenchmark.gbps:.2f} GB/s)\n"
                  f"  layer: {c.layer_s * 1e6:.0f} us + {c.layer_token_s * 1e6:.2f} us/token + "
                  f"{c.layer_ctx_s * 1e9:.2f} ns/KV token (executor: {result.layer_overhead_s * 1e6:+.0f} us)\n"
                  f"  expert: {c.expert_s * 1e6:.0f} us + {c.expert_token_s * 1e6:.2f} us per extra token "
                  f"(executor: {result.expert_overhead_s * 1e6:+.0f} us)\n"
                  f"  host CPU ({hw.cpu.cores} thread(s), {hw.cpu.isa}): DRAM {hw.cpu.dram_gbps:.1f} GB/s, expert kernel "
                  f"{hw.cpu.flops(DTYPE[backend]) / 1e9:.1f} GFLOP/s + {hw.cpu.task_us:.0f} us, "
                  f"{hw.cpu.sync_us:.0f} us per CPU layer")


def _hardware(asked: Asked) -> str | None:
    """The machine asked for (None: calibrate this one, or on the virtual backend the default preset)."""
    return asked.base.hardware.machine if "hardware" in asked.given else None


@takes(REPLAY_SETTINGS, helps={"hardware": HARDWARE_HELP,
                               "dtype": "virtual: the experts' format (real backends run their own)."})
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
    trace = moesim.load_trace(trace_path)
    with console.status("replaying" + (" (calibrating this machine first)" if _hardware(asked) is None
                                       and backend != "virtual" else "")):
        r = moesim.run_replay(trace, config, backend=backend, hardware=_hardware(asked), layers=layers, scale=scale,
                          workdir=workdir)
    if as_json:
        emit_json({"trace": str(trace_path), "model": r.model, "hardware": r.hardware, **r.as_dict()})
        return
    table(f"{trace_path}: {r.model}, {r.layers} layers, {backend}, {config.execution.strategy}, "
          f"{config.execution.kernel} kernel; times per step in ms",
          ["policy", "C", "TPOT", "p50", "p99", "copy", "hit rate", "sim TPOT", "sim hit rate"],
          [[r.policy, r.capacity, r.tpot_s * 1e3, r.tpot_p50_s * 1e3, r.tpot_p99_s * 1e3, r.copy_s * 1e3,
            r.hit_rate, r.sim_tpot_s * 1e3, r.sim_hit_rate]])


@takes(REPLAY_SETTINGS, listed=("policy", "capacity", "cpu_layers"), defaults={"policy": "lru,belady", "cpu_layers": "0"},
       helps={"hardware": HARDWARE_HELP,
              "policy": "Comma-separated replacement policies; speedups are over the first.",
              "cpu_layers": "For a strategy that places whole layers' experts on the CPU: comma-separated numbers of "
                            "CPU layers to run; speedups are over the first."},
       aliases={"policy": ("--policies",)})
def validate(
    trace_path: TracePath,
    backend: Backend = "cpu",
    layers: Layers = None,
    scale: Scale = 1.0,
    workdir: Workdir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
    *,
    asked: Asked,
) -> None:
    """Simulate and replay each configuration; print simulated against measured TPOT and the error.

    Example: moesim validate t.parquet --model olmoe-1b-7b --layers 4 --scale 0.5 --policies lru,belady --capacity 16,32
    """
    policies = asked.each.pop("policy")
    capacities = asked.each.pop("capacity", [asked.base.cache.capacity])
    cpu_layers = asked.each.pop("cpu_layers")
    config = asked.config("validate")
    trace = moesim.load_trace(trace_path)
    with console.status("simulating and replaying"):
        rows = moesim.validate(trace, config, policies=policies, capacities=capacities, cpu_layers=cpu_layers,
                               backend=backend, hardware=_hardware(asked), layers=layers, scale=scale, workdir=workdir)
    if as_json:
        emit_json({"trace": str(trace_path), "model": rows[0]["model"], "hardware": rows[0]["hardware"],
                   "rows": rows})
        return
    strategy = get_strategy(config.execution.strategy)
    placed = getattr(strategy, "PLACES", None)
    table(f"{trace_path}: {rows[0]['model']}, {rows[0]['layers']} layers, {backend} ({rows[0]['hardware']}), "
          f"{strategy.NAME}; TPOT in ms",
          ([placed] if placed else ["policy", "C"])
          + ["sim TPOT", "real TPOT", "error %", "sim speedup", "real speedup", "hit rate"],
          [([r[placed]] if placed else [r["policy"], r["capacity"]])
           + [r["sim_tpot_s"] * 1e3, r["real_tpot_s"] * 1e3, r["error_pct"], r["sim_speedup"], r["real_speedup"],
              r["hit_rate_real"]] for r in rows])
