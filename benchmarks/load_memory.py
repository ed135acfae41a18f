"""Peak memory of loading a trace, against its dense int16 array.

Writes a synthetic OLMoE-shaped trace of ~100M expert accesses (16 layers, top-8 of 64; 100
sequences of 7813 tokens) unless given one, then loads it in a fresh process and prints the peak
resident memory above the process's baseline after the imports (``ru_maxrss``, as ``/usr/bin/time
-v`` reports it) and its ratio to the dense array.

    python benchmarks/load_memory.py [--trace T.parquet] [--runs 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import resource, sys
from moesim.tracegen.io import load_trace
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
trace = load_trace(sys.argv[1])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(trace.experts.nbytes, base * 1024, peak * 1024)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.trace or Path(tmp) / "big.parquet"
        if args.trace is None:
            subprocess.run([sys.executable, "-m", "moesim", "trace", "synth", "--model", "olmoe-1b-7b", "--sequences",
                            "100", "--tokens", "7813", "--seed", "1", "--out", str(path)], check=True,
                           stdout=subprocess.DEVNULL)
        ratios = []
        for _ in range(args.runs):
            dense, base, peak = map(int, subprocess.run([sys.executable, "-c", CHILD, str(path)], check=True,
                                                        capture_output=True, text=True).stdout.split())
            ratios.append((peak - base) / dense)
            print(f"dense {dense / 1e6:.0f} MB; peak {peak / 1e6:.0f} MB, {(peak - base) / 1e6:.0f} MB above the "
                  f"import baseline = {ratios[-1]:.2f}x the dense array")
        ratios.sort()
        print(f"median {ratios[len(ratios) // 2]:.2f}x (range {ratios[0]:.2f}-{ratios[-1]:.2f}x)")


if __name__ == "__main__":
    main()
