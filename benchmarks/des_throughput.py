"""Discrete-event simulator throughput: expert accesses per second on one core, against libCacheSim.

Builds a synthetic trace (64 experts, top-8, 32 layers; 20M accesses by default) of the OLMoE
preset's shape scaled to 32 layers, simulates it with the full cost model (RTX 4090, PCIe 4) under
LRU with C slots per layer and no prefetch, then with oracle next-layer prefetch, and prints
accesses/s. For scale it runs libCacheSim's LRU (hit counting only, no time) on the same stream,
one cache per layer, and prints the ratio. Each of the three is timed ``--runs`` times, in turn; the medians,
ranges and each run's ratio against the libCacheSim run beside it are printed. Times exclude compilation and
trace generation; the simulator's include building the request rows and the cost tables.

    python benchmarks/des_throughput.py [--accesses 20000000] [--capacity-per-layer 16] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from moesim.sim.config import Config
from moesim.sim.des import simulate_des
from moesim.sim.hardware import get_hardware
from moesim.tracegen.models import get_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracle import (BENCH_EXPERTS, BENCH_K, BENCH_LAYERS, benchmark_trace, stream, timed_per_layer,  # noqa: E402
                    write_oracle_general)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accesses", type=int, default=20_000_000)
    ap.add_argument("--capacity-per-layer", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    layers, experts = BENCH_LAYERS, BENCH_EXPERTS
    trace = benchmark_trace(args.accesses)
    model = replace(get_model("olmoe-1b-7b"), num_layers=layers)
    hw = get_hardware("rtx4090")
    cap = args.capacity_per_layer
    small = benchmark_trace(2048, sequences=2, seed=1)
    print(f"trace: {trace.accesses:,} accesses ({layers} layers, {experts} experts, top-{BENCH_K}); {cap} slots per "
          f"layer; {hw.name}; one core")
    configs = {prefetch: Config.build(policy="lru", capacity=cap, prefetch=prefetch) for prefetch in ("none", "oracle")}
    for config in configs.values():
        simulate_des(small, config, model, hw)  # compile
    rates = {"none": [], "oracle": [], "lib": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths = [write_oracle_general(stream(trace.experts, experts, layer), Path(tmp) / f"l{layer}.bin")
                 for layer in range(layers)]
        for _ in range(args.runs):  # the three timed in turn, so that the host's swings touch each alike
            for prefetch, config in configs.items():
                start = time.perf_counter()
                r = simulate_des(trace, config, model, hw)
                rates[prefetch].append(trace.accesses / (time.perf_counter() - start))
                if len(rates[prefetch]) == 1:
                    print(f"moesim DES lru, prefetch {prefetch:6}: TPOT {r.tpot_s * 1e3:.2f} ms, hit rate "
                          f"{r.hit_rate:.4f}")
            seconds, _ = timed_per_layer("lru", paths, cap, trace.accesses // layers)
            rates["lib"].append(trace.accesses / seconds)
    names = {"none": "moesim DES lru, no prefetch    ", "oracle": "moesim DES lru, oracle prefetch",
             "lib": "libCacheSim LRU (hits only)    "}
    for key, name in names.items():
        print(f"{name}: {_median_range(rates[key], 1e-6)} M acc/s")
    for prefetch in ("none", "oracle"):  # each run's ratio against libCacheSim's run beside it
        ratios = [a / b for a, b in zip(rates[prefetch], rates["lib"])]
        print(f"ratio DES / libCacheSim, {'no' if prefetch == 'none' else prefetch} prefetch: {_median_range(ratios)}x")


def _median_range(values: list[float], scale: float = 1.0) -> str:
    values = sorted(v * scale for v in values)
    return f"{statistics.median(values):.2f} ({values[0]:.2f}-{values[-1]:.2f}, {len(values)} runs)"


if __name__ == "__main__":
    main()
