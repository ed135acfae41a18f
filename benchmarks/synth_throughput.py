"""How fast `moesim trace synth` makes accesses, and how fast a big trace writes and loads.

Run: python benchmarks/synth_throughput.py [--accesses 100000000]
The issue's target: 10^8 accesses in well under a minute.
"""

import argparse
import tempfile
import time
from pathlib import Path

from moesim.tracegen.io import load_trace, write_trace
from moesim.tracegen.synth import synth_trace


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accesses", type=float, default=1e8)
    parser.add_argument("--io", action="store_true", help="also time writing and loading the trace")
    args = parser.parse_args()
    layers, experts, k, sequences = 16, 64, 8, 200  # OLMoE-shaped
    tokens = int(args.accesses // (sequences * layers * k))
    synth_trace(2, 8, 2, 1, 4, seed=0)  # compile (or load the numba cache) outside the timing
    start = time.perf_counter()
    trace = synth_trace(layers, experts, k, sequences, tokens, seed=1)
    took = time.perf_counter() - start
    print(f"synth: {trace.accesses:,} accesses in {took:.2f} s = {trace.accesses / took / 1e6:.1f} M accesses/s")
    if args.io:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "big.parquet"
            start = time.perf_counter()
            write_trace(trace, path)
            wrote = time.perf_counter() - start
            start = time.perf_counter()
            load_trace(path)
            loaded = time.perf_counter() - start
            rows = trace.num_rows * layers
            print(f"write: {rows:,} rows in {wrote:.2f} s ({path.stat().st_size / 1e6:.0f} MB); "
                  f"load: {loaded:.2f} s = {rows / loaded / 1e6:.1f} M rows/s")


if __name__ == "__main__":
    main()
