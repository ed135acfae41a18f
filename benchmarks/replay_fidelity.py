"""How far the simulator is from this machine, as a new user would find it: calibrate, then simulate
and replay LRU and Belady, several times over, and report the median error and its spread.

A synthetic OLMoE-shaped trace (2 sequences x 24 decode tokens) runs with the model cut to its first
N layers and its widths times S, for each ``--scales`` entry (S:N); on the CPU backend (experts in
files on disk, RAM slots, torch compute) or the CUDA backend (pinned host memory, GPU slots, a copy
stream). Every run calibrates afresh (``moesim calibrate``) and validates (``moesim validate``), so
the spread covers calibration noise as well as the replay's. Printed per scale, policy and capacity:
median simulated and measured TPOT, the median error with its range over the runs, the median
speedups over LRU, and in how many runs the two agreed on the policy order.

    python benchmarks/replay_fidelity.py                           # 5 runs at x0.5 (4 layers) and x1 (2 layers)
    python benchmarks/replay_fidelity.py --runs 3 --scales 0.5:4 --kernel per-expert
    python benchmarks/replay_fidelity.py --backend cuda --scales 1:16                # OLMoE-sized, on a GPU
    python benchmarks/replay_fidelity.py --strategy cpu-experts --cpu-layers 0,2,4 --scales 0.5:4
    python benchmarks/replay_fidelity.py --runs 3 --scales 0.5:4 --context 2048    # attention's share grown

With ``--strategy cpu-experts`` the rows are numbers of layers whose experts the host CPU computes
(llama.cpp's --n-cpu-moe): the CPU's time comes from the fitted ``[cpu]`` section (DRAM share, per-thread
unpack and product rates, fixed costs), the other layers' from ``[compute]``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from moesim.replay.calibrate import calibrate
from moesim.replay.run import shrink
from moesim.replay.validate import validate
from moesim.sim.config import Config
from moesim.tracegen.models import get_model
from moesim.tracegen.synth import synth_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scales", default="0.5:4,1:2", help="comma-separated SCALE:LAYERS")
    ap.add_argument("--capacity", default="16,32")
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--context", type=int, default=0, help="KV tokens before the trace's (attention's share)")
    ap.add_argument("--kernel", choices=["fused", "per-expert"], default="fused")
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--strategy", choices=["gpu-cache", "cpu-experts"], default="gpu-cache")
    ap.add_argument("--cpu-layers", default="0,2,4", help="cpu-experts: comma-separated CPU layer counts")
    args = ap.parse_args()
    olmoe = get_model("olmoe-1b-7b")
    trace = synth_trace(olmoe.num_layers, olmoe.num_experts, olmoe.top_k, 2, args.tokens, seed=0, model=olmoe.name,
                        meta=olmoe.trace_meta())
    capacities = [int(v) for v in args.capacity.split(",")]
    for item in args.scales.split(","):
        scale, layers = float(item.split(":")[0]), int(item.split(":")[1])
        _, small = shrink(trace, olmoe, layers, scale)
        runs = []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                cal = calibrate(small, args.backend, workdir=Path(tmp), seed=run)
                config = Config.build(kernel=args.kernel, strategy=args.strategy, context=args.context)
                runs.append(validate(trace, config, cal.hardware,
                                     ["lru", "belady"], capacities, args.backend, layers, scale, Path(tmp),
                                     model=olmoe, cpu_layers=[int(v) for v in args.cpu_layers.split(",")]))
            hw, c = cal.hardware, cal.hardware.compute
            print(f"run {run + 1}: {hw.link.gbps:.2f} GB/s + {hw.link.latency_us:.0f} us per copy, layer "
                  f"{c.layer_s * 1e6:.0f} us, expert {c.expert_s * 1e6:.0f} us; CPU {hw.cpu.dram_gbps:.1f} GB/s, "
                  f"{hw.cpu.task_us:.0f} + {hw.cpu.sync_us:.0f} us; errors "
                  + " ".join(f"{_label(r)} {r['error_pct']:+.1f}%" for r in runs[-1]), flush=True)
        print(f"\n{small.name}: {layers} layers, d={small.d_model}, d_expert={small.d_expert}, {args.backend}, "
              f"{args.kernel} kernel, context {args.context}; medians over {args.runs} runs (each: calibrate, then validate)")
        print(f"{'row':12} {'sim ms':>8} {'real ms':>8} {'error':>7} {'error range':>16} "
              f"{'sim x':>6} {'real x':>6} {'same order':>10}")
        for i, first in enumerate(runs[0]):
            rows = [r[i] for r in runs]
            err = np.array([r["error_pct"] for r in rows])
            order = "-" if first["strategy"] == "cpu-experts" else \
                f"{sum(_same_order(r, first['capacity']) for r in runs)}/{len(runs)}"  # policies rank
            med = {key: np.median([r[key] for r in rows]) for key in ("sim_tpot_s", "real_tpot_s", "sim_speedup",
                                                                       "real_speedup")}
            print(f"{_label(first):12} {med['sim_tpot_s'] * 1e3:8.2f} "
                  f"{med['real_tpot_s'] * 1e3:8.2f} {np.median(err):6.1f}% {f'{err.min():+.1f}%..{err.max():+.1f}%':>16} "
                  f"{med['sim_speedup']:6.2f} {med['real_speedup']:6.2f} {order:>10}")
        print()


def _label(row: dict) -> str:
    return f"{row['cpu_layers']} CPU layers" if row["strategy"] == "cpu-experts" else \
        f"{row['policy']}@{row['capacity']}"


def _same_order(rows: list[dict], capacity: int) -> bool:
    """Whether simulation and replay rank the policies at ``capacity`` alike."""
    at = [r for r in rows if r["capacity"] == capacity]
    return sorted(at, key=lambda r: r["sim_tpot_s"]) == sorted(at, key=lambda r: r["real_tpot_s"])


if __name__ == "__main__":
    main()
