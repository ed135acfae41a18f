"""`moesim sim serve`: a stream of requests through a continuous-batching scheduler, latencies and throughput."""

from pathlib import Path
from typing import Annotated, Optional

import typer

import moesim
from moesim.cli.console import console, emit_json, seconds_text, slots_text, table, working
from moesim.cli.options import PATH, AsJson, TracePath
from moesim.cli.settings import Asked, takes
from moesim.cli.sim_cmd import LOOKUP_TABLES, app
from moesim.policies.prefetch import PREFETCHERS, get_prefetcher
from moesim.sim.config import DECLARED, RUN_SETTINGS, SERVE_DEFAULTS
from moesim.sim.reads import refuse_unread


@app.command()
@takes(RUN_SETTINGS["serve"], defaults={k: str(v) for k, v in SERVE_DEFAULTS.items()},
       helps={"capacity": "GPU expert slots per layer (or in the pool with scope global); 0: no expert cache; auto: "
                          "as many as GPU memory holds beside the KV cache of max-batch requests.",
              "prefetch": "Prefetcher that predicts the next layer: " + ", ".join(
                  p for p in PREFETCHERS if p == "none" or get_prefetcher(p).kind == "next") + ".",
              # one --force, two things it lets happen
              "force": DECLARED["force"].help + " Typed here, it also replaces an existing --out file."})
def serve(
    trace_path: TracePath,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", click_type=PATH, help="Also write one row per request here (Parquet).")]
    = None,
    as_json: AsJson = False,
    *,
    asked: Asked,
) -> None:
    """Serve TRACE's sequences as requests arriving over time: a continuous-batching scheduler (vLLM's) forms
    each step, the discrete-event simulator runs it; TTFT, TPOT, latency, throughput and the hit rate.

    Example: moesim sim serve t.parquet --rate 2 --requests 64 --max-batch 8 --hardware rtx4090 --dtype q4_k
    """
    from moesim.files import atomic_output, check_output
    from moesim.sim.serve import simulate_serve

    config = asked.config("sim serve")
    if out is not None:  # an arrivals file is an input too; --force typed (not a configuration file's) replaces it
        check_output(out, "requests file", force="force" in asked.typed and config.hardware.force,
                     inputs=(trace_path, *asked.inputs, Path(config.serve.arrivals)), suffixes=(".parquet",))
    with working(f"reading {trace_path}, then serving its stream of requests"):
        trace = moesim.load_trace(trace_path)
        model = config.model.spec(trace.meta)
        refuse_unread(asked.typed, models=[model])
        result = simulate_serve(trace, config, model=model, given=asked.typed)  # refuses what the stream leaves unread
    if out is not None:
        with atomic_output(out) as tmp:
            result.requests.write_parquet(tmp)
    if as_json:
        emit_json(result.as_dict())
        return
    s, c = result.summary, result.config
    sv = c.serve
    arrivals_text = f"Poisson {sv.rate:g}/s" if sv.arrivals == "poisson" else \
        "all at 0" if sv.arrivals == "burst" else sv.arrivals
    placed = LOOKUP_TABLES if model.kind == "mole" else f"{c.cache.composed} @ {slots_text(s['capacity'])}"
    table(f"{trace_path}: {result.model} on {result.hardware}, {c.execution.strategy}, {placed}, "
          f"{s['requests']} requests ({arrivals_text}), max batch {sv.max_batch}, "
          f"{sv.max_batch_tokens} tokens/step" + (f", {sv.draft_tokens} draft tokens at {sv.acceptance:g}"
                                                  if sv.draft_tokens else ""),
          ["", "mean", "p50", "p90", "p99"],
          [["TTFT", *(seconds_text(s[f"ttft_{q}_s"]) for q in ("mean", "p50", "p90", "p99"))],
           ["TPOT", seconds_text(s["tpot_s"]), *(seconds_text(s[f"tpot_{q}_s"]) for q in ("p50", "p90", "p99"))],
           ["end to end", *(seconds_text(s[f"e2e_{q}_s"]) for q in ("mean", "p50", "p90", "p99"))],
           ["queueing", *(seconds_text(s[f"queue_{q}_s"]) for q in ("mean", "p50", "p90", "p99"))]])
    if sv.dynamic_kv:
        console.print(f"expert slots per layer {s['slots_min']} to {s['capacity']} ({s['slots_mean']:.3g} on average) "
                      f"as the KV cache grew and shrank; {s['reclaimed']} experts given back to it")
    console.print(f"throughput {s['tokens_per_s']:.4g} tokens/s, {s['requests_per_s']:.4g} requests/s over "
                  f"{s['duration_s']:.4g} s; {s['steps']} steps, {s['mean_running']:.3g} requests each on average; "
                  f"hit rate {s['hit_rate']:.4f}; {s['expert_bytes_per_token'] / 2**20:.4g} MiB of experts copied per "
                  f"token; GPU {s['vram_gb']:.2f} GiB, host {s['ram_gb']:.2f} GiB"
                  + (f"; SLO met by {s['slo_attainment']:.1%}" if "slo_attainment" in s else ""))
    by_batch = result.by_batch()
    table("hit rate by running batch (steps that decode)", ["requests", "steps", "hit rate"],
          [[r["running"], r["steps"], r["hit_rate"]] for r in by_batch.to_dicts()])
    if out is not None:
        console.print(f"wrote {out}")
