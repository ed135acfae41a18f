"""`moesim calibrate`, `moesim replay`, `moesim validate`: the simulator against this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from moesim.cli.console import console, emit_json, table
from moesim.cli.options import Strategy

Layers = Annotated[Optional[int], typer.Option(help="Keep only the first N MoE layers (recorded in the output).")]
Scale = Annotated[float, typer.Option(help="Multiply the model's widths by S (0 < S <= 1; recorded).")]
Backend = Annotated[str, typer.Option(help="cpu: experts in files on disk, RAM slots, torch on the CPU; cuda: "
                                            "experts in pinned host memory, GPU slots, a copy stream; virtual: "
                                            "the simulator's durations on a virtual clock (checks the executor).")]
Kernel = Annotated[str, typer.Option(help="fused: a layer's experts run once all are loaded; per-expert: each as "
                                          "its weights land. Simulated and executed alike.")]


def _inputs(trace_path: Path, model: Optional[str], layers, scale):
    """The trace, its model, and the model as the replay will run it (cut and scaled)."""
    from moesim.replay.run import shrink
    from moesim.tracegen.models import model_for_trace
    from moesim.tracegen.io import load_trace

    trace = load_trace(trace_path)
    spec = model_for_trace(trace.meta, model)
    return trace, spec, shrink(trace, spec, layers, scale)[1]


def _check(small, capacity: int, per_layer: bool, backend: str, workdir) -> None:
    """Refuse a model too large for this machine before calibrating or writing anything."""
    import tempfile

    from moesim.replay.run import check_fits

    if backend == "virtual":
        return

    check_fits(small, capacity * (small.num_layers if per_layer else 1), backend,
               Path(workdir) if workdir is not None else Path(tempfile.gettempdir()))


def _hardware(hardware: Optional[str], model, backend: str, workdir, link=None, ssd=None):
    from moesim.errors import MoesimError
    from moesim.sim.hardware import get_hardware

    if backend == "virtual":  # any machine the simulator knows: a preset, or a file
        return get_hardware(hardware or "rtx4090", link, ssd)
    if link is not None or ssd is not None:
        raise MoesimError(f"--link and --ssd swap simulated presets; --backend {backend} runs on this machine")
    if hardware is not None:
        hw = get_hardware(hardware)
        if hw.compute is None or hw.compute.name != model.name:
            raise MoesimError(f"{hardware}: has no [compute] table for {model.name}; run 'moesim calibrate "
                              f"--model ... ' with the same --layers/--scale, or leave --hardware out")
        return hw
    from moesim.replay.calibrate import calibrate

    with console.status(f"calibrating this machine ({backend}: copies and compute)"):
        return calibrate(model, backend, workdir=workdir).hardware


def calibrate(
    model: Annotated[str, typer.Option(help="Model preset whose dims are measured.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Hardware file to write (TOML).")],
    backend: Backend = "cpu",
    layers: Layers = None,
    scale: Scale = 1.0,
    repeats: Annotated[int, typer.Option(help="Measurements per quantity (see docs/replay.md: which are medians, which means).")] = 15,
    workdir: Annotated[Optional[Path], typer.Option(help="Folder for the scratch expert file.")] = None,
) -> None:
    """Measure copies and compute on this machine and write the hardware file the simulator takes.

    Example: moesim calibrate --model olmoe-1b-7b --scale 0.5 --out hw.toml
    """
    from moesim.replay.calibrate import calibrate as measure
    from moesim.replay.compute import DTYPE
    from moesim.files import check_output
    from moesim.replay.run import shrink
    from moesim.sim.hardware import write_hardware
    from moesim.tracegen.models import get_model
    from moesim.tracegen.synth import synth_trace

    check_output(out, "hardware file")
    spec = get_model(model)
    _, spec = shrink(synth_trace(spec.num_layers, spec.num_experts, spec.top_k, 1, 1, seed=0), spec, layers, scale)
    _check(spec, spec.top_k, True, backend, workdir)
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


def replay(
    trace_path: Annotated[Path, typer.Argument(metavar="TRACE", help="Trace file (Parquet).")],
    model: Annotated[Optional[str], typer.Option(help="Model preset (default: the trace's).")] = None,
    policy: Annotated[str, typer.Option(help="Replacement policy.")] = "lru",
    capacity: Annotated[int, typer.Option(help="Expert slots per layer (or in the pool with --scope global).")] = 4,
    scope: Annotated[str, typer.Option(help="per-layer or global.")] = "per-layer",
    prefetch: Annotated[str, typer.Option(help="Prefetcher, as in 'sim run'.")] = "none",
    mode: Annotated[str, typer.Option(help="fallback or commit.")] = "fallback",
    batch: Annotated[int, typer.Option(help="Sequences decoded in lockstep (each layer loads their union).")] = 1,
    kernel: Kernel = "fused",
    strategy: Strategy = "gpu-cache",
    cpu_layers: Annotated[Optional[int], typer.Option("--cpu-layers", help="cpu-experts: the first N MoE layers' "
                                                      "experts on the CPU.")] = None,
    dtype: Annotated[Optional[str], typer.Option(help="virtual: the experts' format (real backends run their "
                                                      "own).")] = None,
    backend: Backend = "cpu",
    layers: Layers = None,
    scale: Scale = 1.0,
    hardware: Annotated[Optional[str], typer.Option(help="Calibrated hardware file for the simulated side "
                                                         "(default: calibrate now; virtual: rtx4090, or any "
                                                         "preset or file).")] = None,
    link: Annotated[Optional[str], typer.Option(help="virtual: swap the host link preset.")] = None,
    ssd: Annotated[Optional[str], typer.Option(help="virtual: add an SSD preset.")] = None,
    dram_capacity: Annotated[Optional[int], typer.Option("--dram-capacity", help="virtual: experts host DRAM "
                                                         "caches in front of the SSD.")] = None,
    context: Annotated[int, typer.Option(help="KV tokens added to every sequence.")] = 0,
    workdir: Annotated[Optional[Path], typer.Option(help="Folder for the expert files (removed after).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Execute the simulator's decisions with real reads and compute (or, --backend virtual, on the
    simulator's own durations); report measured TPOT.

    Example: moesim replay t.parquet --model olmoe-1b-7b --layers 4 --scale 0.5 --policy lru --capacity 16
    """
    from moesim.replay.run import check_backend, replay as run
    from moesim.sim.config import Config

    placing = {} if cpu_layers is None else {"cpu_layers": cpu_layers}
    config = Config.build(policy=policy, capacity=capacity, scope=scope, prefetch=prefetch, mode=mode, batch=batch,
                          kernel=kernel, dram_capacity=dram_capacity, context=context, strategy=strategy, dtype=dtype,
                          **placing)
    check_backend(config, backend)
    trace, spec, small = _inputs(trace_path, model, layers, scale)
    _check(small, capacity, scope == "per-layer", backend, workdir)
    hw = _hardware(hardware, small, backend, workdir, link, ssd)
    with console.status("replaying"):
        r = run(trace, config, hw, backend, layers, scale, workdir, model=spec)
    if as_json:
        emit_json({"trace": str(trace_path), "model": small.name, "hardware": hw.name, **r.as_dict()})
        return
    table(f"{trace_path}: {small.name}, {r.layers} layers, {backend}, {strategy}, {kernel} kernel; times per step "
          "in ms",
          ["policy", "C", "TPOT", "p50", "p99", "copy", "hit rate", "sim TPOT", "sim hit rate"],
          [[r.policy, r.capacity, r.tpot_s * 1e3, r.tpot_p50_s * 1e3, r.tpot_p99_s * 1e3, r.copy_s * 1e3,
            r.hit_rate, r.sim_tpot_s * 1e3, r.sim_hit_rate]])


def validate(
    trace_path: Annotated[Path, typer.Argument(metavar="TRACE", help="Trace file (Parquet).")],
    model: Annotated[Optional[str], typer.Option(help="Model preset (default: the trace's).")] = None,
    policies: Annotated[str, typer.Option(help="Comma-separated policies; speedups are over the first.")] = "lru,belady",
    capacity: Annotated[str, typer.Option(help="Comma-separated capacities.")] = "4",
    kernel: Kernel = "fused",
    strategy: Annotated[str, typer.Option(help="gpu-cache (policies x capacities) or cpu-experts (--cpu-layers).")]
    = "gpu-cache",
    cpu_layers: Annotated[str, typer.Option("--cpu-layers", help="cpu-experts: comma-separated numbers of CPU "
                                                                 "layers; speedups are over the first.")] = "0",
    backend: Backend = "cpu",
    layers: Layers = None,
    scale: Scale = 1.0,
    hardware: Annotated[Optional[str], typer.Option(help="Calibrated hardware file (default: calibrate now).")] = None,
    workdir: Annotated[Optional[Path], typer.Option(help="Folder for the expert files (removed after).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
) -> None:
    """Simulate and replay each configuration; print simulated against measured TPOT and the error.

    Example: moesim validate t.parquet --model olmoe-1b-7b --layers 4 --scale 0.5 --policies lru,belady --capacity 16,32
    """
    from moesim.cli.sim_cmd import int_list, names
    from moesim.replay.run import check_backend
    from moesim.replay.validate import validate as run
    from moesim.sim.config import Config

    config = Config.build(kernel=kernel, strategy=strategy)
    check_backend(config, backend)
    trace, spec, small = _inputs(trace_path, model, layers, scale)
    capacities = int_list(capacity, "--capacity")
    _check(small, max(capacities), True, backend, workdir)
    hw = _hardware(hardware, small, backend, workdir)
    with console.status("simulating and replaying"):
        rows = run(trace, config, hw, names(policies), capacities, backend, layers, scale, workdir, model=spec,
                   cpu_layers=int_list(cpu_layers, "--cpu-layers"))
    if as_json:
        emit_json({"trace": str(trace_path), "model": small.name, "hardware": hw.name, "rows": rows})
        return
    placed = strategy == "cpu-experts"
    table(f"{trace_path}: {small.name}, {small.num_layers} layers, {backend} ({hw.name}), {strategy}; TPOT in ms",
          (["CPU layers"] if placed else ["policy", "C"])
          + ["sim TPOT", "real TPOT", "error %", "sim speedup", "real speedup", "hit rate"],
          [([r["cpu_layers"]] if placed else [r["policy"], r["capacity"]])
           + [r["sim_tpot_s"] * 1e3, r["real_tpot_s"] * 1e3, r["error_pct"], r["sim_speedup"], r["real_speedup"],
              r["hit_rate_real"]] for r in rows])
