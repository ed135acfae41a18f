"""llama.cpp on this machine against moesim's prediction, on configurations calibration did not run (issue 37).

Each cycle calibrates this machine on llama.cpp (``moesim calibrate --engine llama.cpp``:
``moesim.replay.llamacpp_calibrate``), then predicts and times the held-out configurations (``moesim validate
--engine llama.cpp``: ``moesim.replay.llamacpp_validate``: OLMoE-, Qwen3- and Mixtral-like shapes x bf16, q8_0,
q4_k_m, q4_0, mxfp4 x every thread count by default; decode as llama-bench's tg64 and tg64@d2048 (after 2,048
KV tokens), prefill as its pp32, pp512 and pp2048), and prints the table and its summary. Over several cycles
it prints each cycle's median and worst error and their median and range: calibration sees this host's
bandwidth swing too, so a cycle's figure alone says little.

    pip install ".[llamacpp]"    # llama-cpp-python; CMAKE_ARGS=-DGGML_NATIVE=ON builds it for this CPU
    python benchmarks/llamacpp_fidelity.py [--cycles 3] [--threads 1,2] [--formats bf16,q8_0,q4_k_m,q4_0,mxfp4]
                                           [--contexts 0,2048] [--prompts 32,512,2048] [--runs 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from moesim.errors import MoesimError
from moesim.replay.llamacpp_calibrate import SUMMARY, calibrate_llamacpp
from moesim.sim.local_machine import thread_counts
from moesim.replay.llamacpp_run import LlamaCpp
from moesim.replay.llamacpp_validate import (FORMATS, HEADERS, SHAPES, cells, counts, summary, summary_line,
                                             validate_llamacpp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--threads")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--contexts", default="0,2048")
    parser.add_argument("--prompts", default="32,512,2048", help="prefill tests (0: none)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write every cycle's rows and summaries here")
    args = parser.parse_args()
    try:
        run(args)
    except MoesimError as exc:
        raise SystemExit(f"llamacpp_fidelity: {exc}") from None


def run(args) -> None:
    with LlamaCpp() as engine:
        built = engine.system_info()
    print(built)
    threads = counts(args.threads, "--threads", thread_counts())
    contexts = counts(args.contexts, "--contexts", [0], low=0)
    prompts = [p for p in counts(args.prompts, "--prompts", [], low=0) if p]
    cycles = []
    for cycle in range(args.cycles):
        start = time.perf_counter()
        hw, notes = calibrate_llamacpp(threads, args.runs)
        took = time.perf_counter() - start
        print(f"\ncycle {cycle + 1}: calibrated in {took:.0f} s; " + "; ".join(notes[SUMMARY]))
        rows = validate_llamacpp(hw, SHAPES, args.formats.split(","), threads, contexts, args.runs, prompts=prompts)
        print("  ".join(HEADERS))
        for row in rows:
            print("  ".join(str(c) for c in cells(row)))
        s = summary(rows)
        print(summary_line(s))
        cycles.append({"notes": notes, "calibration_s": took, "rows": [r.as_dict() for r in rows], "summary": s})
    for kind in ("decode", "prefill"):
        for which in ("probe", "file"):
            parts = [c["summary"][kind][which] for c in cycles if kind in c["summary"]]
            if not parts:
                continue
            medians = [p["median_abs_error"] for p in parts]
            worst = ", ".join(f"{100 * p['worst']['error']:+.0f}%" for p in parts)
            print(f"\n{kind}, {len(parts)} cycle(s), error "
                  f"{'with the probed DRAM rate' if which == 'probe' else 'from the file'}: median |error| "
                  f"{100 * statistics.median(medians):.1f}% (cycles: {', '.join(f'{100 * m:.1f}%' for m in medians)}); "
                  f"worst per cycle {worst}")
    for test in dict.fromkeys(t for c in cycles for t in c["summary"]["by_test"]):
        medians = [c["summary"]["by_test"][test] for c in cycles if test in c["summary"]["by_test"]]
        print(f"{test}: median |error| with the probed DRAM rate {100 * statistics.median(medians):.1f}% (cycles: "
              f"{', '.join(f'{100 * m:.1f}%' for m in medians)})")
    if args.json:
        args.json.write_text(json.dumps({"system": built, "cycles": cycles}, indent=1))


if __name__ == "__main__":
    main()
