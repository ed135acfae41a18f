"""llama.cpp on this machine against moesim's prediction for the same model, format and threads (issue 37).

Random-weight Qwen3-MoE models (``moesim.replay.llamacpp_model``) of three shapes, an OLMoE-like one (many narrow
experts, top-8), a Qwen3-like one and a Mixtral-like one (few wide experts, top-2), are written as GGUF files in
each format (bf16, q8_0 and q4_0 by ``gguf``; q4_k_m and mxfp4 by llama.cpp's quantizer from the bf16 file) and
decoded by llama.cpp (``moesim.replay.llamacpp_run``: batch 1, its own timers, the median of ``--runs`` runs
after a warm-up). moesim predicts each with ``--hardware local`` as it measures this machine: the clock under
load once, and the DRAM read bandwidth probed right before and after each configuration's runs (this host's
bandwidth swings from minute to minute: the probe's range is printed beside each row, and the prediction uses
its mean). Nothing is fitted: every configuration is held out.

    pip install ".[llamacpp]"    # llama-cpp-python; CMAKE_ARGS=-DGGML_NATIVE=ON builds it for this CPU
    python benchmarks/llamacpp_fidelity.py [--threads 1,2] [--formats bf16,q8_0,q4_0,q4_k_m,mxfp4]
                                           [--shapes olmoe,qwen3,mixtral] [--runs 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from moesim import simulate
from moesim.errors import MoesimError
from moesim.experiments.plan import plan_trace
from moesim.replay.llamacpp_model import GGML_TYPES, qwen3_moe, write_gguf
from moesim.replay.llamacpp_run import decode_tok_s, quantize, system_info
from moesim.sim.local_machine import detect, measure_dram_gbps
from moesim.tracegen.model_files import load_model_file

SHAPES = {  # (layers, experts, top_k, d_model, expert width): 0.2-0.45 B parameters each
    "olmoe": (8, 64, 8, 1024, 256),
    "qwen3": (8, 32, 4, 768, 512),
    "mixtral": (4, 8, 2, 1024, 2048),
}
PROBE_BYTES = 512 << 20


def model_file(shape: str, fmt: str, folder: Path) -> Path:
    """The shape's GGUF in ``fmt``, written once into ``folder`` (a quantised one from its bf16 file)."""
    path = folder / f"{shape}-{fmt}.gguf"
    if not path.exists():
        spec = qwen3_moe(f"random-{shape}", *SHAPES[shape])
        if fmt in GGML_TYPES:
            write_gguf(spec, fmt, path)
        else:
            quantize(model_file(shape, "bf16", folder), path, fmt)
    return path


def predict(path: Path, threads: int, machine, dram_gbps: float) -> float:
    """moesim's decode tokens/s for the file on this machine, its DRAM at ``dram_gbps``."""
    spec = load_model_file(path)
    cpu = replace(machine.cpu, dram_gbps=dram_gbps / machine.cpu.sockets, threads=threads)
    trace, _ = plan_trace(spec, None, 2)
    return simulate(trace, model=spec, hardware=replace(machine, cpu=cpu), strategy="cpu-experts",
                    warmup=1).tokens_per_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default=",".join(str(t) for t in range(1, (os.cpu_count() or 1) + 1)))
    parser.add_argument("--formats", default="bf16,q8_0,q4_0,q4_k_m,mxfp4")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--workdir", type=Path, help="keep the GGUF files here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="write every row and the summary here")
    args = parser.parse_args()
    unknown = set(args.shapes.split(",")) - set(SHAPES)
    if unknown:
        raise SystemExit(f"unknown shape(s) {', '.join(sorted(unknown))}; choose from {', '.join(SHAPES)}")
    try:
        run(args)
    except MoesimError as exc:
        raise SystemExit(f"llamacpp_fidelity: {exc}") from None


def run(args) -> None:
    """Every configuration, measured and predicted, printed as it goes; the summary (and ``--json``)."""
    print(system_info())
    machine = detect()
    print(f"moesim --hardware local: {machine.source}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.workdir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"{'shape':8} {'format':7} {'t':>2} {'llama.cpp tok/s (range)':>26} {'moesim':>8} {'error':>7}  "
              f"DRAM probe GB/s")
        for shape in args.shapes.split(","):
            for fmt in args.formats.split(","):
                path = model_file(shape, fmt, folder)
                for threads in (int(t) for t in args.threads.split(",")):
                    before = measure_dram_gbps(PROBE_BYTES)
                    rates = decode_tok_s(path, threads, args.tokens, args.runs)
                    after = measure_dram_gbps(PROBE_BYTES)
                    measured = statistics.median(rates)
                    predicted = predict(path, threads, machine, (before + after) / 2)
                    error = (predicted - measured) / measured
                    rows.append({"shape": shape, "format": fmt, "threads": threads, "measured": measured,
                                 "runs": rates, "predicted": predicted, "error": error, "probe": [before, after]})
                    print(f"{shape:8} {fmt:7} {threads:2} {measured:9.1f} ({min(rates):6.1f}-{max(rates):6.1f})"
                          f"{'':4} {predicted:8.1f} {100 * error:+6.0f}%  {before:5.1f} / {after:5.1f}"
                          + ("  (swung)" if max(before, after) > 1.3 * min(before, after) else ""))
    errors = sorted(abs(r["error"]) for r in rows)
    worst = max(rows, key=lambda r: abs(r["error"]))
    probes = [p for r in rows for p in r["probe"]]
    summary = {"configurations": len(rows), "median_abs_error": statistics.median(errors),
               "worst": [worst["shape"], worst["format"], worst["threads"], worst["error"]],
               "within_10": sum(e <= 0.10 for e in errors), "probe_range_gbps": [min(probes), max(probes)]}
    print(f"\n{len(rows)} configurations, none fitted: median |error| {100 * summary['median_abs_error']:.0f}%, "
          f"worst {worst['shape']} {worst['format']} t{worst['threads']} {100 * worst['error']:+.0f}%; "
          f"{summary['within_10']} within 10%; DRAM probe {min(probes):.1f}-{max(probes):.1f} GB/s")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary, "machine": machine.source}, indent=1))


if __name__ == "__main__":
    main()
