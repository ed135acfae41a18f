"""Sweep wall time with one worker against two: what ``--jobs`` buys on this machine.

Writes a synthetic OLMoE-shaped trace (16 layers, 64 experts, top-8; 4M accesses by default),
then runs the same sweep (6 policies x 5 capacities x 2 scopes, hit rates) with --jobs 1 and
--jobs 2, each from scratch, after one small warm-up sweep that fills numba's on-disk cache.
Prints both wall times and the ratio, and checks the two results files agree row for row.

    python benchmarks/sweep_jobs.py [--accesses 4000000] [--kind hitrate|des]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import polars as pl

from moesim.tracegen.models import get_model
from moesim.experiments.sweep import load_spec, run_sweep
from moesim.tracegen.io import write_trace
from moesim.tracegen.synth import synth_trace

SPEC = """traces = ["{trace}"]
kind = "{kind}"
[axes]
policy = ["belady", "lru", "lfu", "fifo", "arc", "gamma"]
capacity = {capacities}
scope = ["per-layer", "global"]
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accesses", type=int, default=4_000_000)
    ap.add_argument("--kind", choices=("hitrate", "des"), default="hitrate")
    args = ap.parse_args()
    olmoe = get_model("olmoe-1b-7b")
    sequences = 16
    tokens = max(1, args.accesses // (olmoe.num_layers * olmoe.top_k * sequences))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trace = synth_trace(olmoe.num_layers, olmoe.num_experts, olmoe.top_k, sequences, tokens, seed=0,
                            model=olmoe.name, meta=olmoe.trace_meta())
        write_trace(trace, tmp / "t.parquet")
        spec = tmp / "spec.toml"
        spec.write_text(SPEC.format(trace=tmp / "t.parquet", kind=args.kind, capacities=[8, 16, 24, 32, 48]))
        small = synth_trace(olmoe.num_layers, olmoe.num_experts, olmoe.top_k, 1, 4, seed=1, model=olmoe.name,
                            meta=olmoe.trace_meta())
        write_trace(small, tmp / "small.parquet")
        warm = tmp / "warm.toml"
        warm.write_text(SPEC.format(trace=tmp / "small.parquet", kind=args.kind, capacities=[8, 16]))
        run_sweep(load_spec(warm), tmp / "warm.parquet")
        print(f"trace: {trace.accesses:,} accesses (OLMoE shape); 60 configurations ({args.kind}); "
              f"6 policies x 5 capacities x 2 scopes")
        seconds = {}
        for jobs in (1, 2):
            start = time.perf_counter()
            run_sweep(load_spec(spec), tmp / f"jobs{jobs}.parquet", jobs=jobs)
            seconds[jobs] = time.perf_counter() - start
            print(f"--jobs {jobs}: {seconds[jobs]:6.2f} s")
        volatile = ["seconds", "accesses_per_s"]
        one, two = (pl.read_parquet(tmp / f"jobs{j}.parquet").drop(volatile, strict=False).sort("config_id")
                    for j in (1, 2))
        print(f"speedup --jobs 2 over --jobs 1: {seconds[1] / seconds[2]:.2f}x; results identical: {one.equals(two)}")


if __name__ == "__main__":
    main()
