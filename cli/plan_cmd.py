"""`moesim plan`: every execution strategy for a model on a machine, ranked by tokens/s within its memory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from moesim.cli.console import console, emit_json, slots_text, table
from moesim.cli.options import Cpu, Hardware, Link, Ram, Split, Vram
from moesim.files import check_output


def plan(
    model: Annotated[str, typer.Option(help="Model preset (see 'moesim models').")],
    hardware: Hardware = "rtx4090",
    vram: Vram = None,
    ram: Ram = None,
    cpu: Cpu = None,
    link: Link = None,
    trace: Annotated[Optional[Path], typer.Option(help="Routing trace to simulate (default: the bundled one for "
                                                       "mixtral-8x7b, else a synthetic trace of the model).")] = None,
    context: Annotated[int, typer.Option(help="Prompt tokens: prefilled for the time to first token, then held in "
                                              "the KV cache.")] = 512,
    batch: Annotated[int, typer.Option(help="Sequences decoded in lockstep.")] = 1,
    split: Split = "uniform",
    dtype: Annotated[str, typer.Option(help="Comma-separated expert formats to consider: bf16, fp8, q8_0, q4_k, "
                                            "mxfp4, int4, int2.")] = "bf16,q8_0,q4_k",
    plot: Annotated[Optional[Path], typer.Option(help="Also draw tokens/s against GPU memory per strategy "
                                                      "(PNG or SVG).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: {\"rows\": [...], \"skipped\": [...]}.")]
    = False,
) -> None:
    """What to put where: every execution strategy (GPU expert cache, experts on the CPU, Fiddler, hybrid,
    low-bit misses) in every format, sized to this machine's memory, simulated on a trace and ranked
    by decode tokens/s, with the engine settings that reproduce each.

    Example: moesim plan --model mixtral-8x7b --hardware rtx4090 --plot plan.png
    """
    from moesim.experiments.plan import curves, plan as run_plan

    if plot is not None:
        check_output(plot, "figure", inputs=() if trace is None else (trace,))
    formats = [d.strip() for d in dtype.split(",") if d.strip()]
    with console.status("simulating each strategy (the first run compiles each policy)"):
        result = run_plan(model, hardware, vram, ram, trace, context, batch, formats, cpu, link, split)
    if plot is not None and result.rows:
        from moesim.plots.plan import plot_plan

        plot_plan(result, curves(result), plot)
    if as_json:
        emit_json(result.as_dict())
        return
    table(f"{result.model} on {result.hardware}: {result.machine}; {result.trace}; batch {batch}, prompt {context} "
          f"tokens. Ranked by decode tokens/s; TTFT in s, memory in GiB",
          ["#", "strategy", "format", "policy", "prefetch", "C", "CPU layers", "tok/s", "TPOT ms", "TTFT",
           "VRAM", "RAM", "on CPU", "run it with"],
          [[r["rank"], r["strategy"], r["dtype"], r["policy"] or "-", r["prefetch"] or "-",
            "-" if r["capacity"] is None else f"{slots_text(r['capacity'])}{' in all' if r['scope'] == 'global' else ''}",
            "-" if r["cpu_layers"] is None else r["cpu_layers"],
            r["tokens_per_s"], r["tpot_s"] * 1e3, r["ttft_s"], r["vram_gb"], r["ram_gb"], r["cpu_share"],
            f"{r['engine']}" + (f": {r['engine_flags']}" if r["engine_flags"] else "")] for r in result.rows])
    for s in result.skipped:
        console.print(f"not run: {s['strategy']} ({s['dtype']}{', ' + s['policy'] if s['policy'] else ''}): "
                      f"{s['reason']}", soft_wrap=True)
    if plot is not None and result.rows:
        console.print(f"wrote {plot}")
