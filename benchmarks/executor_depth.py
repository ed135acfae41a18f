"""Whether the executor's overhead that calibration fits depends on how many layers its replays have: the compute
table timed once, then step 3 of calibration (``moesim.replay.calibrate``: all-hit replays with 1 and k experts a
layer, the residuals against the simulation) on the model cut to each ``--layers`` count in turn, ``--rounds``
times alternated. Prints each fit's overhead a layer, an expert, and a layer with k experts (the two together).

Calibration fits it on ``EXECUTOR_LAYERS`` (2) layers and the replays it predicts have the model's full depth. On
an H200 the two-layer fit gave 115 us an expert where full OLMoE's replays leave about 40 (docs/replay.md,
"Measured on a GPU, second session"); this measures the same on any backend.

    python benchmarks/executor_depth.py --backend cuda --rounds 3
    python benchmarks/executor_depth.py --backend cpu --scale 0.125 --rounds 6
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import moesim.replay.calibrate as calibration
from moesim.replay.run import shrink
from moesim.sim.machine import GPU, Hardware, Link
from moesim.tracegen.models import get_model
from moesim.tracegen.synth import synth_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--model", default="olmoe-1b-7b")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--layers", default="2,16", help="comma-separated layer counts the fit is made on")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=8, help="timed steps of each replay, as calibrate's --repeats")
    args = ap.parse_args()
    preset = get_model(args.model)
    _, model = shrink(synth_trace(preset.num_layers, preset.num_experts, preset.top_k, 1, 1, seed=0), preset, None,
                      args.scale)
    sync = lambda: None  # noqa: E731
    if args.backend == "cuda":
        import torch

        sync = torch.cuda.synchronize
    pool = calibration.DISTINCT
    compute = calibration._compute_table(model, args.backend, 5, 0, sync, pool)
    hw = Hardware("timed alone", GPU("any", 1.0, 1.0, hbm_gb=80.0), Link("any", gbps=1.0), compute=compute)
    k = model.top_k
    print(f"{model.name}, {args.backend}: timed alone a layer {compute.layer_s * 1e6:.0f} us, an expert "
          f"{compute.expert_s * 1e6:.0f} us; the executor's overhead (us) fitted on each layer count:", flush=True)
    sums: dict[int, list] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            for layers in map(int, args.layers.split(",")):
                calibration.EXECUTOR_LAYERS = layers
                _, per_layer, per_expert = calibration._executor_overhead(hw, model, args.backend, args.repeats,
                                                                           workdir, 0, pool)
                total = (per_layer + k * per_expert) * 1e6
                sums.setdefault(layers, []).append(total)
                print(f"round {r} on {layers:2d} layers: a layer {per_layer * 1e6:+7.0f}, an expert "
                      f"{per_expert * 1e6:+7.0f}, a layer with {k} experts {total:+7.0f}", flush=True)
    for layers, totals in sums.items():
        print(f"on {layers:2d} layers, a layer with {k} experts: median {statistics.median(totals):.0f} us "
              f"({min(totals):.0f} to {max(totals):.0f})")


if __name__ == "__main__":
    main()
