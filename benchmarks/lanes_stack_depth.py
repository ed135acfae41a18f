"""The lanes' speed against how deep in the C stack they are called (docs/benchmarks.md, "Lanes and the
stack"): one process, a synthetic trace of the benchmarks' shape, each policy run at 16 slots per layer under
sequential semantics from ``--depths`` C stack depths in turn (each depth one more nested ``map`` call, a few
hundred bytes of stack), printing its M accesses/s at each depth, the median, the lowest and how many depths ran
below three quarters of the median. The host's swings move whole runs; a rate that falls at some depths and not
at others is where the loop's frame sits against its arrays.

    for i in 1 2 3 4; do python benchmarks/lanes_stack_depth.py lfu belady fifo; done
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracle import benchmark_trace  # noqa: E402

from moesim.sim.config import CacheConfig  # noqa: E402
from moesim.sim.hitrate import simulate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("policies", nargs="*", default=["lfu", "belady", "fifo"])
    ap.add_argument("--depths", type=int, default=48)
    ap.add_argument("--accesses", type=int, default=2_000_000)
    args = ap.parse_args()
    trace = benchmark_trace(args.accesses)
    for policy in args.policies:
        cache = CacheConfig(policy=policy, capacity=16, scope="per-layer", semantics="sequential")
        simulate(trace, cache)  # compiled (or loaded) before the first timed run

        def nested(depth: int) -> float:
            if depth == 0:
                return trace.accesses / simulate(trace, cache).seconds / 1e6
            return list(map(nested, [depth - 1]))[0]  # a C-level call: each level takes stack

        rates = [nested(depth) for depth in range(args.depths)]
        middle = statistics.median(rates)
        print(f"{policy}: median {middle:.0f}M, lowest {min(rates):.0f}M, {sum(r < 0.75 * middle for r in rates)} of "
              f"{len(rates)} depths below 3/4 of the median | " + " ".join(f"{r:.0f}" for r in rates), flush=True)


if __name__ == "__main__":
    main()
