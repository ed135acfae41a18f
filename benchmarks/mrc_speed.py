"""Whole LRU, Belady and γ-cache miss-ratio curves against one capacity, and against libCacheSim.

On the benchmarks' synthetic stream (32 layers, 64 experts, top-8; sequential semantics, per-layer
caches) it times, for each policy, ``moesim.sim.mrc.curve`` at every capacity 1..64 (one pass of
stack distances), one run at ``--capacity-per-layer``, and libCacheSim's run once per capacity on
every layer's stream (what a curve costs with it; it has no γ-cache), checks that the curve's misses equal
libCacheSim's at every capacity, and prints the times and ratios. ``--semantics step`` times Belady's
one pass under step semantics (capacities 8..64) against one run (libCacheSim has no step semantics).
``--runs`` repeats and prints medians with the range. Times exclude compilation; one core.

    python benchmarks/mrc_speed.py [--accesses 20000000] [--runs 3] [--policy lru,belady,gamma] [--semantics step]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from moesim.sim.config import CacheConfig
from moesim.sim.hitrate import simulate
from moesim.sim.mrc import curve, stack_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracle import (BENCH_EXPERTS, BENCH_LAYERS, CACHES, benchmark_trace, stream, timed_per_layer,  # noqa: E402
                    write_oracle_general)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accesses", type=int, default=20_000_000)
    ap.add_argument("--capacity-per-layer", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--policy", default="lru,belady,gamma")
    ap.add_argument("--semantics", choices=["sequential", "step"], default="sequential")
    ap.add_argument("--no-libcachesim", action="store_true", help="Skip libCacheSim's per-capacity curve (slow).")
    args = ap.parse_args()
    trace = benchmark_trace(args.accesses)
    print(f"trace: {trace.accesses:,} accesses ({BENCH_LAYERS} layers, {BENCH_EXPERTS} experts); {args.semantics}, "
          f"per-layer; medians of {args.runs} run(s) with the range")
    with tempfile.TemporaryDirectory() as tmp:
        paths = [write_oracle_general(stream(trace.experts, BENCH_EXPERTS, layer), Path(tmp) / f"layer{layer}.bin")
                 for layer in range(BENCH_LAYERS)]
        for policy in args.policy.split(","):
            _measure(trace, paths, policy, args)


def _measure(trace, paths: list[Path], policy: str, args) -> None:
    whole = CacheConfig(policy=policy, semantics=args.semantics)
    single = CacheConfig(policy=policy, capacity=args.capacity_per_layer, semantics=args.semantics)
    small = benchmark_trace(100_000, sequences=2, seed=1)
    curve(small, whole), simulate(small, single)  # compile
    one, full, theirs, agree = [], [], [], True
    for _ in range(args.runs):
        start = time.perf_counter()
        rows = curve(trace, whole)
        full.append(time.perf_counter() - start)
        one.append(simulate(trace, single).seconds)
        if not args.no_libcachesim and policy in CACHES and args.semantics == "sequential":
            seconds = 0.0
            for r in rows:
                s, misses = timed_per_layer(policy, paths, r.capacity, trace.accesses // BENCH_LAYERS)
                seconds += s
                agree &= misses == r.misses
            theirs.append(seconds)
    print(f"{policy}: one capacity ({args.capacity_per_layer}/layer)  {_fmt(one)}")
    how = "one pass" if stack_of(policy, args.semantics) is not None else "a run per capacity, threads"
    print(f"{policy}: whole curve, {rows[0].capacity}..{BENCH_EXPERTS} ({how}) {_fmt(full)}   "
          f"{statistics.median(full) / statistics.median(one):.2f}x one capacity")
    if theirs:
        print(f"{policy}: libCacheSim, one run per capacity {_fmt(theirs)}   moesim's curve "
              f"{statistics.median(theirs) / statistics.median(full):.0f}x faster; misses agree at every capacity: "
              f"{'yes' if agree else 'NO'}")


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f} s ({min(values):.2f}-{max(values):.2f})"


if __name__ == "__main__":
    main()
