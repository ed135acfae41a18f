"""Discrete-event simulator throughput: expert accesses per second on one core, against libCacheSim.

Builds a synthetic trace (64 experts, top-8, 32 layers; 20M accesses by default) of the OLMoE
preset's shape scaled to 32 layers, simulates it with the full cost model (RTX 4090, PCIe 4) under
LRU with C slots per layer and no prefetch, then with oracle next-layer prefetch, and prints
accesses/s. For scale it runs libCacheSim's LRU (hit counting only, no time) on the same stream,
one cache per layer, and prints the ratio. Times exclude compilation and trace generation; the
simulator's include building the request rows and the cost tables.

    python benchmarks/des_throughput.py [--accesses 20000000] [--capacity-per-layer 16]
"""

from __future__ import annotations

import argparse
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
    args = ap.parse_args()
    layers, experts = BENCH_LAYERS, BENCH_EXPERTS
    trace = benchmark_trace(args.accesses)
    model = replace(get_model("olmoe-1b-7b"), num_layers=layers)
    hw = get_hardware("rtx4090")
    cap = args.capacity_per_layer
    small = benchmark_trace(2048, sequences=2, seed=1)
    print(f"trace: {trace.accesses:,} accesses ({layers} layers, {experts} experts, top-{BENCH_K}); {cap} slots per "
          f"layer; {hw.name}; one core")
    rates = {}
    for prefetch in ("none", "oracle"):
        config = Config.build(policy="lru", capacity=cap, prefetch=prefetch)
        simulate_des(small, config, model, hw)  # compile
        start = time.perf_counter()
        r = simulate_des(trace, config, model, hw)
        rates[prefetch] = trace.accesses / (time.perf_counter() - start)
        print(f"moesim DES lru, prefetch {prefetch:6}: {rates[prefetch] / 1e6:7.1f} M acc/s  "
              f"(TPOT {r.tpot_s * 1e3:.2f} ms, hit rate {r.hit_rate:.4f})")
    with tempfile.TemporaryDirectory() as tmp:
        paths = [write_oracle_general(stream(trace.experts, experts, layer), Path(tmp) / f"l{layer}.bin")
                 for layer in range(layers)]
        seconds, _ = timed_per_layer("lru", paths, cap, trace.accesses // layers)
    lib = trace.accesses / seconds
    print(f"libCacheSim LRU (hits only)      : {lib / 1e6:7.1f} M acc/s")
    print(f"ratio DES / libCacheSim: no prefetch {rates['none'] / lib:.2f}x, oracle prefetch "
          f"{rates['oracle'] / lib:.2f}x")


if __name__ == "__main__":
    main()
