"""Hit-rate engine throughput against libCacheSim on the same request stream, in one process.

Builds a synthetic trace (64 experts, top-8, 32 layers; 50M accesses by default), runs each policy
here (sequential semantics, per-layer scope, C slots per layer) and in libCacheSim's own C loop
(one cache per layer, ``process_trace`` over that layer's stream as an oracleGeneral file, the
format its Belady needs; the 32 runs' times are summed),
checks the miss counts agree where they must, and prints accesses/s of both and the ratio; for a
policy that leaves the engine here (LRU's ranks, the lanes of FIFO, LFU, Belady, ARC and LeCaR, ARC's lists and
LeCaR's keyed slots) also the
engine's own rate on the same stream (run as a run that logs one eviction, which takes the engine). Times
exclude compilation and trace generation but include each policy's set-up (Belady's next uses,
ml-ffn's predictions); libCacheSim's include reading its trace file, which is
how it consumes a trace. ml-ffn and gamma have no libCacheSim counterpart; their own rate is printed.

    python benchmarks/hitrate_vs_libcachesim.py [--accesses 50000000] [--capacity-per-layer 16] [--fullest 1]
        [--experts 64 --top-k 8] [--policies arc,fifo]

``--fullest`` sets the ``fullest`` of every policy's lane paths (``fast_paths``), the share of a
layer's experts above which FIFO, LFU and Belady leave their lanes for the engine, and (in lanes wider than eight
slots) ARC and LeCaR for their layer paths (1: the lanes take every capacity; default: each policy's own). ``--experts`` and
``--top-k`` give the trace another router's shape (Mixtral's: 8, 2), ``--policies`` a subset.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from importlib import import_module
from pathlib import Path

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"  # one core: ml-ffn's batched predictions must not borrow a second

from moesim.policies import POLICIES as ALL, get_policy  # noqa: E402
from moesim.policies.ml_ffn_train import save_model, train  # noqa: E402
from moesim.sim.config import CacheConfig  # noqa: E402
from moesim.sim.hitrate import simulate  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracle import (BENCH_EXPERTS, BENCH_K, BENCH_LAYERS, CACHES, benchmark_trace, stream,  # noqa: E402
                    timed_per_layer, write_oracle_general)

EXACT = {"lru", "fifo", "belady", "lfu", "arc"}
POLICIES = ("lru", "fifo", "belady", "lfu", "arc", "lecar", "gamma", "ml-ffn")


def leaves_engine(policy: str) -> bool:
    """Whether ``simulate`` may take this policy off the engine per layer under sequential semantics: it
    declares fast paths (LRU's ranks, FIFO's, LFU's and Belady's lanes, ARC's and LeCaR's)."""
    return bool(get_policy(policy).fast_paths)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accesses", type=int, default=50_000_000)
    ap.add_argument("--capacity-per-layer", type=int, default=16)
    ap.add_argument("--fullest", type=float)
    ap.add_argument("--experts", type=int, default=BENCH_EXPERTS)
    ap.add_argument("--top-k", type=int, default=BENCH_K)
    ap.add_argument("--policies", default=",".join(POLICIES))
    args = ap.parse_args()
    policies = args.policies.split(",")
    if not set(policies) <= set(POLICIES):
        ap.error(f"--policies: choose from {','.join(POLICIES)}")
    if args.fullest is not None:
        for name in ALL:
            spec = get_policy(name)
            import_module(f"moesim.policies.{name.replace('-', '_')}").SPEC = replace(spec, fast_paths=tuple(
                replace(path, fullest=args.fullest) if path.kind != "counts" else path for path in spec.fast_paths))
    layers, experts = BENCH_LAYERS, args.experts
    trace = benchmark_trace(args.accesses, experts=experts, top_k=args.top_k)
    cap = args.capacity_per_layer
    print(f"trace: {trace.accesses:,} accesses ({layers} layers, {experts} experts, top-{args.top_k}); "
          f"{cap} slots per layer; one core")
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "ffn.npz"
        if "ml-ffn" in policies:
            small = benchmark_trace(65536, sequences=4, seed=1, experts=experts, top_k=args.top_k)
            save_model(train(small, per_layer=False, epochs=3)[0], model)
        paths = [write_oracle_general(stream(trace.experts, experts, layer), Path(tmp) / f"layer{layer}.bin")
                 for layer in range(layers)]
        print(f"{'policy':8} {'moesim acc/s':>14} {'engine acc/s':>14} {'libCacheSim acc/s':>18} {'ratio':>7}  "
              "misses agree")
        for policy in policies:
            cache = CacheConfig(policy=policy, capacity=cap, semantics="sequential",
                                params={"ml_model": str(model)} if policy == "ml-ffn" else {})
            ours = simulate(trace, cache)
            engine = f"{'-':>14}"
            if leaves_engine(policy):  # logging one eviction takes the engine
                engine = f"{simulate(trace, cache, log_evictions=1).accesses_per_s:14,.0f}"
            if policy not in CACHES:
                print(f"{policy:8} {ours.accesses_per_s:14,.0f} {engine} {'-':>18} {'-':>7}")
                continue
            seconds, misses = timed_per_layer(policy, paths, cap, trace.accesses // layers)
            theirs = trace.accesses / seconds
            agree = misses == ours.misses
            note = ("yes" if agree else "NO") if policy in EXACT else \
                f"{'yes' if agree else 'no'} (seeded, differs by design)"
            ratio = ours.accesses_per_s / theirs
            print(f"{policy:8} {ours.accesses_per_s:14,.0f} {engine} {theirs:18,.0f} {ratio:6.1f}x  {note}")


if __name__ == "__main__":
    main()
