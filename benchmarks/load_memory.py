"""Peak memory of loading a trace, against its dense int16 array.

Writes synthetic OLMoE-shaped traces of ~1M, 10M and 100M expert accesses (16 layers, top-8 of 64; 1, 10 and
100 sequences of 7813 tokens) unless given one, then loads each in a fresh process and prints the peak resident
memory above the process's baseline after the imports (``ru_maxrss``, as ``/usr/bin/time -v`` reports it) and
its ratio to the dense array, per run and the median per size; the part of it that is pages of files mapped in
(``RssFile``'s growth: the code of polars' reader, file-backed and shared, not allocated), and the same ratio less
the reader's fixed cost, the peak of loading a one-token trace (those code pages and polars' thread pool, ~31 MB),
which no trace's size changes.

    python benchmarks/load_memory.py [--sizes 1,10,100] [--trace T.parquet] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import resource, sys
from moesim.tracegen.io import load_trace

def mapped_files():
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("RssFile:"))

base, base_files = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, mapped_files()
trace = load_trace(sys.argv[1])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(trace.experts.nbytes, base * 1024, peak * 1024, mapped_files() - base_files)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--sizes", default="1,10,100", help="millions of accesses, comma-separated (sequences x 1M)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        one = _synth(Path(tmp) / "one-token.parquet", 1, 1)
        fixed = statistics.median(_above_baseline(one)[1] for _ in range(args.runs))
        print(f"the reader's fixed cost (a one-token trace): {fixed / 1e6:.1f} MB", flush=True)
        for size in [None] if args.trace else [int(v) for v in args.sizes.split(",")]:
            path = args.trace or _synth(Path(tmp) / f"{size}M.parquet", size, 7813)
            ratios, variable = [], []
            for _ in range(args.runs):
                dense, above, files = _above_baseline(path)
                ratios.append(above / dense)
                variable.append((above - fixed) / dense)
                print(f"{path.name}: dense {dense / 1e6:.1f} MB; {above / 1e6:.1f} MB above the import baseline = "
                      f"{ratios[-1]:.2f}x the dense array ({files / 1e6:.1f} MB of it code pages mapped from files), "
                      f"{variable[-1]:.2f}x less the fixed cost", flush=True)
            summary.append(f"{path.name}: median {statistics.median(ratios):.2f}x (range {min(ratios):.2f}-"
                           f"{max(ratios):.2f}x, {args.runs} runs); less the fixed cost {statistics.median(variable):.2f}x "
                           f"({min(variable):.2f}-{max(variable):.2f}x)")
            if args.trace is None:
                path.unlink()
    print("\n".join(summary))


def _synth(path: Path, sequences: int, tokens: int) -> Path:
    subprocess.run([sys.executable, "-m", "moesim", "trace", "synth", "--model", "olmoe-1b-7b", "--sequences",
                    str(sequences), "--tokens", str(tokens), "--seed", "1", "--out", str(path)], check=True,
                   stdout=subprocess.DEVNULL)
    return path


def _above_baseline(path: Path) -> tuple[int, int, int]:
    """(the dense array's bytes, the peak above the import baseline, the growth of the pages mapped from files)
    of loading ``path`` in a fresh process."""
    dense, base, peak, files = map(int, subprocess.run([sys.executable, "-c", CHILD, str(path)], check=True,
                                                       capture_output=True, text=True).stdout.split())
    return dense, peak - base, files


if __name__ == "__main__":
    main()
