"""Whether LFU's lanes slow down in a process that ran other policies first (docs/benchmarks.md, "LFU after
other policies"): one process, a synthetic trace of the benchmarks' shape (10M accesses), each policy named in
turn at 16 slots per layer, sequential semantics; prints each one's M accesses/s. Run it several times: the
host's own swings move every policy together, a placement effect would move LFU alone.

    for i in 1 2 3 4 5 6; do python benchmarks/lfu_after_others.py lru fifo arc lfu lfu; done
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracle import benchmark_trace  # noqa: E402

from moesim.sim.config import CacheConfig  # noqa: E402
from moesim.sim.hitrate import simulate  # noqa: E402


def main() -> None:
    trace = benchmark_trace(10_000_000)
    rates = []
    for policy in sys.argv[1:] or ["lru", "fifo", "arc", "lfu"]:
        r = simulate(trace, CacheConfig(policy=policy, capacity=16, scope="per-layer", semantics="sequential"))
        rates.append(f"{policy} {trace.accesses / r.seconds / 1e6:.1f}")
    print(" | ".join(rates), flush=True)


if __name__ == "__main__":
    main()
