"""How a real backend's replay steps settle in a new process: the calibration's all-hit replay, again and again.

On the H200 lent on 2026-11-26 the first CUDA replay in a new process ran about ten times slower than later ones,
which made the first calibration in a process fit nonsense. This script measured it alone, with nothing fitted, on
the next one (2026-11-27): only each process's first replay was slow, after 13 GB of pinned memory or 20 s of
waiting alike, and the cause was cuDNN's attention building a plan for every new key count, which the replay no
longer lets torch choose (docs/replay.md, "Measured on a GPU, second session"). It stays as the check for another
machine or torch: it replays a log like the one calibration fits the executor's overhead with (OLMoE's dims cut to
2 layers at ``--scale``, k experts a layer taken in turn from all the layer's experts, every one resident, every
access a hit once they are loaded) ``--replays`` times back to back, and prints for each the seconds since the
process started, and the median, fastest and slowest step. ``--pin-gb G`` first takes G GB of pinned host memory
(touched, as the replay's experts are) and ``--idle S`` waits S seconds before the first replay, to tell a cost
of pinning memory from one of time passing.

    python benchmarks/replay_first_seconds.py --backend cuda                       # the first replays, as is
    python benchmarks/replay_first_seconds.py --backend cuda --pin-gb 13            # after a full OLMoE's pinning
    python benchmarks/replay_first_seconds.py --backend cuda --idle 20              # after 20 s of nothing
    python benchmarks/replay_first_seconds.py --backend cpu --scale 0.125           # the same on this machine
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

START = time.perf_counter()

from moesim.replay.calibrate import _executor_model, all_hit_log  # noqa: E402
from moesim.replay.run import replay, shrink  # noqa: E402
from moesim.sim.config import Config  # noqa: E402
from moesim.sim.machine import GPU, Hardware, Link, MeasuredCompute  # noqa: E402
from moesim.tracegen.models import get_model  # noqa: E402
from moesim.tracegen.synth import synth_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--replays", type=int, default=8)
    ap.add_argument("--steps", type=int, default=16, help="timed steps a replay (after the resident set loads)")
    ap.add_argument("--pin-gb", type=float, default=0.0, help="cuda: pinned host memory taken first (GB)")
    ap.add_argument("--idle", type=float, default=0.0, help="seconds waited before the first replay")
    args = ap.parse_args()
    if args.pin_gb > 0 and args.backend != "cuda":
        ap.error("--pin-gb takes pinned memory for a GPU's copies: --backend cuda")
    olmoe = get_model("olmoe-1b-7b")
    _, model = shrink(synth_trace(olmoe.num_layers, olmoe.num_experts, olmoe.top_k, 1, 1, seed=0), olmoe, None,
                      args.scale)
    small = _executor_model(model)
    k = small.top_k
    trace, fill = all_hit_log(small, k, small.num_experts, args.steps)  # every expert resident
    # the simulated side is not looked at: any table for the model lets the replay run
    hw = Hardware("any", GPU("any", 1.0, 1.0, hbm_gb=80.0), Link("any", gbps=1.0),
                  compute=MeasuredCompute(small.name, layer_s=1e-4, expert_s=1e-4))
    held = None
    if args.pin_gb > 0:
        import torch

        held = torch.ones(int(args.pin_gb * 1e9) // 2, dtype=torch.bfloat16, pin_memory=True)
        print(f"{time.perf_counter() - START:7.2f} s  pinned {held.numel() * 2 / 1e9:.1f} GB", flush=True)
    time.sleep(args.idle)
    print(f"{small.name}, {small.num_layers} layers, {k} experts a layer, {args.backend}: steps in ms")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.replays):
            r = replay(trace, Config.build(policy="lru", capacity=small.num_experts), hw, args.backend,
                       workdir=tmp, model=small)
            real = np.asarray(r.step_times[fill:]) * 1e3
            print(f"{time.perf_counter() - START:7.2f} s  median {np.median(real):8.3f}  fastest {real.min():8.3f}  "
                  f"slowest {real.max():8.3f}", flush=True)
    del held


if __name__ == "__main__":
    main()
