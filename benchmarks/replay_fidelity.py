"""How far the simulator is from this machine: calibrate, then simulate and replay LRU and Belady.

A synthetic OLMoE-shaped trace (2 sequences x 24 decode tokens) runs on the CPU backend with the
model cut to its first ``--layers`` layers and widths times ``--scale``: experts in files on disk,
RAM slots, torch compute. Prints, per policy and capacity, simulated and measured TPOT, the error
and both speedups over LRU (the issue's fidelity target: |error| <= 15% and the same order).

    python benchmarks/replay_fidelity.py [--layers 4] [--scale 0.5] [--capacity 16,32]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from moesim.replay.calibrate import calibrate_cpu
from moesim.replay.run import shrink
from moesim.replay.validate import validate
from moesim.sim.models import get_model
from moesim.tracegen.synth import synth_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--capacity", default="16,32")
    ap.add_argument("--tokens", type=int, default=24)
    args = ap.parse_args()
    olmoe = get_model("olmoe-1b-7b")
    trace = synth_trace(olmoe.num_layers, olmoe.num_experts, olmoe.top_k, 2, args.tokens, seed=0, model=olmoe.name,
                        meta=olmoe.trace_meta())
    _, small = shrink(trace, olmoe, args.layers, args.scale)
    with tempfile.TemporaryDirectory() as tmp:
        hw = calibrate_cpu(small, workdir=Path(tmp))
        c = hw.compute
        print(f"{small.name}: {args.layers} layers, d={small.d_model}, d_expert={small.d_expert}; calibrated: reads "
              f"{hw.link.latency_us:.0f} us + {hw.link.gbps:.2f} GB/s, expert {c.expert_s * 1e6:.0f} us, layer "
              f"{c.layer_s * 1e6:.0f} us")
        rows = validate(trace, olmoe, hw, ["lru", "belady"], [int(v) for v in args.capacity.split(",")], "cpu",
                        args.layers, args.scale, Path(tmp))
    print(f"{'policy':8} {'C':>3} {'sim ms':>8} {'real ms':>8} {'error':>7} {'sim x':>6} {'real x':>6} {'hit rate':>8}")
    for r in rows:
        print(f"{r['policy']:8} {r['capacity']:3} {r['sim_tpot_s'] * 1e3:8.2f} {r['real_tpot_s'] * 1e3:8.2f} "
              f"{r['error_pct']:6.1f}% {r['sim_speedup']:6.2f} {r['real_speedup']:6.2f} {r['hit_rate_real']:8.4f}")


if __name__ == "__main__":
    main()
