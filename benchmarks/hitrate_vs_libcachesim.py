"""Hit-rate engine throughput against libCacheSim on the same request stream, in one process.

Builds a synthetic trace (64 experts, top-8, 32 layers; 50M accesses by default), runs each policy
here (sequential semantics, per-layer scope, C slots per layer) and in libCacheSim's own C loop
(one cache per layer, ``process_trace`` over that layer's stream as an oracleGeneral file, the
format its Belady needs; the 32 runs' times are summed),
checks the miss counts agree where they must, and prints accesses/s of both and the ratio. Times
exclude compilation and trace generation but include each policy's set-up (Belady's next uses,
ml-ffn's predictions); libCacheSim's include reading its trace file, which is
how it consumes a trace. ml-ffn and gamma have no libCacheSim counterpart; their own rate is printed.

    python benchmarks/hitrate_vs_libcachesim.py [--accesses 50000000] [--capacity-per-layer 16]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"  # one core: ml-ffn's batched predictions must not borrow a second

import libcachesim as lcs  # noqa: E402
import numpy as np  # noqa: E402

from moesim.policies.ml_ffn_train import save_model, train
from moesim.sim.hitrate import simulate
from moesim.tracegen.synth import synth_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracle import CACHES, stream, write_oracle_general  # noqa: E402

EXACT = {"lru", "fifo", "belady", "lfu", "arc"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accesses", type=int, default=50_000_000)
    ap.add_argument("--capacity-per-layer", type=int, default=16)
    args = ap.parse_args()
    layers, experts, k, sequences = 32, 64, 8, 64
    tokens = max(1, args.accesses // (layers * k * sequences))
    trace = synth_trace(layers=layers, experts=experts, top_k=k, sequences=sequences, tokens=tokens, seed=0)
    cap = args.capacity_per_layer
    print(f"trace: {trace.accesses:,} accesses ({layers} layers, {experts} experts, top-{k}); "
          f"{cap} slots per layer; one core")
    with tempfile.TemporaryDirectory() as tmp:
        small = synth_trace(layers=layers, experts=experts, top_k=k, sequences=4, tokens=64, seed=1)
        arrays, _ = train(small, per_layer=False, epochs=3)
        model = Path(tmp) / "ffn.npz"
        save_model(arrays, model)
        paths = [write_oracle_general(stream(trace.experts, experts, layer), Path(tmp) / f"layer{layer}.bin")
                 for layer in range(layers)]
        print(f"{'policy':8} {'moesim acc/s':>14} {'libCacheSim acc/s':>18} {'ratio':>7}  misses agree")
        for policy in ("lru", "fifo", "belady", "lfu", "arc", "lecar", "gamma", "ml-ffn"):
            ours = simulate(trace, policy, cap, "per-layer", "sequential", ml_model=model)
            if policy not in CACHES:
                print(f"{policy:8} {ours.accesses_per_s:14,.0f} {'-':>18} {'-':>7}")
                continue
            seconds, misses = 0.0, 0
            for path in paths:
                reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
                cache = CACHES[policy](cache_size=cap)
                start = time.perf_counter()
                miss_ratio, _ = cache.process_trace(reader)
                seconds += time.perf_counter() - start
                misses += int(round(miss_ratio * trace.accesses / layers))
            theirs = trace.accesses / seconds
            agree = misses == ours.misses
            note = ("yes" if agree else "NO") if policy in EXACT else f"{'yes' if agree else 'no'} (seeded, differs by design)"
            print(f"{policy:8} {ours.accesses_per_s:14,.0f} {theirs:18,.0f} {ours.accesses_per_s / theirs:6.1f}x  {note}")


if __name__ == "__main__":
    main()
