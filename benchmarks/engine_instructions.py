"""Where the hit-rate engine's time goes, in instructions and mispredicted branches per access
(valgrind's cachegrind counts both repeatably on a noisy machine; the branches by its own simulated
predictor, a guide to which code branches on data rather than a real CPU's count).

For each policy and capacity it runs the engine once and twice over the same synthetic stream
(``tests/oracle.py``'s benchmark trace: 32 layers, 64 experts, top-8; sequential, per-layer), each
under cachegrind in a fresh process; the difference is one run's instructions (set-up included),
divided by its accesses. Two capacities with different hit rates h give, per policy, the cost of a
hit and of a miss (solving ``h·hit + (1 − h)·miss`` for both). The runs log one eviction, which keeps
LRU in the engine with its hooks rather than on its recency-rank path (``moesim.policies.lru_ranks``), and
costs every policy what an unlogged run costs: the log's bound check.

``--engine des`` counts the discrete-event simulator instead (full cost model, RTX 4090, PCIe 4, the OLMoE
preset's shape at 32 layers, as ``benchmarks/des_throughput.py`` runs it; step semantics, no log), with
``--prefetch oracle`` its prefetching path too; its capacities must fit the card's 24 GiB in bf16 (32 slots a
layer do, 60 do not). ``--loop-only`` counts its loop alone: a prepared run with its loop run, less the same
run prepared only. ``--cpu-name haswell`` compiles for a CPU valgrind can run (it runs no AVX-512) in a process
of its own first, in seconds, where compiling under valgrind for its CPU takes minutes; the counts are then
those of that build, not of the host's own.

    python benchmarks/engine_instructions.py [--accesses 4000000] [--policies lru,fifo] [--capacities 16,60]
    python benchmarks/engine_instructions.py --engine des --policies lru --capacities 16,32 [--prefetch oracle]
        [--loop-only] [--cpu-name haswell]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ONE_RUN = """
import sys
sys.path.insert(0, {tests!r})
from oracle import benchmark_trace
from moesim.sim.config import CacheConfig
from moesim.sim.hitrate import simulate
trace = benchmark_trace({accesses})
for _ in range({times}):
    r = simulate(trace, CacheConfig(policy={policy!r}, capacity={capacity}, semantics="sequential"), log_evictions=1)
print(r.accesses, r.hit_rate)
"""

ONE_DES_RUN = """
import sys
from dataclasses import replace
sys.path.insert(0, {tests!r})
from oracle import BENCH_LAYERS, benchmark_trace
from moesim.sim.config import Config
from moesim.sim.des import prepare_des
from moesim.sim.hardware import get_hardware
from moesim.tracegen.models import get_model
trace = benchmark_trace({accesses})
model, hw = replace(get_model("olmoe-1b-7b"), num_layers=BENCH_LAYERS), get_hardware("rtx4090")
config = Config.build(policy={policy!r}, capacity={capacity}, prefetch={prefetch!r})
prepare_des(benchmark_trace(2048, sequences=2, seed=1), config, model, hw).simulate()  # the loop loaded
for _ in range({times}):
    prepared = prepare_des(trace, config, model, hw)
    if {loop}:
        r = prepared.simulate()
print(trace.accesses, r.hit_rate if {loop} else 0.0)
"""


def instructions(policy: str, capacity: int, accesses: int, times: int, folder: Path, engine: str = "hitrate",
                 prefetch: str = "none", loop: bool = True, cpu_name: str | None = None,
                 native: bool = False) -> tuple[np.ndarray, int, float]:
    """Instructions and mispredicted branches cachegrind counts for the whole process, the accesses of
    one run and its hit rate (``loop`` False: the discrete-event run prepared, its loop not run; ``native``: the
    process run without valgrind, to compile for ``cpu_name``)."""
    code = (ONE_RUN if engine == "hitrate" else ONE_DES_RUN).format(
        tests=str(Path(__file__).resolve().parents[1] / "tests"), accesses=accesses, times=times, policy=policy,
        capacity=capacity, prefetch=prefetch, loop=loop)
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same process, run to run
    if cpu_name:
        env.update(NUMBA_CPU_NAME=cpu_name, NUMBA_CPU_FEATURES="")
    valgrind = [] if native else ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--branch-sim=yes",
                                  f"--cachegrind-out-file={folder / 'cg.out'}"]
    out = subprocess.run([*valgrind, sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    if native:
        return np.zeros(2), 0, 0.0
    counts = [int(re.search(rf"{name}:\s+([\d,]+)", out.stderr).group(1).replace(",", ""))
              for name in ("I\\s+refs", "Mispredicts")]
    n, rate = out.stdout.split()
    return np.array(counts, np.float64), int(n), float(rate)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accesses", type=int, default=4_000_000)
    ap.add_argument("--policies", default="lru,fifo")
    ap.add_argument("--capacities", default="16,60")
    ap.add_argument("--engine", choices=("hitrate", "des"), default="hitrate")
    ap.add_argument("--prefetch", default="none", help="the discrete-event simulator's prefetcher (--engine des)")
    ap.add_argument("--loop-only", action="store_true",
                    help="--engine des: the loop alone (a prepared run with its loop run, less one without)")
    ap.add_argument("--cpu-name", help="compile for this LLVM CPU (haswell: one valgrind runs) without valgrind "
                                       "first, instead of under it (minutes)")
    args = ap.parse_args()
    if args.loop_only and args.engine != "des":
        sys.exit("--loop-only counts the discrete-event loop: give --engine des")
    what = dict(engine=args.engine, prefetch=args.prefetch, cpu_name=args.cpu_name)
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    capacities = [int(c) for c in args.capacities.split(",")]
    print(f"{'policy':8} {'C':>4} {'hit rate':>9} {'instr/access':>13} {'mispredicts/access':>19}")
    with tempfile.TemporaryDirectory() as tmp:
        for policy in args.policies.split(","):
            # numba compiles once, for valgrind's CPU under it, or for --cpu-name without it
            instructions(policy, capacities[0], 1000, 1, Path(tmp), native=bool(args.cpu_name), **what)
            points = []
            for capacity in capacities:
                if args.loop_only:
                    once, n, rate = instructions(policy, capacity, args.accesses, 1, Path(tmp), **what)
                    less, _, _ = instructions(policy, capacity, args.accesses, 1, Path(tmp), loop=False, **what)
                else:
                    less, n, rate = instructions(policy, capacity, args.accesses, 1, Path(tmp), **what)
                    once, _, _ = instructions(policy, capacity, args.accesses, 2, Path(tmp), **what)
                points.append((rate, (once - less) / n))
                print(f"{policy:8} {capacity:4} {rate:9.3f} {points[-1][1][0]:13.1f} {points[-1][1][1]:19.2f}")
            if len(points) >= 2:
                (h1, c1), (h2, c2) = points[:2]
                hit, miss = np.linalg.solve([[h1, 1 - h1], [h2, 1 - h2]], np.array([c1, c2]))
                print(f"{policy:8} a hit {hit[0]:.0f} instructions, a miss {miss[0]:.0f}; "
                      f"mispredicts {hit[1]:.2f} a hit, {miss[1]:.2f} a miss")


if __name__ == "__main__":
    main()
