"""Sweeps: every configuration of a spec's axes over its traces, one Parquet row each, resumable.

A spec is a TOML file::

    traces = ["runs/*.parquet"]      # paths or globs, relative to the spec; "bundled": the shipped trace
    kind = "hitrate"                 # or "des", or "serve" (a served stream: rate, max_batch, ... are keys);
                                     # default hitrate
    [axes]                           # the cartesian product of these
    policy = ["lru", "belady", "gamma"]
    capacity = [2, 4, 8]
    [fixed]                          # the same for every row
    scope = "per-layer"
    [[exclude]]                      # rows matching every key of a rule are skipped
    policy = "belady"
    scope = "global"

The keys are the settings a run of the spec's kind reads (``moesim.sim.config.RUN_SETTINGS``: the flat
settings of ``moesim.Config`` and the policies', prefetchers' and strategies' parameters); a parameter
applies to the rows whose policy (prefetcher, strategy) takes it, and one that none of the spec's
takes is an error. Each configuration is keyed by
a hash of its kind, trace and ``Config`` (``config_id``); a results file holds one row per
configuration: every setting, the metrics of a hit-rate or discrete-event run,
``error`` (the one-line reason a configuration failed, else null) and ``seconds``. Rows reach the
file in atomic rewrites every few seconds, so a sweep killed half-way loses at most the last few
and ``resume`` runs only the configurations the file lacks (a changed spec's new ones; the rows of settings it no
longer names are kept and counted; a file of another kind's results is refused).
"""

from __future__ import annotations

import functools
import glob
import hashlib
import itertools
import math
import numbers
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from moesim.errors import READER, MoesimError, MoesimWarning, argument, first_line, named, whole
from moesim.files import atomic_output, check_output, read_toml
from moesim.frames import Tabular
from moesim.host import usable_cpus
from moesim.tracegen.io import READ_FAILURES, read_meta
from moesim.sim import blas_probe
from moesim.sim.hardware import is_file_name
from moesim.policies.admission import composed
from moesim.sim.config import (ARRIVAL_FILES, CACHE_PARAMS, OWNERS, PATH_PARAMS, PREFETCH_PARAMS, RUN_SETTINGS,
                               SERVE_DEFAULTS, SETTINGS, STRATEGY_PARAMS, Config, check_params_used, config_id,
                               load_cached_trace, params_for)
from moesim.sim.reads import AUDITED, LOOKED_AT, refuse_unread

KINDS = ("hitrate", "des", "serve")
KEYS = {kind: set(RUN_SETTINGS[kind]) for kind in KINDS}  # the settings each kind of run reads
PATH_KEYS = (*PATH_PARAMS, "hardware", "arrivals")
FILE_SUFFIXES = {"hardware": (".toml",), "arrivals": ARRIVAL_FILES}  # keys that name a file only with these
FLUSH_SECONDS = 2.0
STOP = threading.Event()  # set (by the command's SIGTERM handler) to end a sweep after the current rows
MAX_CONFIGS = 1_000_000  # configurations a spec may expand to: each is a dict held until the sweep ends


@dataclass
class SweepSpec:
    path: Path
    kind: str
    traces: list[str]
    axes: dict
    fixed: dict = field(default_factory=dict)
    exclude: list[dict] = field(default_factory=list)

    def configs(self, stop: threading.Event | None = None) -> list[dict]:
        """Every configuration, trace-major (a worker keeps its trace loaded), minus the excluded (a rule that matches
        none is refused); each policy parameter only where the row's policy takes it, and each configuration once (a
        parameter dropped where the policy does not take it, or a value listed twice, would repeat one). ``stop``:
        once set, the expansion ends where it is (a sweep stopped while a large grid expands)."""
        names = list(self.axes)
        product = len(self.traces) * math.prod(len(self.axes[n]) for n in names)
        if product > MAX_CONFIGS:
            raise MoesimError(f"{self.path}: {product:,} configurations (the traces times every axis's values), more "
                              f"than the {MAX_CONFIGS:,} a sweep holds; split it into several specs")
        out, seen, matched = [], set(), [False] * len(self.exclude)
        for trace in self.traces:
            for values in itertools.product(*(self.axes[n] for n in names)):
                if stop is not None and stop.is_set():
                    return out
                config = {"trace": trace, **(SERVE_DEFAULTS if self.kind == "serve" else {}), **self.fixed,
                          **dict(zip(names, values))}
                hits = [all(config.get(k) == v for k, v in rule.items()) for rule in self.exclude]
                matched = [m or h for m, h in zip(matched, hits)]
                if not any(hits):
                    config = _applicable(config)
                    key = repr(sorted(config.items()))
                    if key not in seen:
                        seen.add(key)
                        out.append(config)
        unmatched = [i for i, m in enumerate(matched) if not m]
        if unmatched:  # a key or a value mistyped: the rows it meant to leave out would run
            rule = ", ".join(f"{k} = {v!r}" for k, v in self.exclude[unmatched[0]].items())
            raise MoesimError(f"{self.path}: [[exclude]] rule {unmatched[0] + 1} ({rule}) matches no configuration; a "
                              "rule matches the values of [axes] and [fixed]")
        if not out and not (stop is not None and stop.is_set()):
            raise MoesimError(f"{self.path}: its [[exclude]] rules leave out every configuration: nothing to run")
        return out


def forced(spec: SweepSpec) -> SweepSpec:
    """``spec`` with every row taking machines whose numbers are far past every real part's (``force = true`` in its
    [fixed]: the command line's --force)."""
    if "force" not in KEYS[spec.kind]:
        raise MoesimError(f"{named('force', True)}: a {spec.kind} sweep simulates no machine, so nothing reads it")
    if "force" in spec.axes:
        raise MoesimError(f"{spec.path}: force is an axis there, and {named('force', True)} would set it in every row")
    return replace(spec, fixed={**spec.fixed, "force": True})


def _applicable(config: dict) -> dict:
    """A row's settings without the parameters its policy, prefetcher or strategy does not take."""
    defaults = Config().flat()
    dropped = set()
    for _, (owner, names) in OWNERS.items():
        given = {k: v for k, v in config.items() if k in names}
        name = config.get(owner, defaults[owner])
        try:
            kept = params_for(composed(name, config.get("admission", defaults["admission"])) if owner == "policy"
                              else name, given, owner)
        except MoesimError:  # an unknown policy (prefetcher, strategy): the row reports it
            continue
        dropped |= set(given) - set(kept)
    return {k: v for k, v in config.items() if k not in dropped}


def row_id(kind: str, config: dict) -> str:
    """The ``config_id`` of a spec row: of its trace's content (not its path: a resume from another
    install or folder finds the same rows) and its ``Config`` (the settings a run of this kind reads), or
    of the raw settings when they do not build one (that row's error says why)."""
    settings = {k: v for k, v in config.items() if k != "trace"}
    trace = trace_digest(config["trace"])
    try:
        flat = Config.build(**settings).flat()
    except MoesimError:
        return config_id(kind, trace, settings)
    return config_id(kind, trace, {k: v for k, v in flat.items() if k in KEYS[kind]})


def trace_digest(path: str) -> str:
    """SHA-1 of a trace file's bytes (read once per file version and process); the path when unreadable."""
    try:
        stat = os.stat(path)
    except OSError:
        return path
    return _digest(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    sha = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check a spec; every error names the file."""
    path = Path(path)
    data = read_toml(path, "sweep spec")
    unknown = sorted(set(data) - {"traces", "kind", "axes", "fixed", "exclude"})
    if unknown:
        raise MoesimError(f"{path}: unknown top-level key(s) {', '.join(unknown)} (known: traces, kind, axes, fixed, "
                          f"exclude)")
    kind = data.get("kind", "hitrate")
    if kind not in KINDS:
        raise MoesimError(f"{path}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    axes, fixed, exclude = data.get("axes", {}), data.get("fixed", {}), data.get("exclude", [])
    if not isinstance(axes, dict) or not isinstance(fixed, dict) or not isinstance(exclude, list) \
            or not all(isinstance(rule, dict) for rule in exclude):
        raise MoesimError(f"{path}: [axes] and [fixed] must be tables, [[exclude]] a list of tables")
    if not all(exclude):  # a rule of no key matches every row
        raise MoesimError(f"{path}: [[exclude]] rule {[bool(r) for r in exclude].index(False) + 1} is empty: a rule "
                          "names the values of the rows it leaves out")
    for name, values in axes.items():
        if not isinstance(values, list) or not values:
            raise MoesimError(f"{path}: axis '{name}' must be a non-empty list")
    for name, value in [(n, v) for n, vs in axes.items() for v in vs] + list(fixed.items()) \
            + [item for rule in exclude for item in rule.items()]:
        if not isinstance(value, (str, int, float, bool)):
            raise MoesimError(f"{path}: '{name}' takes a single value (a string, number or boolean), got {value!r}")
    for name in list(axes) + list(fixed) + [k for rule in exclude for k in rule]:
        if name not in KEYS[kind]:
            raise MoesimError(f"{path}: '{name}' is not a setting of a {kind} run (known: {', '.join(sorted(KEYS[kind]))})")
    both = sorted(set(axes) & set(fixed))
    if both:
        raise MoesimError(f"{path}: {', '.join(both)} given both as an axis and fixed")
    params = {k: v for k, v in {**fixed, **axes}.items() if k in CACHE_PARAMS + PREFETCH_PARAMS + STRATEGY_PARAMS}
    defaults = Config().flat()

    def values(owner: str) -> list:
        return axes.get(owner, [fixed.get(owner, defaults[owner])])

    with _spec_errors(path):
        check_params_used([composed(p, a) for p in values("policy") for a in values("admission")], params,
                          values("prefetch"), values("strategy"))
    fixed = {k: _resolve(path, k, v) for k, v in fixed.items()}
    axes = {k: [_resolve(path, k, v) for v in vs] for k, vs in axes.items()}
    exclude = [{k: _resolve(path, k, v) for k, v in rule.items()} for rule in exclude]  # as the rows hold them
    return SweepSpec(path, kind, _traces(path, data.get("traces")), axes, fixed, exclude)


def _resolve(spec: Path, key: str, value):
    """Paths in a spec (model files, traces, hardware TOML, arrival times) are relative to the spec's folder."""
    if key in PATH_KEYS and isinstance(value, str) and value.lower().endswith(FILE_SUFFIXES.get(key, ("",))):
        return value if Path(value).is_absolute() else str(spec.parent / value)
    return value


def _traces(path: Path, patterns) -> list[str]:
    from moesim.tracegen.trace import BUNDLED, trace_file

    if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
        raise MoesimError(f"{path}: 'traces' must be a non-empty list of paths or globs")
    found = []
    for pattern in patterns:
        if pattern == BUNDLED:
            found.append(str(trace_file(pattern)))
            continue
        full = pattern if Path(pattern).is_absolute() else str(path.parent / pattern)
        matches = sorted(glob.glob(full))
        if not matches:
            raise MoesimError(f"{path}: trace pattern '{pattern}' matches no file")
        found.extend(matches)
    found = list(dict.fromkeys(found))
    for trace in found:  # a file that is no trace stops the sweep here, in one line, not in every row as it runs
        read_meta(trace)
    return found


def run_config(kind: str, config: dict, config_id: str | None = None) -> dict:
    """One row: the configuration's id (``row_id``, unless the caller computed it) and every setting, its
    metrics or its error, and the seconds it took. An error names settings as the spec's keys (``capacity='auto'``),
    whichever front end runs the sweep and in whichever process."""
    start = time.perf_counter()
    row = {"config_id": config_id or row_id(kind, config), "kind": kind, **config}
    reader = READER.set("python")
    try:
        row.update(_metrics(kind, config))
        row["error"] = None
    except Exception as exc:  # a failing configuration is a row, not the end of the sweep
        row["error"] = first_line(exc) if isinstance(exc, MoesimError) else f"{type(exc).__name__}: {first_line(exc)}"
    finally:
        READER.reset(reader)
    row["seconds"] = time.perf_counter() - start
    return row


def run_unit(kind: str, unit: list[tuple[str, dict]]) -> list[dict]:
    """The rows of a unit of work (``_units``): one run per configuration, or, for hit-rate configurations that
    differ only in a capacity that is one number (split uniform), one miss-ratio curve
    (``moesim.sim.mrc``) that gives every capacity's row at once — each configuration's row as ``run_config`` makes it, ``seconds`` the curve's time
    shared out. A curve that fails (a capacity no run takes) falls back to one run each, so the
    failing configurations get their own error rows."""
    if kind != "hitrate" or len(unit) == 1 or unit[0][1].get("split", "uniform") != "uniform" \
            or not all(isinstance(c.get("capacity"), int) for _, c in unit):
        return [run_config(kind, config, cid) for cid, config in unit]
    from moesim.sim.mrc import curve

    start = time.perf_counter()
    first = unit[0][1]
    try:
        settings = Config.build(**{k: v for k, v in first.items() if k != "trace"})
        results = curve(load_cached_trace(first["trace"]), settings.cache, [c["capacity"] for _, c in unit])
    except MoesimError:
        return [run_config(kind, config, cid) for cid, config in unit]
    seconds = (time.perf_counter() - start) / len(unit)
    flat = {k: v for k, v in settings.flat().items() if k in KEYS["hitrate"] and k != "capacity"}
    rows = []
    for (cid, config), result in zip(unit, results):
        # the configuration's own settings name what ran (a policy and its admission apart), not the result's label
        measured = {k: v for k, v in result.as_dict().items() if k not in flat}
        metrics = {k: v for k, v in {**flat, **measured}.items() if k not in config and k != "seconds"}
        rows.append({"config_id": cid, "kind": kind, **config, **metrics, "error": None, "seconds": seconds})
    return rows


def _units(kind: str, todo: list[tuple[str, dict]]) -> list[list[tuple[str, dict]]]:
    """The configurations grouped into units of work: hit-rate ones that differ only in capacity together (one
    curve), every other alone; each policy's first unit first (then each one's second, ...), so the
    first workers compile different policies' loops at once instead of the same one (a cold sweep's
    cost)."""
    groups: dict = {}
    for cid, config in todo:
        key = tuple(sorted((k, repr(v)) for k, v in config.items() if k != "capacity")) if kind == "hitrate" else cid
        groups.setdefault(key, []).append((cid, config))
    units = list(groups.values())
    count: dict = {}
    rank = []
    for unit in units:
        policy = unit[0][1].get("policy")
        count[policy] = count.get(policy, 0) + 1
        rank.append(count[policy])
    return [units[i] for i in sorted(range(len(units)), key=rank.__getitem__)]


def _metrics(kind: str, config: dict) -> dict:
    """The settings of the run and what it measured."""
    trace = load_cached_trace(config["trace"])
    settings = Config.build(**{k: v for k, v in config.items() if k != "trace"})
    if kind == "hitrate":
        from moesim.sim.hitrate import simulate

        flat = {k: v for k, v in settings.flat().items() if k in KEYS["hitrate"]}  # it names what ran, not the label
        result = {k: v for k, v in simulate(trace, settings.cache).as_dict().items() if k not in flat}
    elif kind == "serve":
        from moesim.sim.serve import simulate_serve

        served = simulate_serve(trace, settings)
        by_batch = served.by_batch()
        result = {**served.as_dict()["summary"], "batch_running": by_batch["running"].to_list(),
                  "batch_hits": by_batch["hits"].to_list(), "batch_accesses": by_batch["accesses"].to_list()}
        flat = {}
    else:
        from moesim.sim.des import simulate_des

        result = simulate_des(trace, settings).as_dict()
        flat = {}
    result.pop("seconds", None)
    return {**flat, **{k: v for k, v in result.items() if k not in config}}


@dataclass
class SweepSummary(Tabular):
    total: int
    skipped: int
    ran: int
    failed: int
    seconds: float
    other: int = 0  # rows of a resumed file that this spec does not name (another spec's settings), kept
    workers: int = 1  # the local worker processes (``jobs``, at most one per usable CPU), or Ray's in-flight limit
    out: str = ""  # the results file: its rows are the sweep's table (``to_polars``)

    def to_polars(self) -> pl.DataFrame:
        """The results file: a row per configuration."""
        return pl.read_parquet(self.out)

    def table_rows(self) -> list[dict]:
        return self.to_polars().to_dicts()


EXECUTORS = ("local", "ray")


def run_sweep(spec: SweepSpec, out: str | Path, jobs: int = 1, resume: bool = False,
              progress: Callable[[int, int], None] | None = None, flush_seconds: float = FLUSH_SECONDS,
              executor: str = "local") -> SweepSummary:
    """Run every configuration ``out`` lacks (all of them unless ``resume``) on ``jobs`` workers (locally at most one
    per CPU this process may use; the rows are the same whatever the number),
    rewriting ``out`` with the rows so far at most every ``flush_seconds``.

    ``executor="ray"`` runs the configurations as Ray tasks instead of local processes: on the
    cluster ``ray.init()`` finds (``RAY_ADDRESS``), or on a local Ray started with ``jobs`` CPUs;
    at most ``jobs`` run at once (with ``jobs=1``, one per cluster CPU). Output, errors-as-rows,
    resume and stop behave the same."""
    if executor not in EXECUTORS:
        raise MoesimError(f"unknown executor {executor!r}; choose from {', '.join(EXECUTORS)}")
    out = Path(out)
    jobs = int(argument(jobs, "jobs", "a whole number >= 1", whole(jobs) and jobs >= 1))
    if executor == "local":  # a worker a CPU at most: more only compete for them, each a process with its own memory
        jobs = min(jobs, usable_cpus())
    seconds = isinstance(flush_seconds, numbers.Real) and not isinstance(flush_seconds, bool)
    argument(flush_seconds, "flush_seconds", "a number of seconds >= 0",  # not NaN: a wait never passed, or at every row
             seconds and 0 <= flush_seconds < math.inf)
    check_output(out, "results", suffixes=(".parquet",))  # its folder, its format (the command line's too)
    STOP.clear()  # from here a stop is honoured, the grid's expansion included
    try:
        return _run(spec, out, jobs, resume, progress, flush_seconds, executor)
    finally:
        STOP.clear()  # a stop ends this sweep, not the next one in the process


def _run(spec: SweepSpec, out: Path, jobs: int, resume: bool, progress, flush_seconds: float,
         executor: str) -> SweepSummary:
    done, existed = pl.DataFrame(), out.exists()
    if existed:
        if not resume:
            raise MoesimError(f"{out}: exists; pass {named('resume', True)} to continue that sweep, or remove it")
        try:
            if "config_id" not in pl.read_parquet_schema(out):  # before reading the rows (a trace may be large)
                raise MoesimError(f"{out}: not a sweep's results (no config_id column), so there is nothing to "
                                  "resume; give another file")
            done = pl.read_parquet(out, glob=False)
        except READ_FAILURES as exc:
            if isinstance(exc, MoesimError):
                raise
            raise MoesimError(f"{out}: unreadable results file ({first_line(exc)})") from None
        kinds = sorted(set(done["kind"].drop_nulls().to_list())) if "kind" in done.columns else []
        if kinds and kinds != [spec.kind]:  # one file, one kind: their columns differ
            raise MoesimError(f"{out}: holds a {' and '.join(kinds)} sweep's results, this spec's kind is "
                              f"{spec.kind}; give another file")
    have = set(done["config_id"].to_list()) if "config_id" in done.columns else set()
    configs = spec.configs(STOP)
    _check_rows(spec, configs)
    _check_machines(spec.kind, configs)
    todo, there = {}, set()  # each configuration once: settings that build the same Config share its id
    for c in configs:
        if STOP.is_set():
            break
        cid = row_id(spec.kind, c)  # each trace is hashed here once, not again by every worker
        if cid in have:
            there.add(cid)
        else:
            todo.setdefault(cid, c)
    todo = list(todo.items())
    if STOP.is_set():
        raise MoesimError(f"{out}: sweep stopped before its first configuration ran; nothing was written")
    start = time.perf_counter()
    rows, failed, last = [], 0, time.monotonic()
    work = _units(spec.kind, todo)
    if spec.kind != "hitrate" and executor == "local" and jobs > 1:
        _compile_first(todo, spec.kind)
    rows_iter = _execute_ray(spec.kind, work, jobs) if executor == "ray" else _execute(spec.kind, work, jobs)
    for row in rows_iter:
        rows.append(row)
        failed += row["error"] is not None
        if progress is not None:
            progress(len(rows), len(todo))
        if STOP.is_set():
            break
        if time.monotonic() - last >= flush_seconds:
            _write(done, rows, out)
            last = time.monotonic()
    rows_iter.close()  # a stopped sweep cancels what the workers have not started
    if rows and failed == len(rows) and not STOP.is_set():  # the file would hold nothing but errors
        if existed:  # as it was before the sweep (a flush may have written some of the errors)
            _write(done, [], out)
        else:
            out.unlink(missing_ok=True)
        raise MoesimError(f"{spec.path}: every one of the {len(rows)} configuration(s) run failed, so nothing was "
                          f"written to {out}; the first: {rows[0]['error']}")
    if rows or not out.exists():
        _write(done, rows, out)
    if STOP.is_set():
        raise MoesimError(f"{out}: sweep stopped after {len(rows)} of {len(todo)} configuration(s); "
                          f"run it again with {named('resume', True)} to finish")
    return SweepSummary(len(there) + len(todo), len(there), len(rows), failed, time.perf_counter() - start,
                        len(have - there), jobs, str(out))


def _compile_first(todo: list[tuple[str, dict]], kind: str) -> None:
    """The discrete-event loops ``todo`` runs, compiled once each before the workers start (one process per cold
    loop): workers that took two capacities of one cold policy would both compile it (45 s each for the γ-cache
    on a 2-core machine). A served stream or a MoLE model takes the full build of the loop."""
    from moesim.sim.des import compile_loops
    from moesim.sim.run import FULL, LEAN
    from moesim.tracegen.models import MODELS

    loops, build = {}, FULL if kind == "serve" else LEAN
    for _, config in todo:
        try:
            settings = Config.build(**{k: v for k, v in config.items() if k != "trace"})
        except MoesimError:
            continue  # its row will say why
        loops[settings.cache.composed, settings.prefetch.prefetcher, settings.execution.strategy] = None
        if getattr(MODELS.get(settings.model.name), "kind", None) == "mole":
            build = FULL
    compile_loops(loops, least=1, build=build)


def _execute(kind: str, work: list[list[tuple[str, dict]]], jobs: int) -> Iterator[dict]:
    """Rows as the units of ``work`` (``_units``) finish: in this process with one job, else on a pool of
    worker processes, each keeping its compiled policies and its last traces between units."""
    if jobs == 1 or len(work) <= 1:
        for unit in work:
            yield from run_unit(kind, unit)
        return
    from concurrent.futures import as_completed

    from moesim.workers import worker_pool

    with worker_pool(jobs, initializer=_worker_init, initargs=(os.getpid(),)) as pool:
        futures = [pool.submit(run_unit, kind, unit) for unit in work]
        for future in as_completed(futures):
            yield from future.result()


# the settings the row checks read (``_check_rows``: a row's trace and model, what the rules of unread settings look
# at), and those whose presence in a spec asks for them
READ_BY_CHECKS = {"trace", "model"} | LOOKED_AT


def _check_rows(spec: SweepSpec, configs: list[dict]) -> None:
    """What every row would fail on alike, or a setting of the spec that no row reads, refused before any runs (rows
    left out by ``exclude`` are not asked): a serve row with Poisson arrivals (the default) and no rate; a key every
    row leaves unread (``moesim.sim.reads``: a cache's settings where no row's strategy keeps one or every row's
    capacity is 0, threads where none computes on the CPU, an acceptance where none drafts, a cache's settings where
    every row's model is MoLE's). A row whose settings build no ``Config`` is left to report its own error."""
    if spec.kind == "serve":
        unrated = sum(c.get("arrivals", "poisson") == "poisson" and c.get("rate") is None for c in configs)
        if unrated:
            raise MoesimError(f"{spec.path}: {unrated} of its {len(configs)} rows have Poisson arrivals and no rate in "
                              "requests/s: give 'rate' in [axes] or [fixed], another arrivals (\"burst\"), or exclude "
                              "them")
    given = set(spec.axes) | set(spec.fixed)
    if not given & AUDITED:
        return
    built, models, seen = [], {}, set()
    for c in configs:  # one configuration per distinct value of what the checks read, not one per row
        if STOP.is_set():
            return
        key = repr(sorted((k, v) for k, v in c.items() if k in READ_BY_CHECKS))
        if key in seen:
            continue
        try:  # the whole row (an engine takes some settings only: narrowed to what the rules read, it might not build)
            config = Config.build(**{k: v for k, v in c.items() if k != "trace"})
            if spec.kind != "hitrate":
                models[c["trace"], config.model.name] = config.model.spec(read_meta(c["trace"]))
        except MoesimError:
            continue  # the row reports it
        built.append(config)
        seen.add(key)
    if not built:
        return
    with _spec_errors(spec.path):
        refuse_unread(given, built, list(models.values()), reads_strategy=spec.kind != "hitrate",
                      typed_once=True)


MACHINE_KEYS = tuple(k for k, (section, _) in SETTINGS.items() if section == "hardware")


def _check_machines(kind: str, configs: list[dict]) -> None:
    """Each machine of the rows that may be warned of (a file; a memory size given) built once, here, before any
    runs: its warnings (``MoesimWarning``: a number past every real part's) are given once, in this process, whose
    worker processes give none (``_worker_init``); one refused is left to its rows' errors."""
    if kind == "hitrate":
        return
    seen = set()
    for c in configs:
        parts = {k: c[k] for k in MACHINE_KEYS if k in c}
        key = repr(sorted(parts.items()))
        if key in seen or STOP.is_set():
            continue
        seen.add(key)
        if ("hardware" in parts and is_file_name(str(parts["hardware"]))) or {"vram", "ram"} & set(parts):
            try:
                Config().replace(**parts).hardware.spec()
            except MoesimError:
                continue  # the rows report it


@contextmanager
def _spec_errors(path: Path):
    """A spec's checks: their errors name the spec, and its keys as written there (``gamma``, not ``--gamma``: the
    names a row's error gives too)."""
    reader = READER.set("python")
    try:
        yield
    except MoesimError as exc:
        raise MoesimError(f"{path}: {exc}") from None
    finally:
        READER.reset(reader)


def _worker_init(parent: int) -> None:
    """A worker finishes its configuration on Ctrl-C (the parent decides when to stop) and exits when its
    parent is gone (killed with SIGKILL, it cannot tell its workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    blas_probe.skip()
    warnings.simplefilter("ignore", MoesimWarning)  # given once, by the parent (``_check_machines``)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _write(done: pl.DataFrame, rows: list[dict], out: Path) -> None:
    """All rows so far, old and new, written whole to a temporary file and renamed over ``out``."""
    new = pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()
    frame = pl.concat([done, new], how="diagonal_relaxed") if done.height and new.height else (new if new.height else done)
    with atomic_output(out) as tmp:
        frame.write_parquet(tmp)


def _execute_ray(kind: str, work: list[list[tuple[str, dict]]], jobs: int) -> Iterator[dict]:
    """Rows as Ray tasks (one per unit of ``work``) finish, with at most ``jobs`` (or one per cluster CPU)
    in flight."""
    try:
        import ray
    except ImportError:
        raise MoesimError(f"{named('executor', 'ray')} needs Ray: pip install 'moesim[ray]' (or pip install ray)") \
            from None
    if not ray.is_initialized():
        ray.init(num_cpus=None if os.environ.get("RAY_ADDRESS") else jobs, include_dashboard=False,
                 log_to_driver=False)
    task = ray.remote(run_unit)
    limit = jobs if jobs > 1 else max(1, int(ray.cluster_resources().get("CPU", 1)))
    pending, queue = [], list(work)
    try:
        while queue or pending:
            while queue and len(pending) < limit:
                pending.append(task.remote(kind, queue.pop(0)))
            finished, pending = ray.wait(pending, num_returns=1)
            yield from ray.get(finished[0])
    finally:
        for ref in pending:
            ray.cancel(ref)
