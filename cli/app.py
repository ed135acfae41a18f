"""The `moesim` command line."""

import gc
import signal
import sys
import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer

from moesim import __version__
from moesim.errors import READER, MoesimError, MoesimWarning, first_line, unwind
from moesim.host import usable_cpus
from moesim.sim import blas_probe
from moesim.cli import mrc_cmd, plan_cmd, plot_cmd, replay_cmd, serve_cmd, sim_cmd, sweep_cmd, trace_cmd, train_cmd  # noqa: F401 (mrc_cmd, serve_cmd: register sim mrc, sim serve)
from moesim.cli.console import console, emit_json, table, warn, watch_compiles, working
from moesim.cli.options import PATH
from moesim.tracegen.models import MODELS

app = typer.Typer(help="Trace-driven cache and prefetch simulator for Mixture-of-Experts inference.", rich_markup_mode="markdown",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(trace_cmd.app, name="trace")
app.add_typer(sim_cmd.app, name="sim")
app.add_typer(train_cmd.app, name="train")
app.command()(plan_cmd.plan)
app.command()(sweep_cmd.sweep)
app.command()(plot_cmd.plot)
app.command()(replay_cmd.calibrate)
app.command()(replay_cmd.replay)
app.command()(replay_cmd.validate)


def _version(value: bool) -> None:
    if value:
        console.print(f"moesim {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True,
                                                    help="Print the version and exit.")] = None,
) -> None:
    """Trace-driven cache and prefetch simulator for Mixture-of-Experts inference."""
    watch_compiles()  # a first run's compilations show on the status line


@app.command()
def models(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False) -> None:
    """List the model presets: layers, experts, top-k, dims, bytes per expert.

    Example: moesim models --json
    """
    from moesim.tracegen.model_spec import BYTES_PER_PARAM

    rows = [{
        "name": m.name, "kind": m.kind, "hf_id": m.hf_id, "architecture": m.architecture, "layers": m.num_layers,
        "experts": m.num_experts, "top_k": m.top_k, "d_model": m.d_model, "d_expert": m.d_expert,
        "shared_experts": m.shared_experts, "expert_params": m.expert_params,
        "expert_mb_bf16": m.expert_bytes("bf16") / 1e6, "expert_mb_int4": m.expert_bytes("int4") / 1e6,
        "routed_experts_gib_bf16": m.routed_expert_bytes("bf16") / 2**30,
        "other_weights_gib_bf16": m.non_expert_params * 2 / 2**30, "kv_kib_per_token": m.kv_bytes(1) / 1024,
        "source": m.source,
    } for m in MODELS.values()]
    if as_json:
        emit_json(rows)
        return
    cols = {"name": "name", "kind": "kind", "layers": "L", "experts": "E", "top_k": "k", "d_model": "d_model",
            "d_expert": "d_expert", "expert_mb_bf16": "MB bf16", "expert_mb_int4": "MB int4",
            "routed_experts_gib_bf16": "GiB experts", "other_weights_gib_bf16": "GiB rest",
            "kv_kib_per_token": "KiB KV/token"}
    # the int4 column counts the format's scales (an fp16 one per group of 128 weights): the caption says so
    table(f"Model presets: bytes per expert (1 MB = 1e6 B; int4 = {BYTES_PER_PARAM['int4'] * 8:g} bits a weight, an "
          "fp16 scale per 128 included); all routed experts, every other weight, KV cache per token (GiB = 2^30 B, "
          "bf16)",
          list(cols.values()), [[r[c] for c in cols] for r in rows])

@app.command()
def engines(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False) -> None:
    """The engines a run is timed as: the placements (strategies) each runs, what of it changes durations, and
    where each figure comes from.

    Example: moesim engines
    """
    from moesim.sim.engines import ENGINES
    from moesim.sim.strategies import get_strategy

    rows = [{"name": e.name, "runs": list(e.runs), "summary": e.summary, "source": e.source, "numa": e.numa,
             "numa_options": list(e.numa_options),
             "shared_overlap": e.shared_overlap, "cpu_ops": list(e.cpu_ops), "offload_min_tokens": e.offload_min_tokens,
             "offload_per_expert": e.offload_per_expert,
             "layer_us": e.layer_us, "gpu_layer_us": dict(e.gpu_layer_us), "kernel": e.kernel, "threads": e.threads,
             "families": list(e.families), "formats": list(e.formats), "release": e.release,
             "sources": dict(e.sources),
             "computes_on_cpu": any(get_strategy(s).cpu for s in e.runs)} for e in ENGINES.values()]
    if as_json:
        emit_json(rows)
        return
    table("Engines, in the order a strategy's run is timed as the first that runs it and takes its settings; "
          "framework time per MoE layer: learned from published points by cross-validation, in plan's rows (sim run "
          "times the placement's operations alone); barriers per CPU layer a + b x top_k; offload at: the tokens of a "
          "row whose CPU layers' experts it runs on the GPU (- : where it computes nothing on the CPU); sockets: its "
          "layout over them (or the one --numa may set); threads: where it fixes them",
          ["name", "runs", "framework µs/layer", "GPU kernel", "sockets", "shared experts", "barriers a, b",
           "offload at", "release"],
          [[r["name"], ", ".join(r["runs"]), "; ".join([f"{r['layer_us']:.0f}"] * bool(r["layer_us"]) + [
              f"{us:.0f} on {maker} GPUs" for maker, us in r["gpu_layer_us"].items()]) or "-",
            r["kernel"] or "the run's"]
           + ([r["numa"] + "".join(f" (or {o})" for o in r["numa_options"])
               + (f", {r['threads']} threads" if r["threads"] else ""),
               "beside the CPU's" if r["shared_overlap"] else "before the CPU's",
               f"{r['cpu_ops'][0]}, {r['cpu_ops'][1]}",
               f"{r['offload_min_tokens']}{' per expert' if r['offload_per_expert'] else ''}"
               if r["offload_min_tokens"] else "never"]
              if r["computes_on_cpu"] else ["-"] * 4) + [r["release"] or f"none ({r['source']})"] for r in rows])
    for r in rows:
        console.print(f"{r['name']} runs: {', '.join(r['families']) or 'no family'}; experts in "
                      f"{', '.join(r['formats']) or 'no format'}", soft_wrap=True)
        for what, source in r["sources"].items():
            console.print(f"{r['name']} {what}: {source}", soft_wrap=True)


CPU_COLUMNS = ["name", "sockets x cores", "threads", "GHz", "ISA", "DRAM GB/s per socket", "GB/s reached",
               "RAM GiB", "q4_k unpack GB/s", "q8_0 unpack GB/s", "barrier us"]


def _cpu_row(name: str, c) -> list:
    """A CPU as the tables show it: what it is, and the rates the model derives from it (one pool's DRAM)."""
    r = _cpu_rates(c)
    return [name, f"{c.sockets} x {c.cores}", r["workers"], c.ghz, c.isa, c.dram_gbps, r["dram_reached_gbps"],
            c.ram_gb, r["q4_k_unpack_gbps"], r["q8_0_unpack_gbps"], r["barrier_us"]]


def _cpu_rates(c) -> dict:
    """The rates the model derives from a CPU's fields (one pool's DRAM), as the tables and ``--json`` give them."""
    return {"workers": c.workers, "dram_reached_gbps": c.dram_bw() / 1e9, "q4_k_unpack_gbps": c.unpack_bw("q4_k") / 1e9,
            "q8_0_unpack_gbps": c.unpack_bw("q8_0") / 1e9, "barrier_us": c.barrier_s() * 1e6}


def _with_rates(part) -> dict:
    """A GPU's, link's or CPU's fields as JSON, with the rates the model derives from them beside."""
    from dataclasses import asdict

    from moesim.sim.machine import CPU, GPU, Link

    rates = {GPU: lambda g: {"hbm_reached_gbps": g.hbm_gbps * g.mem_eff},
             Link: lambda lk: {"effective_gbps": lk.bandwidth / 1e9}, CPU: _cpu_rates}.get(type(part), lambda _: {})
    return {**asdict(part), **rates(part)}


def _show(name: str, save: Path | None, as_json: bool, force: bool = False, remeasure: bool = False) -> None:
    """One machine (a preset, a file or ``local``), part by part, with what the model derives from each (or its
    fields as JSON), its numbers far past every real part's taken with ``force``; ``save``: written as a hardware file
    too (``local`` measured once, then reused; an existing file only with ``force``: a hand-edited machine is not lost
    to a slip)."""
    from dataclasses import asdict

    from moesim.files import check_output
    from moesim.sim.hardware import get_hardware, this_machine, write_hardware

    if save is not None:
        check_output(save, "hardware file", force=force, inputs=(name,), suffixes=(".toml",))
    if remeasure:
        this_machine(remeasure=True)
    hw = get_hardware(name, force=force)
    if save is not None:
        write_hardware(hw, save, force=force)
    if as_json:  # the fields, and beside them the rates the tables show
        emit_json({**asdict(hw), **{k: _with_rates(getattr(hw, k)) for k in ("gpu", "link", "cpu")
                                    if getattr(hw, k) is not None}})
        return
    console.print(f"{hw.name}: {hw.describe()} (from {hw.source})", soft_wrap=True)
    if hw.gpu is not None:  # a row a GPU, in device order
        table("GPUs and links" if hw.more_gpus else "GPU and link",
              ["GPU", "HBM GB/s", "reached", "TFLOP/s", "GiB", "link", "GB/s effective", "latency us", "engines"],
              [[g.name, g.hbm_gbps, g.hbm_gbps * g.mem_eff, g.tflops, g.hbm_gb, lk.name, lk.bandwidth / 1e9,
                lk.latency_us, lk.engines] for g, lk in hw.gpus])
    if hw.cpu is not None:
        table("CPU: a decode kernel reads weights at the lower of DRAM reached (one pool: one socket's; a pool per "
              "socket: each its own) and what its threads unpack", CPU_COLUMNS, [_cpu_row(hw.cpu.name, hw.cpu)])
    if hw.ssd is not None:
        table("SSD", ["name", "read GB/s", "latency us"], [[hw.ssd.name, hw.ssd.gbps, hw.ssd.latency_us]])


@app.command()
def hardware(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
             template: Annotated[bool, typer.Option("--template", help="Print a commented hardware file to start "
                                                    "your machine's from.")] = False,
             show: Annotated[Optional[str], typer.Option("--show", help="One machine (a preset, a TOML file, or "
                                                         "local) with the rates the model derives from it.")] = None,
             save: Annotated[Optional[Path], typer.Option("--save", click_type=PATH, help="With --show: write that machine as a "
                                                          "hardware file (local: measured once, reused after).")] = None,
             force: Annotated[bool, typer.Option("--force", help="With --show: take a machine whose numbers are far "
                                                 "past every real part's (12288 GiB of GPU memory: MiB?), refused "
                                                 "otherwise as a likely unit slip; with --save too: replace the file "
                                                 "if it exists.")] = False,
             remeasure: Annotated[bool, typer.Option("--remeasure", help="With --show local: measure this machine's "
                                                     "DRAM read and clock again (they are measured once per machine "
                                                     "and kept for every later --hardware local).")] = False) -> None:
    """List the hardware presets: machines (GPU + host link + host CPU), GPUs, links, CPUs, SSDs.

    Use a machine with 'moesim sim run --hardware NAME', describe your own in a TOML file ('moesim hardware
    --template > box.toml'; every key, its unit, default and source: docs/hardware.md), or pass --hardware local
    (this machine, detected, its DRAM bandwidth measured once and kept; --show local --remeasure measures again).
    Swap a machine's link with --link, its CPU with --cpu, add an SSD with --ssd, and set its memory with --vram /
    --ram.

    Example: moesim hardware --template > box.toml; moesim hardware --show local --save here.toml
    """
    from dataclasses import asdict

    from moesim.sim.hardware import TEMPLATE
    from moesim.sim.presets import CPUS, GPUS, LINKS, SSDS, SYSTEMS

    if remeasure and (show or "").lower() != "local":
        raise MoesimError("--remeasure measures this machine again: give --show local")
    if force and show is None:
        raise MoesimError("--force takes the machine --show names (and replaces the file --save names); give --show "
                          "too")
    if template:
        if show is not None or save is not None or as_json:
            raise MoesimError("--template prints a commented hardware file to edit; it takes no --show, --save or "
                              "--json (redirect it: moesim hardware --template > box.toml)")
        print(TEMPLATE, end="")
        return
    if show is not None:
        _show(show, save, as_json, force, remeasure)
        return
    if save is not None:
        raise MoesimError("--save writes the machine --show names; give --show too")
    if as_json:
        emit_json({"systems": {k: {"gpu": g, "link": lk, "cpu": c} for k, (g, lk, c) in SYSTEMS.items()},
                   "gpus": {k: _with_rates(v) for k, v in GPUS.items()},
                   "links": {k: _with_rates(v) for k, v in LINKS.items()},
                   "cpus": {k: _with_rates(v) for k, v in CPUS.items()},
                   "ssds": {k: asdict(v) for k, v in SSDS.items()}})
        return
    table("Machines (--hardware)", ["name", "gpu", "link", "cpu"],
          [[k, g or "none (CPU only)", lk or "-", c] for k, (g, lk, c) in SYSTEMS.items()])
    table("GPUs", ["name", "HBM GB/s", "TFLOP/s bf16", "GiB", "mem eff", "flop eff", "launch us"],
          [[k, g.hbm_gbps, g.tflops, g.hbm_gb, g.mem_eff, g.flop_eff, g.launch_us] for k, g in GPUS.items()])
    table("Host links (--link)", ["name", "GB/s nominal", "efficiency", "GB/s effective", "latency us", "engines"],
          [[k, lk.gbps, lk.efficiency, lk.bandwidth / 1e9, lk.latency_us, lk.engines] for k, lk in LINKS.items()])
    table("Host CPUs (--cpu): a decode kernel reads weights at the lower of DRAM reached and what its threads "
          "unpack (moesim.sim.cpu_rates)", CPU_COLUMNS, [_cpu_row(k, c) for k, c in CPUS.items()])
    table("SSDs (--ssd)", ["name", "read GB/s", "latency us"], [[k, s.gbps, s.latency_us] for k, s in SSDS.items()])


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", "-o", click_type=PATH, help="Folder for the plots and results.")] = Path("moesim-demo"),
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Worker processes for the simulations "
                                      "(0: one per CPU this process may use).")] = 0,
) -> None:
    """The bundled real Mixtral-8x7B trace: what it looks like, a policy table with simulated time per
    token on an RTX 4090 / PCIe 4, the hit-rate and TPOT curves and the activation heatmap.

    Example: moesim demo --out moesim-demo
    """
    with working("starting the demo"):  # its imports (polars, matplotlib) take a second on a first run
        from moesim.cli.demo import run_demo

    run_demo(out, jobs or usable_cpus())


def main() -> None:
    """Entry point: bad input becomes one line on stderr and exit status 1, a usage error (an unknown
    option, a missing argument, a value of the wrong type) one line and status 2, Ctrl-C status 130. Its
    messages name settings as options (``moesim.errors.render``)."""
    reader = READER.set("cli")
    try:
        with warnings.catch_warnings():  # (put back as they were: callers in a process that goes on)
            warnings.simplefilter("default", MoesimWarning)  # each once, whatever the interpreter's filters say
            warnings.showwarning = _warning(warnings.showwarning)
            sys.exit(_run())
    finally:
        READER.reset(reader)


def _warning(shown):
    """``warnings.showwarning`` for the command: moesim's own warnings (``MoesimWarning``: a number past every real
    part's, the unit slip it likely is) one line on stderr, as its errors are; any other as ``shown`` shows it."""
    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, MoesimWarning):
            warn(f"moesim: warning: {message}")
        else:
            shown(message, category, filename, lineno, file, line)

    return show


def entry() -> None:
    """The installed ``moesim`` command: ``main`` in a process of moesim's own (numba's BLAS probe skipped:
    ``moesim.sim.blas_probe``), whose objects are then frozen, so that the interpreter leaves without searching them
    all for cycles (0.1-0.2 s of a warm plan), and which a SIGTERM unwinds (``moesim.errors.unwind``). Callers in a
    process that goes on (tests) call ``main``."""
    blas_probe.skip()  # this process is moesim's
    signal.signal(signal.SIGTERM, unwind)  # a kill removes scratch files and partial outputs, as Ctrl-C does
    try:
        main()
    finally:
        gc.freeze()


def _run() -> int:
    command = typer.main.get_command(app)
    repeated = _repeated(command, sys.argv[1:])
    if repeated:
        print(f"moesim: error: {repeated}", file=sys.stderr)
        return 2
    try:
        status = command(standalone_mode=False)
    except MoesimError as exc:
        print(f"moesim: error: {exc}", file=sys.stderr)
        return 1
    except typer.Abort:
        print("moesim: interrupted", file=sys.stderr)
        return 130
    except MemoryError as exc:  # past the checks made before allocating (an estimate): still one line
        print(f"moesim: error: out of memory{f' ({first_line(exc)})' if str(exc) else ''}; ask for less (fewer "
              "requests, sequences or tokens; a smaller trace)", file=sys.stderr)
        return 1
    except typer.TyperException as exc:  # click's usage errors
        message = " ".join((exc.format_message() if hasattr(exc, "format_message") else str(exc)).split())
        if message:  # empty: the help was asked for by giving no arguments, and is printed
            print(f"moesim: error: {message}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    return status if isinstance(status, int) else 0


def _repeated(command, args: list[str]) -> str | None:
    """Why an option given twice to the command ``args`` runs is refused (click would keep the last silently), or
    None. ``command`` is typer's (click's, as typer carries it). Only the command's own options are counted, each as
    one token or with its value; what click cannot parse is left to it."""
    while hasattr(command, "commands"):  # a group: its first word names the command
        name = next((a for a in args if not a.startswith("-")), None)
        if name not in command.commands:
            return None
        command, args = command.commands[name], args[args.index(name) + 1:]
    options = {flag: p for p in command.params if p.param_type_name == "option"
               for flag in (*p.opts, *p.secondary_opts)}
    seen, tokens = {}, iter(args)
    for token in tokens:
        if token == "--":
            break
        flag, joined, value = token.partition("=")
        param = options.get(flag)
        if param is None:
            continue
        if not param.is_flag and not joined:
            value = next(tokens, "")
        if param.name in seen:
            typed, before = seen[param.name]
            twice = f"{flag} given twice" if typed == flag else f"{typed} and {flag} both given"
            if param.is_flag:
                return f"{twice}: give {'it once' if typed == flag else 'one'}"
            # one run per value: the values go in one (two alike would be one run twice)
            listed = "comma-separated" in (param.help or "").lower() and before != value
            return (f"{twice} ({before}, then {value}): an option takes one value, and the last would win unseen; give "
                    "it once" + (f" (several runs: {flag} {before},{value})" if listed else ""))
        seen[param.name] = flag, value
    return None
