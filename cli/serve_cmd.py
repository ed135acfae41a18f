"""`moesim sim serve`: a stream of requests through a continuous-batching scheduler, latencies and throughput."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from moesim.cli.console import console, emit_json, slots_text, table
from moesim.cli.options import (AsJson, ConfigFile, Context, Cpu, CpuLayers, DramCapacity, Dtype, Gamma, Hardware, Kernel,
                                Link, LowbitDtype, LowbitThreshold, Mode, Model, OtherDtype, PinTrace, Prompt, Ram,
                                Scope, Seed, Split, Ssd, Strategy, TrainTrace, Vram)
from moesim.cli.sim_cmd import app, command_configs, policy_params
from moesim.errors import MoesimError
from moesim.policies.prefetch import PREFETCHERS
from moesim.tracegen.io import load_trace


@app.command()
def serve(
    ctx: typer.Context,
    trace_path: Annotated[Path, typer.Argument(metavar="TRACE", help="Trace file (Parquet).")],
    rate: Annotated[Optional[float], typer.Option(help="Requests per second (Poisson arrivals).")] = None,
    arrivals: Annotated[str, typer.Option(help="poisson (at --rate), burst (every request at time 0), or a CSV or "
                                               "Parquet file with a row per request: arrival_s (seconds) and "
                                               "optionally seq (the trace sequence it serves).")] = "poisson",
    requests: Annotated[Optional[int], typer.Option(help="Requests in the stream (default: one per trace sequence; "
                                                         "more reuse the sequences, shuffled).")] = None,
    max_batch: Annotated[int, typer.Option(help="Requests running at once (vLLM's max_num_seqs).")] = 8,
    max_batch_tokens: Annotated[int, typer.Option(help="Tokens per step (vLLM's max_num_batched_tokens).")] = 2048,
    chunked_prefill: Annotated[bool, typer.Option(help="Split a prompt across steps to fit the token budget.")] = True,
    draft_tokens: Annotated[int, typer.Option(help="Speculative decoding: draft tokens verified per step (0: off).")]
    = 0,
    acceptance: Annotated[float, typer.Option(help="Speculative decoding: the chance each draft is accepted.")] = 0.8,
    arrival_seed: Annotated[int, typer.Option(help="Seed of the arrivals, the shuffles and the acceptances.")] = 0,
    dynamic_kv: Annotated[bool, typer.Option("--dynamic-kv", help="With --capacity auto: the expert cache gets, step "
                                             "by step, the GPU memory the running requests' KV cache leaves (else "
                                             "it keeps what the KV cache of max-batch requests of the longest "
                                             "sequence leaves).")] = False,
    slo_ttft_s: Annotated[Optional[float], typer.Option("--slo-ttft", help="TTFT target in seconds (reports the "
                                                        "share of requests meeting every target).")] = None,
    slo_tpot_s: Annotated[Optional[float], typer.Option("--slo-tpot", help="TPOT target in seconds.")] = None,
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
    policy: Annotated[str, typer.Option(help="Replacement policy (an online one: lru, lfu, fifo, arc, lecar, gamma, "
                                             "static, random, ...).")] = "lru",
    capacity: Annotated[str, typer.Option(help="GPU expert slots per layer (or in the pool with --scope global); 0: no "
                                               "expert cache; auto: as many as GPU memory holds beside the KV cache "
                                               "of max-batch requests.")] = "auto",
    scope: Scope = "per-layer",
    split: Split = "uniform",
    dram_capacity: DramCapacity = None,
    prefetch: Annotated[str, typer.Option(help=f"Prefetcher that predicts the next layer: "
                                               f"{', '.join(p for p in PREFETCHERS if p not in ('popular', 'prompt'))}.")]
    = "none",
    mode: Mode = "fallback",
    kernel: Kernel = "fused",
    context: Context = 0,
    prompt: Prompt = 0,
    dtype: Dtype = None,
    other_dtype: OtherDtype = None,
    gamma: Gamma = None,
    seed: Seed = None,
    pin_trace: PinTrace = None,
    train_trace: TrainTrace = None,
    config_file: ConfigFile = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Also write one row per request here (Parquet).")]
    = None,
    as_json: AsJson = False,
) -> None:
    """Serve TRACE's sequences as requests arriving over time: a continuous-batching scheduler (vLLM's) forms
    each step, the discrete-event simulator runs it; TTFT, TPOT, latency, throughput and the hit rate.

    Example: moesim sim serve t.parquet --rate 2 --requests 64 --max-batch 8 --hardware rtx4090 --dtype q4_k
    """
    from moesim.files import atomic_output, check_output
    from moesim.sim.serve import simulate_serve

    given = policy_params(gamma=gamma, seed=seed, pin_trace=pin_trace)
    configs = command_configs(ctx, config_file, policy, capacity, given, cpu_layers, lowbit_threshold, lowbit_dtype,
                              train_trace)
    if len(configs) > 1:
        raise MoesimError("sim serve runs one policy at one capacity; sweep several with 'moesim sweep' (kind serve)")
    if out is not None:
        check_output(out, "requests file", inputs=(trace_path,))
    trace = load_trace(trace_path)
    result = simulate_serve(trace, configs[0])
    if out is not None:
        with atomic_output(out) as tmp:
            result.requests.write_parquet(tmp)
    if as_json:
        emit_json(result.as_dict())
        return
    s, c = result.summary, result.config
    sv = c.serve
    arrivals_text = {"poisson": f"Poisson {sv.rate:g}/s", "burst": "all at 0"}.get(sv.arrivals, sv.arrivals)
    table(f"{trace_path}: {result.model} on {result.hardware}, {c.execution.strategy}, {c.cache.policy} "
          f"@ {slots_text(s['capacity'])}, {s['requests']} requests ({arrivals_text}), max batch {sv.max_batch}, "
          f"{sv.max_batch_tokens} tokens/step" + (f", {sv.draft_tokens} draft tokens at {sv.acceptance:g}"
                                                  if sv.draft_tokens else "") + "; times in ms",
          ["", "mean", "p50", "p90", "p99"],
          [["TTFT", *(s[f"ttft_{q}_s"] * 1e3 for q in ("mean", "p50", "p90", "p99"))],
           ["TPOT", s["tpot_s"] * 1e3, *(s[f"tpot_{q}_s"] * 1e3 for q in ("p50", "p90", "p99"))],
           ["end to end", *(s[f"e2e_{q}_s"] * 1e3 for q in ("mean", "p50", "p90", "p99"))],
           ["queueing", *(s[f"queue_{q}_s"] * 1e3 for q in ("mean", "p50", "p90", "p99"))]])
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
