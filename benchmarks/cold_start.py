"""Where a first run's time goes: commands run with an empty numba cache, every compilation timed.

Each command runs ``--runs`` times in a fresh process with ``NUMBA_CACHE_DIR`` an empty folder (nothing the
installed package cached is used or touched), then as many times with that cache filled (warm). Every process it
starts, workers included, logs numba's ``numba:compile`` events (a ``sitecustomize`` on ``PYTHONPATH``), so the
table attributes each compiled function's seconds, outermost compilations only (a callee compiled inside its
caller counts in the caller), and how many specialisations it got.

    python benchmarks/cold_start.py                               # moesim demo, moesim plan, 3 runs each
    python benchmarks/cold_start.py --runs 1 --command "moesim sim run bundled --policy lru --capacity 4"
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = ("moesim demo --out {tmp}/demo", "moesim plan --model qwen3-30b-a3b --hardware rtx4080")

SITECUSTOMIZE = """
import os
if os.environ.get("COLD_START_LOG"):
    import atexit, json, threading, time
    from numba.core import event

    depth, spans, starts = threading.local(), [], {}

    class Outermost(event.Listener):
        def on_start(self, ev):
            d = getattr(depth, "n", 0)
            depth.n = d + 1
            if d == 0:
                starts[threading.get_ident()] = time.perf_counter()

        def on_end(self, ev):
            depth.n -= 1
            if depth.n == 0:
                fn = ev.data["dispatcher"].py_func
                spans.append([f"{fn.__module__}.{fn.__qualname__}",
                              time.perf_counter() - starts.pop(threading.get_ident())])

    event.register("numba:compile", Outermost())

    @atexit.register
    def _write():  # whole or not at all: a worker stopped while it writes leaves only its ".part"
        path = os.path.join(os.environ["COLD_START_LOG"], f"{os.getpid()}.json")
        with open(path + ".part", "w") as f:
            json.dump(spans, f)
        os.replace(path + ".part", path)
"""


def run(command: str, cache: Path, log: Path | None, tmp: Path) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # Python's bytecode cached, as an installed package has it
    if log is not None:
        paths = [str(tmp / "site"), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env.update(COLD_START_LOG=str(log), PYTHONPATH=os.pathsep.join(paths))
    argv = shlex.split(command.format(tmp=tmp))
    argv[0] = str(Path(sys.executable).with_name(argv[0]))
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--command", action="append", help="a command to time (repeatable); default: demo and plan")
    ap.add_argument("--top", type=int, default=15, help="functions listed per command")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    for command in args.command or COMMANDS:
        with tempfile.TemporaryDirectory() as name:
            tmp = Path(name)
            (tmp / "site").mkdir()
            (tmp / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
            cold, seconds, counts = [], collections.Counter(), collections.Counter()
            for i in range(args.runs):
                cache, log = tmp / f"cache{i}", tmp / f"log{i}"
                log.mkdir()
                cold.append(run(command, cache, log, tmp))
                for path in log.glob("*.json"):
                    for fn, s in json.loads(path.read_text()):
                        seconds[fn] += s / args.runs
                        counts[fn] += 1 / args.runs
            warm = [run(command, tmp / f"cache{args.runs - 1}", None, tmp) for _ in range(args.runs)]
        total = sum(seconds.values())
        print(f"\n{command}: cold {statistics.median(cold):.1f} s (median of {args.runs}: "
              f"{min(cold):.1f}-{max(cold):.1f}), warm {statistics.median(warm):.2f} s ({min(warm):.2f}-"
              f"{max(warm):.2f}); compiling {total:.1f} s of CPU time in all processes, "
              f"{sum(counts.values()):.0f} outermost compilations")
        print(f"{'compile s':>9} {'share':>6} {'count':>5}  function")
        for fn, s in seconds.most_common(args.top):
            print(f"{s:9.1f} {s / total:6.1%} {counts[fn]:5.0f}  {fn}")


if __name__ == "__main__":
    main()
