"""Time per output token from a trace: the discrete-event simulator's Python face.

``simulate_des`` runs one ``Config`` (``moesim.sim.config``) on a trace: it turns the trace into request
rows (batching, prefill) with the prefetcher's predictions (``BatchRows``), has
``moesim.sim.run.assemble`` size what must fit in GPU memory and host RAM, time every piece and build
the engine, steps every row in one call, and summarises: TPOT (mean, p50, p99) over decode steps,
tokens/s, TTFT (the prefill row, when the trace has prompt rows), the compute / copy / stall split per
step and the CPU's busy time, bytes over the link and from the SSD, hit rate (decode accesses served
from GPU memory without an on-demand copy), the shares computed on the CPU or served at low precision,
GPU memory and host RAM used, the predictor's precision and recall, and CommitMoE's substitutions.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from functools import cached_property

import numpy as np
from numba import njit

from moesim.errors import MoesimError, named
from moesim.frames import Tabular
from moesim.host import usable_cpus
from moesim.policies.admission import parts
from moesim.policies.base import Context
from moesim.policies.prefetch import get_prefetcher
from moesim.sim import blas_probe
from moesim.sim.config import SERVE_SETTINGS, Config, PrefetchConfig, placement_of, run_params
from moesim.sim.cost_model import cost_model
from moesim.sim.costs import Costs
from moesim.sim.des_state import (C_ACCESSES, C_CPU, C_FILLS, C_HITS, C_LOADS, C_LOWBIT, C_LOWBIT_MASS, C_PF_LOADS,
                                  C_PF_USED, C_PREFILL_LOADS, C_SSD_READS, C_SUBS, C_SUBS_MASS, R_COMPUTE, R_COPY,
                                  R_CPU, R_STALL, R_TIME)
from moesim.sim.accuracy import interval, side, ttft_interval
from moesim.sim.engine import COMPILE_NOTE, on_disk
from moesim.sim.machine import Hardware
from moesim.sim.policy_groups import group_of
from moesim.sim.requests import build_requests
from moesim.sim.run import LEAN, RowArrays, RowSource, Run, assemble, build_for, check_fills, loop_for
from moesim.sim.strategies.base import A_LOWBIT
from moesim.tracegen.models import ModelSpec, get_model
from moesim.tracegen.schema import DECODE, PREFILL
from moesim.tracegen.synth import synth_trace
from moesim.tracegen.trace import Trace

log = logging.getLogger(__name__)  # compile_loops' notes: ``extra["activity"]`` says what runs, None when done


@dataclass
class DesResult(Tabular):
    """One simulated configuration. Times in seconds; per-step figures are means over decode steps."""

    model: str                 # the model simulated (the preset, or the trace's own dimensions)
    hardware: str              # the machine simulated (with the link swapped in, if any)
    timed_as: str              # the engine it was timed as (``moesim.sim.engines``)
    framework_us: float        # ... and the framework time per MoE layer learned for it that the run took (0: none)
    prompt_growth: float       # ... and the growth of its prompt's time (``ttft_s`` is x (1 + it); 0: none)
    as_engine: bool            # timed as that engine (a plan's row, ``--engine NAME``), not the placement's operations
    side: str                  # where its engine computes the experts not on the GPU (``moesim.sim.accuracy.side``)
    config: Config = field(repr=False)
    tpot_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    tokens_per_s: float
    tokens_per_s_low: float | None   # its 80% interval on a spec sheet's machine (``moesim.sim.accuracy``; None:
    tokens_per_s_high: float | None  # a measured machine's)
    ttft_s: float | None
    ttft_s_low: float | None   # its 80% interval on a spec sheet's machine (``moesim.sim.accuracy.ttft_interval``)
    ttft_s_high: float | None
    compute_s: float
    copy_s: float
    stall_s: float
    cpu_s: float               # seconds per step the host CPU computed experts
    bytes_h2d: float
    bytes_ssd: float
    hit_rate: float
    hits: int
    accesses: int
    loads: int
    prefill_loads: int
    prefetch_loads: int
    prefetch_used: int
    prefetch_precision: float | None
    prefetch_recall: float | None
    substitutions: int
    substituted_weight: float | None
    cpu_share: float           # decode accesses computed on the host CPU
    lowbit_share: float | None  # decode accesses served by a low-bit copy (None: the strategy fetches none)
    lowbit_weight: float | None  # ... and the router weight they carry, per layer and step
    fills: int                 # background copies into slots (A_CPU_FILL)
    vram_gb: float             # GiB of GPU memory used (moesim.sim.memory)
    ram_gb: float              # GiB of host RAM used
    vram_limit_gb: float | None  # what the GPU has (None: not known)
    ram_limit_gb: float | None
    decode_steps: int
    decode_tokens: int
    per_layer_hit_rate: list
    seconds: float
    step_times: np.ndarray = field(repr=False)  # seconds of every decode step, in order
    decisions: np.ndarray = field(repr=False)  # int64 [n, 5] (row, layer, event, object, slot), see des_state
    requests: object = field(repr=False, default=None)  # the request rows simulated (moesim.sim.requests)
    executed: tuple = field(repr=False, default=None)  # (experts, tokens) each cell ran, see ``executed``
    placement: np.ndarray = field(repr=False, default=None)  # int8 [L]: each layer's placement (strategies)
    costs: Costs | None = field(repr=False, default=None)  # the durations the engine strung together
    machine: Hardware | None = field(repr=False, default=None)  # the machine as simulated (its engine's own threads)

    @property
    def policy(self) -> str:
        return self.config.cache.composed

    @property
    def capacity(self) -> int:
        return self.config.cache.capacity

    @property
    def kernel(self) -> str:
        return self.config.execution.kernel

    def as_dict(self) -> dict:
        """The model and machine simulated, every setting (``Config.flat``) and every metric; not the
        per-step times, the decision log or the arrays behind them."""
        settings = {k: v for k, v in self.config.flat().items() if k not in ("model", "hardware", *SERVE_SETTINGS)}
        return {"model": self.model, "hardware": self.hardware, "timed_as": self.timed_as, **settings,
                **{f.name: getattr(self, f.name) for f in fields(self) if f.name not in
                   ("model", "hardware", "timed_as", "config", "step_times", "decisions", "requests", "executed",
                    "costs", "machine")}}


def simulate_des(trace: Trace, config: Config, model: ModelSpec | None = None, hardware: Hardware | None = None,
                 decisions: bool = False, shared: Shared | None = None, as_engine: bool = False) -> DesResult:
    """Simulate decoding ``trace`` under ``config`` (its sections say what each setting does).

    ``model`` and ``hardware`` replace the configuration's (a model without a preset, a machine built
    in code). ``decisions`` keeps the engine's log of hits, loads and prefetches
    (``DesResult.decisions``, what ``moesim replay`` executes). ``shared``: what runs on this trace have in
    common, computed once for all of them (``Shared``). ``as_engine``: timed as its engine, the framework time learned
    for it included (a plan's row; ``moesim.sim.engines.engine_for``).
    """
    return prepare_des(trace, config, model, hardware, decisions, shared, as_engine=as_engine).simulate()


class Shared:
    """What runs of one trace compute alike, kept for the next: the request rows of each workload, the
    prefetcher's predictions for them. A plan's candidates and a curve's points share one; the trace must
    not change while it lives (its arrays are read, not copied)."""

    def __init__(self, trace: Trace):
        self.trace = trace
        self._kept: dict = {}
        self._held: dict = {}  # the objects keys name by identity, held while this lives: none other takes it

    def key(self, params: dict) -> tuple:
        """Settings as part of a key: plain values by value, objects (a training trace) by identity."""
        plain = (bool, int, float, str, type(None))
        self._held.update({id(v): v for v in params.values() if not isinstance(v, plain)})
        return tuple((k, v if isinstance(v, plain) else ("object", id(v))) for k, v in sorted(params.items()))

    def get(self, trace: Trace, key: tuple, make):
        """``make()``, or what it gave for ``key`` before."""
        if trace is not self.trace:
            raise ValueError("a Shared serves the runs of the trace it was made for")
        if key not in self._kept:
            self._kept[key] = make()
        return self._kept[key]


@dataclass
class Prepared:
    """A run assembled and not yet simulated (``prepare_des``): everything but the discrete-event loop, which
    ``simulate`` runs, once."""

    trace: Trace
    run: Run
    source: BatchRows

    def simulate(self) -> DesResult:
        run = self.run
        if run.rows_run:
            raise ValueError("a prepared run is simulated once (prepare it again)")
        start = time.perf_counter()
        run.step()
        result = _summary(self.trace, run, self.source, time.perf_counter() - start)
        result.executed, result.placement = (run.rows.exe, run.rows.exe_tokens), run.state.inputs.placement
        return result


def simulate_all(prepared: list[Prepared]) -> list[DesResult]:
    """Each prepared run simulated, in its order, on up to a thread per core this process may use: the loop
    releases the GIL (a plan's runs take half the time on two cores). Each run's loop is chosen here first: threads
    would bind it twice."""
    for p in prepared:
        p.run.loop  # noqa: B018 (chosen now, in this thread)
    with ThreadPoolExecutor(max(1, min(len(prepared), usable_cpus()))) as pool:
        return list(pool.map(Prepared.simulate, prepared))


def prepare_des(trace: Trace, config: Config, model: ModelSpec | None = None, hardware: Hardware | None = None,
                decisions: bool = False, shared: Shared | None = None, build: int = LEAN,
                as_engine: bool = False) -> Prepared:
    """``simulate_des`` up to its loop: the run checked, sized, timed and built, its predictions judged (``build``:
    the least build of the loop it takes; ``as_engine``: timed as its engine, framework time included:
    ``moesim.sim.run.assemble``). A plan prepares its runs while the loop compiles elsewhere."""
    source = BatchRows(trace, config, shared)
    prepared = Prepared(trace, assemble(trace, config, source, model, hardware, decisions, build, as_engine), source)
    source.quality  # noqa: B018 (computed now: it reads the predictions only)
    check_fills(prepared.run)
    return prepared


class BatchRows(RowSource):
    """Every request row of a batch run at once (``moesim.sim.requests``: batching and prefill rows), with
    the prefetcher's predictions and preloads and what each cell executes; ``shared`` keeps the rows and
    predictions for other runs of the trace."""

    def __init__(self, trace: Trace, config: Config, shared: Shared | None = None):
        self.trace, self.config = trace, config
        self.shared = shared if shared is not None else Shared(trace)
        self.exe = self.pred = self.preload = self.preload_at = None

    @cached_property
    def req(self):
        """The request rows (built once the run is checked: ``moesim.sim.run.check``)."""
        wl = self.config.workload
        return self.shared.get(self.trace, ("requests", wl.batch, wl.context, wl.prompt),
                               lambda: build_requests(self.trace, wl.batch, wl.context, wl.prompt))

    @cached_property
    def quality(self) -> tuple[float | None, float | None]:
        """The predictions' precision and recall (``_prediction_quality``)."""
        return _prediction_quality(self.req, self.pred, self.preload, self.preload_at, self.trace.meta.num_experts)

    def footprint(self, trace: Trace, config: Config) -> tuple[float, int, bool]:
        wl, req = config.workload, self.req
        longest = int(np.diff(trace.seq_offsets).max(initial=0))
        prefills = bool((req.kind == PREFILL).any())
        return wl.batch * (wl.context + wl.prompt + longest), int(req.experts.shape[2]), prefills

    def arrays(self, config, slots, model, hardware, weights, lowbit, engine) -> tuple[RowArrays, Costs]:
        req, trace = self.req, self.trace
        pred, pred_tokens, self.preload, self.preload_at = predictions(trace, req, config.prefetch, slots,
                                                                       config.cache.scope, self.shared)
        self.pred = pred
        exe, exe_tokens, committed = executed(req, pred, pred_tokens, config.prefetch.mode == "commit")
        self.exe = exe
        cost = cost_model(model, hardware, weights, engine, placement_of(config, model.num_layers)).costs(
            req.tokens, req.ctx, int(exe_tokens.max(initial=1)), lowbit, req.outputs, req.kind == PREFILL)
        group_start = np.zeros(req.num_rows, np.bool_)
        group_start[req.group_offsets[:-1][req.group_offsets[:-1] < req.num_rows]] = True
        return RowArrays(experts=req.experts, exe=exe, exe_tokens=exe_tokens, committed=committed, weights=req.weights,
                         pred=pred, kind=req.kind, tokens=req.tokens, pre_s=cost.pre_s, shared_s=cost.shared_s,
                         row_s=cost.row_s, lut_s=cost.lut_s,
                         handoff_s=cost.handoff_s, group_start=group_start, preload_at=self.preload_at,
                         preload=self.preload), cost

    def policy_context(self, config, slots, params) -> Context:
        # the policy sees what the cache serves: under commit, the predictions (Belady's future, static's popularity)
        return Context(self.exe, self.req.group_offsets, self.trace.meta.num_experts, np.maximum(slots, 1),
                       config.cache.scope == "per-layer", False, config.cache.reset, params)

    def measure_from(self, config: Config) -> int:
        return _measure_from(self.req, config.workload.warmup)


def compile_loops(settings, least: int = 2, build: int = LEAN) -> None:
    """Compile what simulating each ``(policy, prefetcher, strategy)`` of ``settings`` runs (the strategy
    ``gpu-cache`` where a pair leaves it out) — the discrete-event loop of the policy's group
    (``moesim.sim.policy_groups``) in the build the group's most demanding setting needs (``build_for``: every run
    of its policies then takes it), ``build`` at least, and the prefetcher's code — where numba's disk cache lacks
    the loop, one process per loop in parallel (as many as there are cores): a cold ``plan`` or sweep compiles its
    loops at once rather than one after another, and each once. Each worker simulates a run on a tiny trace (the
    first of its group's runs the trace can take) with that build, which compiles the loop for the argument types
    every simulation passes; this process meanwhile assembles every run on it but does not simulate it, which
    compiles the prefetchers' code. Logs what it compiles and each one done (``extra["activity"]``, None at the
    end): the command's status line shows it. Fewer than ``least`` cold loops are left to the caller (who, with
    nothing else to do meanwhile, compiles one as fast in its own process; a sweep's workers would each compile it
    and a plan makes its trace meanwhile, so they pass 1)."""
    with compiling(settings, least, build=build):
        pass


@contextmanager
def compiling(settings, least: int = 2, synthetic: bool = False, build: int = LEAN) -> Iterator[None]:
    """``compile_loops`` in worker processes while the block runs in this one (a plan makes its synthetic
    trace and assembles its runs meanwhile, whose code compiles too); the way out waits for the loops. A block
    that fails stops the workers instead of waiting for them. ``synthetic``: the command makes a synthetic trace
    after the block (the demo's plans), whose generator this process compiles too while it waits."""
    from moesim.workers import terminate, worker_pool

    model = get_model(TINY_MODEL)
    wanted: dict[tuple, list] = {}  # a group of policies (one loop): the runs of its members
    for policy, prefetcher, *strategy in settings:
        wanted.setdefault(group_of(policy), []).append((policy, prefetcher, strategy[0] if strategy else "gpu-cache"))
    cold = {}  # what the status line calls a cold loop: the runs that may compile it, the first that can does
    for group, runs in wanted.items():
        most = max(build, *(build_for(Config.build(prefetch=run[1], strategy=run[2]), model) for run in runs))
        loop = loop_for(runs[0][0], most)
        if not loop.signatures and not on_disk(loop):
            # compiled in the build ``most`` by the first run the tiny trace takes: one with no prefetcher first
            label = ", ".join(dict.fromkeys(run[0] for run in runs))
            cold[label] = (sorted(runs, key=lambda run: run[1] != "none"), most)
    workers = min(len(cold), usable_cpus())
    if not cold or len(cold) < least:
        yield
        return
    what = f"compiling the simulator for {', '.join(cold)}, {{}} of {len(cold)} done ({COMPILE_NOTE})"
    log.info(what.format(0), extra={"activity": what.format(0)})
    try:
        with worker_pool(workers) as pool:
            futures = [pool.submit(_compile_in_worker, runs, most) for runs, most in cold.values()]
            try:
                yield
                for runs in wanted.values():  # the prefetchers' and the strategies' code, here while the loops compile
                    for run in runs:
                        _tiny_run(run, assemble_only=True)
                if synthetic:
                    synth_trace(1, 2, 1, 1, 1, 0)
            except BaseException:
                terminate(pool)
                raise
            for done, future in enumerate(as_completed(futures), 1):
                future.result()
                log.info(what.format(done), extra={"activity": what.format(done)})
    finally:
        log.info("compiled", extra={"activity": None})


TINY_MODEL = "olmoe-1b-7b"  # what ``compile_loops`` simulates


def _compile_in_worker(runs: list[tuple[str, str, str]], build: int) -> None:
    """``_compile_loop`` in a compile worker, whose objects are then frozen, so that it leaves without sweeping
    them for cycles (0.3 s of the command's wait after a loop's compilation; a worker given a second loop only
    keeps the first one's objects a little longer)."""
    blas_probe.skip()
    _compile_loop(runs, build)
    gc.freeze()


def _compile_loop(runs: list[tuple[str, str, str]], build: int) -> None:
    """Compile a group's loop in ``build`` by simulating the first of ``runs`` that the tiny trace can take."""
    for run in runs:
        if _tiny_run(run, build=build):
            return


def _tiny_run(run: tuple[str, str, str], assemble_only: bool = False, build: int = LEAN) -> bool:
    """Simulate ``(policy, prefetcher, strategy)`` on a tiny trace with the loop's ``build`` at least (or only
    assemble the run: everything but the loop), which compiles what any simulation of it runs; False where the
    run needs what the trace lacks."""
    policy, prefetcher, strategy = run
    m = get_model(TINY_MODEL)
    rows = 4  # one sequence whose experts rotate, made here (a synthetic trace would compile its generator too)
    picks = (np.arange(rows)[:, None, None] + np.arange(m.top_k)) % m.num_experts
    experts = np.ascontiguousarray(np.broadcast_to(picks, (rows, m.num_layers, m.top_k)), np.int16)
    trace = Trace(m.trace_meta(), experts, np.zeros(1, np.int32), np.array([0, rows], np.int64),
                  np.arange(rows, dtype=np.int32), np.full(rows, DECODE, np.int8))
    policy, admission = parts(policy)  # a policy with an admission (``CacheConfig.composed``)
    config = Config.build(model=m.name, policy=policy, admission=admission, prefetch=prefetcher, strategy=strategy,
                          capacity=m.top_k)
    try:
        if assemble_only:
            assemble(trace, config, BatchRows(trace, config), None, None, False)
        else:
            prepare_des(trace, config, build=build).simulate()
    except MoesimError:  # a prefetcher or strategy that needs what this trace lacks: the run itself compiles it
        return False
    return True


def predictions(trace: Trace, req, prefetch: PrefetchConfig, slots: np.ndarray, scope: str,
                shared: Shared | None = None) -> tuple:
    """What the prefetcher tells the engine: next-cell predictions per request row (int16 [R, L, P],
    P = 0 without) and the tokens behind each predicted expert, and preload sets per batch
    (int16 [G, L, W], W = min(C, E), at least 1; -1 past a set's end) with the row each is issued at (-1: none);
    ``slots`` are each partition's. ``shared`` keeps the predictions (and a preload's scores) for other runs of
    the trace with the same prefetcher."""
    predictor = get_prefetcher(prefetch.prefetcher)
    params = run_params(predictor, prefetch.params) if predictor is not None else {}
    n_rows, n_layers = req.experts.shape[:2]
    pred = np.full((n_rows, n_layers, 0), -1, np.int16)
    pred_tokens = np.zeros(pred.shape, np.int32)
    preload = np.full((1, n_layers, 0), -1, np.int16)
    preload_at = np.full(n_rows, -1, np.int64)
    shared = shared if shared is not None else Shared(trace)
    key = (prefetch.prefetcher, shared.key(params))
    if predictor is not None and predictor.kind == "next":
        def union():
            out, tokens = req.union(predictor.predict(trace, params), req.batch * trace.meta.top_k)
            prefill = req.kind == PREFILL
            if prefill.any():  # the rows' own predictions may be the predictor's array, which is not written
                out = out.copy() if req.identity else out
                out[prefill] = -1
            return out, tokens
        pred, pred_tokens = shared.get(trace, ("predict", shared.key({"rows": req}), *key), union)
    elif predictor is not None:
        scores = shared.get(trace, ("scores", *key), lambda: predictor.scores(trace, params))
        preload, preload_at = _preloads(req, scores, slots, scope, trace.meta.num_experts)
    return pred, pred_tokens, preload, preload_at


def executed(req, pred: np.ndarray, pred_tokens: np.ndarray, commit: bool) -> tuple:
    """The experts each cell runs (int16 [R, L, W]), the tokens each computes (int32 [R, L, W]) and
    which cells run a prediction (bool [R, L]): under ``commit``, every decode cell with a prediction
    (prefetched from the cell before it, so not a group's first layer 0), each predicted expert on
    the tokens whose prediction held it; elsewhere the routed experts."""
    committed = np.zeros(req.experts.shape[:2], np.bool_)
    if commit and pred.shape[2] > 0:
        committed = (req.kind == DECODE)[:, None] & (pred[..., 0] >= 0)
        committed[req.group_offsets[:-1][req.group_offsets[:-1] < req.num_rows], 0] = False
    if not committed.any():
        return req.experts, req.counts, committed
    exe, tokens = req.experts.copy(), req.counts.copy()
    exe[committed], tokens[committed] = -1, 0
    exe[committed, :pred.shape[2]], tokens[committed, :pred.shape[2]] = pred[committed], pred_tokens[committed]
    return exe, tokens, committed


def measured_decode(req, warmup: int) -> np.ndarray:
    """bool [rows]: the decode rows a result measures (those of the batches after the ``warmup`` ones)."""
    return (req.kind == DECODE) & (np.arange(req.num_rows) >= _measure_from(req, warmup))


def _measure_from(req, warmup: int) -> int:
    """The first request row measured: that of batch ``warmup`` (the batches before it warm the caches up)."""
    groups = req.group_offsets.size - 1
    if warmup >= groups:
        raise MoesimError(f"{named('warmup', warmup)} leaves none of the trace's {groups} batch(es) to measure")
    return int(req.group_offsets[warmup])


def _preloads(req, scores, slots, scope, num_experts):
    """Top-C experts per layer (each layer's own C) for every batch (its sequences' scores summed),
    issued at its first decode row. With global scope the pool's C slots are shared out: the C best
    (layer, expert) pairs."""
    n_groups = req.group_offsets.size - 1
    n_layers = scores.shape[1]
    capacity = int(slots.max())
    width = max(min(capacity, num_experts), 1)  # a layer's set holds at most its experts, whatever the pool's size
    sets = np.full((n_groups, n_layers, width), -1, np.int16)
    at = np.full(req.num_rows, -1, np.int64)
    for g in range(n_groups):
        rows = np.arange(req.group_offsets[g], req.group_offsets[g + 1])
        decode = rows[req.kind[rows] == DECODE]
        if decode.size == 0 or capacity == 0:
            continue
        seqs = np.arange(g * req.batch, min((g + 1) * req.batch, scores.shape[0]))
        total = scores[seqs].sum(axis=0)
        if scope == "per-layer":
            order = np.argsort(-total, axis=1, kind="stable")[:, :capacity]
            keep = (np.take_along_axis(total, order, axis=1) > 0) & (np.arange(order.shape[1]) < slots[:, None])
            sets[g, :, :order.shape[1]] = np.where(keep, order, -1)
        else:
            flat = np.argsort(-total.ravel(), kind="stable")[:capacity]
            flat = flat[total.ravel()[flat] > 0]
            for layer in range(n_layers):
                members = flat[flat // num_experts == layer] % num_experts
                sets[g, layer, :members.size] = members
        at[decode[0]] = g
    return sets, at


def _prediction_quality(req, pred, preload, preload_at, num_experts: int) -> tuple[float | None, float | None]:
    """Precision |P∩R|/|P| and recall |P∩R|/|R| of the predictions, over the decode cells that have one
    (a preload is judged against the union its batch then decodes, per layer)."""
    if pred.shape[2] > 0:
        cells = (pred[..., 0] >= 0) & (req.kind == DECODE)[:, None]
        both, predicted, actual = _overlap(pred, req.experts, cells, num_experts)
    elif preload.shape[2] > 0:
        both, predicted, actual = _preload_overlap(req.experts, req.group_offsets, preload_at, preload,
                                                   num_experts)
    else:
        return None, None
    return (both / predicted if predicted else None), (both / actual if actual else None)


@njit(cache=True)
def _preload_overlap(experts, group_offsets, preload_at, preload, num_experts):
    """Over each preloaded batch's layers with a preload set P: Σ|P ∩ U|, Σ|P|, Σ|U|, U the experts the batch runs
    in that layer from the preload's row to its end."""
    both = predicted = actual = 0
    used = np.zeros(num_experts, np.bool_)
    for row in range(experts.shape[0]):
        g = preload_at[row]
        if g < 0:
            continue
        for layer in range(experts.shape[1]):
            if preload[g, layer, 0] < 0:
                continue
            for e in range(num_experts):
                used[e] = False
            for r in range(row, group_offsets[g + 1]):
                for j in range(experts.shape[2]):
                    e = experts[r, layer, j]
                    if e >= 0 and not used[e]:
                        used[e] = True
                        actual += 1
            for i in range(preload.shape[2]):
                if preload[g, layer, i] >= 0:
                    predicted += 1
                    both += used[preload[g, layer, i]]
    return both, predicted, actual


@njit(cache=True)
def _overlap(guess, truth, cells, num_experts):
    """Over the cells set in ``cells``: Σ|guess ∩ truth|, Σ|guess|, Σ|truth| (-1 entries are none), the cell's truth
    marked in a bitmap and unmarked after."""
    both = predicted = actual = 0
    seen = np.zeros(num_experts, np.bool_)
    for r in range(guess.shape[0]):
        for layer in range(guess.shape[1]):
            if not cells[r, layer]:
                continue
            for j in range(truth.shape[2]):
                if truth[r, layer, j] >= 0:
                    actual += 1
                    seen[truth[r, layer, j]] = True
            for i in range(guess.shape[2]):
                if guess[r, layer, i] >= 0:
                    predicted += 1
                    both += seen[guess[r, layer, i]]
            for j in range(truth.shape[2]):
                if truth[r, layer, j] >= 0:
                    seen[truth[r, layer, j]] = False
    return both, predicted, actual


def _summary(trace: Trace, run: Run, source: BatchRows, seconds: float) -> DesResult:
    config, req, cost, tally = run.config, source.req, run.costs, run.state.tally
    counters = tally.counters - tally.warm_counters
    layer_hits, layer_accesses = tally.layer_hits - tally.warm_hits, tally.layer_accesses - tally.warm_accesses
    rows = tally.rows
    measured = np.arange(req.num_rows) >= _measure_from(req, config.workload.warmup)
    decode = measured_decode(req, config.workload.warmup)
    step_times = rows[decode, R_TIME]
    n_steps = int(decode.sum())
    tokens = float(req.tokens[decode].sum())
    prefill = rows[(req.kind == PREFILL) & measured, R_TIME]
    precision, recall = source.quality
    loads = counters[C_LOADS] + counters[C_PREFILL_LOADS] + counters[C_PF_LOADS] + counters[C_FILLS]
    accesses = int(counters[C_ACCESSES])
    lowbit = A_LOWBIT in run.strategy.actions

    def mean(x):
        return float(x.mean()) if x.size else float("nan")

    tokens_per_s = tokens / float(step_times.sum()) if n_steps and step_times.sum() > 0 else float("nan")
    low, high = interval(tokens_per_s, run.hardware, run.as_engine, side(run.strategy))
    growth = run.engine.prompt_growth  # a prompt as its engine runs it
    ttft_s = mean(prefill) * (1 + growth) if prefill.size else None
    ttft_low, ttft_high = ttft_interval(ttft_s, run.hardware, growth > 0)

    return DesResult(
        model=run.model.name, hardware=run.hardware.name, timed_as=run.engine.name, machine=run.hardware,
        framework_us=run.engine.layer_us, prompt_growth=growth, as_engine=run.as_engine, side=side(run.strategy),
        config=config,
        tpot_s=mean(step_times),
        tpot_p50_s=float(np.percentile(step_times, 50)) if n_steps else float("nan"),
        tpot_p99_s=float(np.percentile(step_times, 99)) if n_steps else float("nan"),
        tokens_per_s=tokens_per_s, tokens_per_s_low=low, tokens_per_s_high=high,
        ttft_s=ttft_s, ttft_s_low=ttft_low, ttft_s_high=ttft_high,
        compute_s=mean(rows[decode, R_COMPUTE]), copy_s=mean(rows[decode, R_COPY]),
        stall_s=mean(rows[decode, R_STALL]), cpu_s=mean(rows[decode, R_CPU]),
        bytes_h2d=float(loads * cost.expert_bytes + counters[C_LOWBIT] * cost.lowbit_bytes
                        + cost.lut_bytes[measured].sum() * trace.meta.num_layers),
        bytes_ssd=float(counters[C_SSD_READS] * cost.expert_bytes),
        hit_rate=float(counters[C_HITS] / accesses) if accesses else float("nan"),
        hits=int(counters[C_HITS]), accesses=accesses, loads=int(counters[C_LOADS]),
        prefill_loads=int(counters[C_PREFILL_LOADS]), prefetch_loads=int(counters[C_PF_LOADS]),
        prefetch_used=int(counters[C_PF_USED]),
        prefetch_precision=None if precision is None else float(precision),
        prefetch_recall=None if recall is None else float(recall),
        substitutions=int(counters[C_SUBS]),
        substituted_weight=(float(counters[C_SUBS_MASS]) / (n_steps * trace.meta.num_layers)
                            if config.prefetch.mode == "commit" and n_steps else None),
        cpu_share=float(counters[C_CPU] / accesses) if accesses else 0.0,
        lowbit_share=float(counters[C_LOWBIT] / accesses) if lowbit and accesses else None,
        lowbit_weight=(float(counters[C_LOWBIT_MASS]) / (n_steps * trace.meta.num_layers)
                       if lowbit and n_steps else None),
        fills=int(counters[C_FILLS]), **run.memory.fields(),
        decode_steps=n_steps, decode_tokens=int(tokens),
        per_layer_hit_rate=[float(h / a) if a else float("nan") for h, a in zip(layer_hits, layer_accesses)],
        seconds=seconds, step_times=step_times, decisions=tally.log[:tally.n_log[0]].copy(), requests=req,
        costs=cost)
