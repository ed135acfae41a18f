"""How far the simulator is from this machine: calibrate, then simulate and replay LRU and Belady.

A synthetic OLMoE-shaped trace (2 sequences x 24 decode tokens) runs with the model cut to its
first ``--layers`` layers and widths times ``--scale``; on the CPU backend (experts in files on
disk, RAM slots, torch compute) or the CUDA backend (pinned host memory, GPU slots, a copy
stream). Prints, per policy and capacity, simulated and measured TPOT, the error and both speedups
over LRU (the fidelity targets: |error| <= 15% on cpu, <= 10% on cuda, and the same order).

    python benchmarks/replay_fidelity.py [--layers 4] [--scale 0.5] [--capacity 16,32]
    python benchmarks/replay_fidelity.py --backend cuda --layers 16 --scale 1   # OLMoE-sized, on a GPU
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from moesim.replay.calibrate import calibrate
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
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    args = ap.parse_args()
    olmoe = get_model("olmoe-1b-7b")
    trace = synth_trace(olmoe.num_layers, olmoe.num_experts, olmoe.top_k, 2, args.tokens, seed=0, model=olmoe.name,
                        meta=olmoe.trace_meta())
    _, small = shrink(trace, olmoe, args.layers, args.scale)
    with tempfile.TemporaryDirectory() as tmp:
        hw = calibrate(small, args.backend, workdir=Path(tmp)).hardware
        c = hw.compute
        print(f"{small.name}: {args.layers} layers, d={small.d_model}, d_expert={small.d_expert}; {hw.name} "
              f"calibrated: {hw.link.name} {hw.link.latency_us:.0f} us + "
              f"{hw.link.gbps:.2f} GB/s, expert {c.expert_s * 1e6:.0f} us, layer {c.layer_s * 1e6:.0f} us")
        rows = validate(trace, olmoe, hw, ["lru", "belady"], [int(v) for v in args.capacity.split(",")], args.backend,
                        args.layers, args.scale, Path(tmp))
    print(f"{'policy':8} {'C':>3} {'sim ms':>8} {'real ms':>8} {'error':>7} {'sim x':>6} {'real x':>6} {'hit rate':>8}")
    for r in rows:
        print(f"{r['policy']:8} {r['capacity']:3} {r['sim_tpot_s'] * 1e3:8.2f} {r['real_tpot_s'] * 1e3:8.2f} "
              f"{r['error_pct']:6.1f}% {r['sim_speedup']:6.2f} {r['real_speedup']:6.2f} {r['hit_rate_real']:8.4f}")


if __name__ == "__main__":
    main()
