"""Serving: requests arrive, a continuous-batching scheduler forms each step, the discrete-event engine
runs it.

``simulate_serve`` turns a trace into a stream of requests (``moesim.sim.scheduler``), has
``moesim.sim.run.assemble`` build the run, and steps it (``Run.step``) one step at a time, each step
formed when the one before it ends (``StreamRows.fill``): a step's row is, per layer, the union of the
experts its requests' rows chose (prompt chunks and decode positions, running requests first, as
``moesim.sim.requests`` unites a batch's rows), its cost the attention of its tokens over their KV cache
(``moesim.sim.cost_model``'s ``row_costs``). The cache, the copy engines, the CPU and the clock carry over from
step to step, with the configured policy, prefetcher (one that predicts the next cell; a step does not
prefetch into the next, which is not formed yet) and strategy. With nothing to run the clock moves to
the next arrival.

Per request: queueing delay (arrival to its first step), TTFT (arrival to the end of the step that gave
its first token: its prompt's last chunk, or without a prompt its first decode step), TPOT (its decode
steps' time per decode token, from the end of its prefill, or without a prompt from the start of its
first decode step, to its end) and end-to-end latency. The summary's ``tpot_s`` is all requests' decode
time over their decode tokens (``moesim sim run``'s definition: a lone request gets sim run's batch-1
TPOT); throughput is output tokens (and requests) over the span from the first arrival to the last
finish; the hit rate is over the accesses of steps that decode, as in ``sim run``.

``capacity auto`` and the memory check size the KV cache for ``max_batch`` requests of the longest
sequence. A policy that reads the rows ahead (``reads_rows``), a preloading prefetcher, and a cache that
resets per batch have no meaning here and are refused.
"""

from __future__ import annotations

import time
from pathlib import Path
from dataclasses import dataclass, field, fields, replace

import numpy as np
import polars as pl

from moesim.errors import MoesimError, named
from moesim.frames import Tabular
from moesim.host import available_ram
from moesim.policies import get_policy
from moesim.policies.base import Context
from moesim.policies.prefetch import get_prefetcher
from moesim.sim.config import ARRIVALS, NOT_SERVED, Config, placement_of, run_params
from moesim.sim.cost_model import cost_model
from moesim.sim.costs import Costs
from moesim.sim.des_state import C_FILLS, C_LOADS, C_LOWBIT, C_PF_LOADS, C_PREFILL_LOADS, C_RECLAIMED
from moesim.sim.machine import Hardware
from moesim.sim.memory import GIB, Footprint, Memory, resolve
from moesim.sim.requests import expert_choices, gather, merge, prompt_routing
from moesim.sim.run import RowArrays, RowSource, Run, assemble, check_fills, kernel_unread
from moesim.sim.scheduler import Queue, Scheduler, arrival_times, make_queue, most_step_tokens, read_arrivals
from moesim.sim.strategies import get_strategy
from moesim.sim.strategies.base import CACHED
from moesim.tracegen.models import ModelSpec
from moesim.tracegen.schema import DECODE, PREFILL
from moesim.tracegen.trace import Trace

QUANTILES = (50, 90, 99)


@dataclass
class ServeResult(Tabular):
    """One served stream: the summary, every request and every step. As a table (``to_polars``): one row, the
    summary with every setting; ``requests`` and ``steps`` are its tables per request and per step."""

    model: str
    hardware: str
    config: Config = field(repr=False)
    summary: dict
    requests: pl.DataFrame = field(repr=False)  # one row per request (``request_frame``)
    steps: pl.DataFrame = field(repr=False)     # one row per step: start_s, time_s, running, tokens, hits, accesses

    def by_batch(self) -> pl.DataFrame:
        """The hit rate of the steps that decode, by how many requests the step ran."""
        return (self.steps.filter(pl.col("accesses") > 0).group_by("running").agg(
            pl.len().alias("steps"), pl.col("hits").sum(), pl.col("accesses").sum())
            .with_columns(hit_rate=pl.col("hits") / pl.col("accesses")).sort("running"))

    def table_rows(self) -> list[dict]:
        return [self.as_dict()["summary"]]

    def as_dict(self) -> dict:
        """The model, machine and every setting beside the summary's metrics; per request; by batch size."""
        settings = {k: v for k, v in self.config.flat().items() if k not in ("model", "hardware", *NOT_SERVED)}
        return {"summary": {"model": self.model, "hardware": self.hardware, **settings, **self.summary},
                "requests": self.requests.to_dicts(), "by_batch": self.by_batch().to_dicts()}


REQUEST_BYTES = 8 * (len(fields(Queue)) + 2)  # a request's queue columns, its arrival drawn and its place in the order


def _check_requests(n: int) -> None:
    """Refuse, before allocating, a stream whose queue alone this machine's free memory cannot hold (its steps take
    more, in proportion to its tokens; past the queue, running out of memory is one line too: ``moesim.cli.app``)."""
    free = available_ram()
    if free is not None and n * REQUEST_BYTES > free:
        raise MoesimError(f"{named('requests')} {n:,}: their queue alone needs {n * REQUEST_BYTES / 1e9:.1f} GB and "
                          f"{free / 1e9:.1f} GB of memory is free; ask for fewer")


def simulate_serve(trace: Trace, config: Config, model: ModelSpec | None = None,
                   hardware: Hardware | None = None, given: frozenset | set = frozenset()) -> ServeResult:
    """Serve ``trace``'s sequences as a stream of requests under ``config`` (its ``serve`` section). ``given``: the
    settings typed on the command line (the API passes none: a loop passes the same settings to each call): one that
    this stream does not read, as only its trace, its requests or its resolved run show, is refused
    (``_check_stream_read``; what the configuration alone shows, ``moesim.sim.reads`` refuses before)."""
    _check_serve(trace, config)
    sv, wl = config.serve, config.workload
    rng = np.random.default_rng(sv.arrival_seed)
    seq, asked = None, "prompt" in given  # a prompt of 0 given is refused too where each is recorded
    if sv.arrivals in ARRIVALS:
        n_requests = sv.requests or trace.num_sequences
        _check_requests(n_requests)
        queue = make_queue(trace, n_requests, wl.prompt, arrival_times(sv.arrivals, sv.rate, n_requests, rng), rng,
                           prompt_asked=asked)
    else:
        arrivals, seq = read_arrivals(sv.arrivals, trace.num_sequences)
        queue = make_queue(trace, arrivals.size, wl.prompt, arrivals, rng, seq, asked)
    _check_clock(queue.arrival, sv)
    _check_stream_read(given, trace, config, queue, listed=seq is not None)
    if not sv.chunked_prefill and queue.prompt.max() > sv.max_batch_tokens:
        raise MoesimError(f"a prompt of {int(queue.prompt.max())} tokens is more than max_batch_tokens "
                          f"{sv.max_batch_tokens}, and without chunked prefill a prompt runs in one step")
    rows = StreamRows(trace, config, queue)
    run = assemble(trace, config, rows, model, hardware)
    unread = "kernel" in given and kernel_unread(run, rows.most_tokens, config)
    if unread:
        raise MoesimError(f"{named('kernel')}: {unread}, so nothing reads it")
    scheduler = Scheduler(queue, sv.max_batch, sv.max_batch_tokens, sv.chunked_prefill, sv.draft_tokens,
                          sv.acceptance, rng)
    steps, seconds = _run_steps(run, scheduler, rows, wl.context)
    counters = run.counters
    check_fills(run, filled=counters[C_LOADS] + counters[C_PREFILL_LOADS] + counters[C_FILLS] > 0)
    loads = counters[C_LOADS] + counters[C_PREFILL_LOADS] + counters[C_PF_LOADS] + counters[C_FILLS]
    moved = float(loads * run.costs.expert_bytes + counters[C_LOWBIT] * run.costs.lowbit_bytes + rows.lut_bytes)
    requests = request_frame(queue)
    summary = summarise(requests, steps, sv, moved, seconds)
    summary.update(timed_as=run.engine.name, capacity=run.config.cache.capacity, **run.memory.fields(),
                   slots_min=int(steps["slots"].min()),
                   slots_mean=float(steps["slots_mean"].mean()), reclaimed=int(counters[C_RECLAIMED]))
    if rows.share is not None:  # the most the GPU held at once
        summary["vram_gb"] = float(steps["gpu_bytes"].max()) / GIB
    return ServeResult(run.model.name, run.hardware.name, rows.resolved, summary, requests, steps)


def _run_steps(run: Run, scheduler: Scheduler, rows: StreamRows, context: int) -> tuple[pl.DataFrame, float]:
    """Form and run every step: ``run`` steps each step's row, the clock moved to the next arrival when nothing
    runs. Returns a row per step (start, time, requests in it, tokens, hits, accesses, the fewest slots of a
    partition and their mean over the partitions, GPU bytes) and the seconds it all took."""
    queue, share, gpu_bytes = scheduler.q, rows.share, run.memory.gpu
    log = []
    begin = time.perf_counter()
    while not scheduler.done():
        now = run.now
        pieces = scheduler.form(now)
        if not pieces:
            run.wait_until(scheduler.next_arrival())
            continue
        rows.fill(queue, pieces)
        live = None
        if share is not None:
            kv = _kv_tokens(queue, scheduler.running, pieces, context)
            live = share.live(kv)
            gpu_bytes = share.gpu_bytes(kv, live)
        done = run.step(0, 1, live)
        scheduler.finish_step(pieces, now, run.now)
        log.append((now, done.seconds, len(pieces), int(rows.tokens[0]), done.hits, done.accesses, run.live_slots,
                    run.mean_slots, gpu_bytes))
    seconds = time.perf_counter() - begin
    return pl.DataFrame(log, schema={"start_s": pl.Float64, "time_s": pl.Float64, "running": pl.Int64,
                                     "tokens": pl.Int64, "hits": pl.Int64, "accesses": pl.Int64, "slots": pl.Int64,
                                     "slots_mean": pl.Float64, "gpu_bytes": pl.Float64}, orient="row"), seconds


def _kv_tokens(queue, running: list[int], pieces, context: int) -> int:
    """Tokens the KV cache holds once this step has run: every running request's so far, this step's included."""
    r = np.asarray(running, np.int64)
    held = int((queue.prompt_done[r] + queue.decode_done[r]).sum()) + context * r.size
    return held + sum(p.n for p in pieces)


@dataclass(frozen=True)
class _KvShare:
    """``dynamic_kv``: the expert slots per partition that GPU memory leaves beside the KV cache of ``kv``
    tokens, between ``least`` (what the KV cache of ``max_batch`` requests of the longest sequence leaves:
    the static run's ``capacity auto``) and ``most`` (what an empty KV cache leaves)."""

    least: int
    most: int
    parts: int           # partitions that cache (layers under per-layer scope, else the one pool)
    fixed: float         # bytes of everything but the KV cache and the slots
    footprint: Footprint

    @classmethod
    def build(cls, fp: Footprint, asked: Config, resolved: Config, memory: Memory, top_k: int) -> _KvShare:
        """The share of the run ``asked`` for (capacity auto), which ``resolve`` sized to ``resolved`` and
        ``memory`` for the full KV cache: ``least`` is its capacity, whose memory keeps the scratch buffer a
        cache of ``least`` needs."""
        most = int(resolve(replace(fp, kv_tokens=0), asked, top_k)[0].cache.capacity)
        least = int(resolved.cache.capacity)
        strategy = get_strategy(resolved.execution.strategy)
        placement = strategy.placement(fp.model.num_layers, run_params(strategy, resolved.execution.params))
        parts = int((placement == CACHED).sum()) if resolved.cache.scope == "per-layer" else 1
        return cls(least, most, parts, memory.gpu - memory.kv - least * parts * fp.expert_bytes, fp)

    def live(self, kv_tokens: int) -> int:
        room = (self.footprint.vram - self.fixed - self.footprint.model.kv_bytes(kv_tokens)) // \
            (self.footprint.expert_bytes * self.parts)
        return int(min(self.most, max(self.least, room)))

    def gpu_bytes(self, kv_tokens: int, live: int) -> float:
        return self.fixed + self.footprint.model.kv_bytes(kv_tokens) + live * self.parts * self.footprint.expert_bytes


CLOCK_RESOLUTION_S = 1e-9  # the simulated clock must tell apart times this far apart at the last arrival


def _check_clock(arrival: np.ndarray, sv) -> None:
    """The stream's clock is seconds in float64: past 2^23 s (97 days) it cannot tell apart times a
    nanosecond apart, and every step's time is rounded more the later it runs (at 1e-15 requests/s, arrivals near
    1e15 s, a step's milliseconds vanished: TPOT 0)."""
    last = float(arrival.max())
    if np.spacing(last) > CLOCK_RESOLUTION_S:
        cause = f"{named('rate')} {sv.rate} requests/s is too low" if sv.arrivals == "poisson" else \
            f"{sv.arrivals}'s times are too large"
        raise MoesimError(f"requests arrive until {last:.3g} s, where the simulated clock cannot tell apart times "
                          f"{CLOCK_RESOLUTION_S:g} s apart: {cause}")


def _check_serve(trace: Trace, config: Config) -> None:
    """What a served stream cannot do (module docstring)."""
    sv, policy = config.serve, get_policy(config.cache.composed)
    if sv.arrivals == "poisson" and sv.rate is None:
        raise MoesimError(f"Poisson arrivals need a rate in requests/s ({named('rate')}), or use "
                          f"{named('arrivals', 'burst')}")
    if sv.arrivals != "poisson" and sv.rate is not None:
        raise MoesimError(f"{named('arrivals', sv.arrivals)} takes no rate: it is for Poisson arrivals")
    if sv.arrivals not in ARRIVALS and sv.requests is not None and Path(sv.arrivals).is_file():  # else: no such file
        raise MoesimError(f"the arrivals file {sv.arrivals} lists the requests: leave requests unset")
    if policy.reads_rows:
        raise MoesimError(f"{named('policy', policy.name)} reads the rows it will serve ahead of serving them, and a served "
                          "stream's steps are formed as it runs; use an online policy (lru, lfu, gamma, ...)")
    predictor = get_prefetcher(config.prefetch.prefetcher)
    if predictor is not None and predictor.kind != "next":
        raise MoesimError(f"prefetcher {config.prefetch.prefetcher} preloads a batch before it decodes, and a served "
                          "stream has no batches; use one that predicts the next layer (oracle, history, speculative)")
    if config.cache.reset:
        raise MoesimError("a served stream's requests share the cache: reset has no batch to reset at")
    if sv.dynamic_kv:
        if config.cache.capacity != "auto" or not get_strategy(config.execution.strategy).cache \
                or config.cache.split != "uniform":
            raise MoesimError(f"{named('dynamic_kv', True)} shares GPU memory between the KV cache and the expert cache: it needs "
                              "capacity auto, split uniform and a strategy with an expert cache")
        if not policy.resizable:
            raise MoesimError(f"{named('dynamic_kv', True)} takes slots away as the KV cache grows, and policy {policy.name}'s state "
                              "is sized for its capacity; use lru, fifo, lifo, lfu or random")
    if config.workload.batch != 1 or config.workload.warmup != 0:
        raise MoesimError("a served stream forms its own batches (max_batch) and measures every request: "
                          "leave batch at 1 and warmup at 0")


def _check_stream_read(given, trace: Trace, config: Config, queue: Queue, listed: bool) -> None:
    """A setting given that this stream reads nothing of, as its trace and requests show: the seed where nothing is
    drawn (no Poisson arrivals, no more requests than sequences to shuffle, or an arrivals file that names each
    request's sequence, and no draft that can be rejected), chunked prefill where no request has a prompt (a prompt
    where every request's sequence records its own: ``moesim.sim.requests.check_prompt``)."""
    sv = config.serve
    drawn = sv.draft_tokens > 0 and 0 < sv.acceptance < 1  # a draw in [0, 1) is below 1 always, below 0 never
    if "arrival_seed" in given and sv.arrivals != "poisson" and not drawn:
        n, n_seqs = queue.size, trace.num_sequences
        how = None
        if listed:
            how = f"the arrivals file {sv.arrivals} names the sequence each request serves (its seq column)"
        elif n <= n_seqs:
            what = (f"{named('arrivals', 'burst')} puts every request at time 0" if sv.arrivals == "burst" else
                    f"the arrivals file {sv.arrivals} gives every request's time")
            how = (f"{what} and its {n} request{'s' if n > 1 else ''} serve{'s' if n == 1 else ''} the trace's "
                   f"{n_seqs} sequences in order (only more than {n_seqs} would be shuffled)")
        if how is not None:
            drafts = (f"{named('draft_tokens')} is 0" if not sv.draft_tokens else
                      f"every draft is {'accepted' if sv.acceptance else 'rejected'} "
                      f"({named('acceptance', sv.acceptance)})")
            raise MoesimError(f"{named('arrival_seed')}: {how}, and {drafts}: nothing is drawn, so nothing reads it")
    if "chunked_prefill" in given and not queue.prompt.any():
        raise MoesimError(f"{named('chunked_prefill', sv.chunked_prefill)}: no request has a prompt to prefill (the sequences served record none, and "
                          f"{named('prompt')} is 0), so nothing reads it")


class StreamRows(RowSource):
    """A served stream's rows: one row, rewritten for every step (``fill``); memory sized for ``max_batch``
    requests of the longest sequence, the cache resized as the KV cache grows (``dynamic_kv``)."""

    rewritten = True

    def __init__(self, trace: Trace, config: Config, queue):
        self.trace, self.config, self.queue = trace, config, queue
        self.context = config.workload.context
        self.src_w = (np.zeros(trace.experts.shape, np.float32) if trace.weights is None
                      else np.nan_to_num(trace.weights).astype(np.float32))
        self.chosen = expert_choices(trace)
        predictor = get_prefetcher(config.prefetch.prefetcher)
        self.predicted = (None if predictor is None else
                          np.ascontiguousarray(predictor.predict(trace, run_params(predictor,
                                                                                      config.prefetch.params)),
                                               np.int16))
        self.commit = config.prefetch.mode == "commit" and self.predicted is not None
        self.position = trace.steps.astype(np.int64)  # a recorded row's position in its sequence
        self.share, self.resolved, self.lut_bytes = None, config, 0.0
        sv = config.serve  # the most tokens a step holds, and so an expert in it: what the costs' table reaches
        self.most_tokens = most_step_tokens(queue, sv.max_batch, sv.max_batch_tokens, sv.draft_tokens)

    def footprint(self, trace: Trace, config: Config) -> tuple[float, int, bool]:
        q, sv = self.queue, config.serve
        longest = int((q.prompt + q.decode).max())
        width = min(trace.meta.num_experts, sv.max_batch_tokens * trace.meta.top_k)
        return sv.max_batch * (config.workload.context + longest), width, bool(q.prompt.max() > 0)

    def sized(self, config: Config, footprint: Footprint, memory: Memory) -> Config:
        """With ``dynamic_kv`` the cache gets as many slots as an empty KV cache leaves; each step lowers them to
        what its KV cache leaves (``_KvShare``)."""
        self.resolved = config
        if not config.serve.dynamic_kv:
            return config
        self.share = _KvShare.build(footprint, self.config, config, memory, self.trace.meta.top_k)
        return replace(config, cache=replace(config.cache, capacity=self.share.most))

    def arrays(self, config, slots, model, hardware, weights, lowbit, engine) -> tuple[RowArrays, Costs]:
        self.costs_of_run = cost_model(model, hardware, weights, engine, placement_of(config, model.num_layers))
        n_layers, width = self.trace.meta.num_layers, self.footprint(self.trace, config)[1]
        self.experts = np.full((1, n_layers, width), -1, np.int16)
        self.weights = np.zeros(self.experts.shape, np.float32)
        self.counts = np.zeros(self.experts.shape, np.int32)
        self.pred = np.full((1, n_layers, 0 if self.predicted is None else width), -1, np.int16)
        self.pred_tokens = np.zeros(self.pred.shape, np.int32)
        self.exe, self.exe_tokens = self.experts, self.counts
        if self.commit:
            self.exe, self.exe_tokens = self.experts.copy(), self.counts.copy()
        self.committed = np.zeros((1, n_layers), np.bool_)
        self.kind = np.zeros(1, np.int8)
        self.tokens = np.zeros(1, np.int64)
        self.pre_s, self.shared_s, self.row_s = np.zeros(1), np.zeros(1), np.zeros(1)
        self.lut_s, self.handoff_s = np.zeros(1), np.zeros(1)
        cost = self.costs_of_run.costs(np.zeros(1), np.zeros(1), self.most_tokens, lowbit)
        return RowArrays(experts=self.experts, exe=self.exe, exe_tokens=self.exe_tokens, committed=self.committed,
                         weights=self.weights, pred=self.pred, kind=self.kind, tokens=self.tokens, pre_s=self.pre_s,
                         shared_s=self.shared_s, row_s=self.row_s, lut_s=self.lut_s, handoff_s=self.handoff_s, group_start=np.zeros(1, np.bool_),
                         preload_at=np.full(1, -1, np.int64), preload=np.full((1, n_layers, 0), -1, np.int16)), cost

    def policy_context(self, config, slots, params) -> Context:
        # the clock counts steps: at most one per prompt token and decode row of every request
        q = self.queue
        return Context(self.trace.experts, self.trace.seq_offsets.astype(np.int64), self.trace.meta.num_experts,
                       np.maximum(slots, 1), config.cache.scope == "per-layer", False, False, params,
                       clock_rows=int(q.prompt.sum() + q.decode.sum()) + 1)

    def fill(self, queue, pieces) -> None:
        """Write the step of ``pieces`` (``moesim.sim.scheduler.Piece``) into the arrays."""
        rows, decode_rows, ctx, given = [], [], 0.0, 0
        prompt_ctx, prompt_rows = 0.0, 0.0  # the prompt chunks' share of ctx, and their query rows weighted by it
        context = self.context
        for p in pieces:
            r = p.request
            if p.prefill and not queue.recorded[r]:  # a given prompt: positions start .. start + n - 1
                given += p.n
                piece = p.n * (context + 1) + (2 * p.start + p.n - 1) * p.n / 2
            else:
                first = queue.first_row[r] + (0 if p.prefill else queue.prompt[r] * queue.recorded[r]) + p.start
                span = np.arange(first, first + p.n)
                rows.append(span)
                shift = context + (0 if queue.recorded[r] else queue.prompt[r])
                piece = float((self.position[span] + 1 + shift).sum())
                if not p.prefill:
                    decode_rows.append(span)
            ctx += piece
            if p.prefill:
                prompt_ctx += piece
                prompt_rows += piece * p.n
        rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        self.experts.fill(-1)
        self.weights.fill(0.0)
        self.counts.fill(0)
        ptr = np.array([0, rows.size], np.int64)
        gather(self.trace.experts, self.src_w, ptr, rows, self.experts, self.weights, self.counts)
        if given:
            members, counts = prompt_routing(self.chosen, self.trace.meta.top_k, given, self.experts.shape[2])
            merge(self.experts[0], self.counts[0], members, counts)
        decoding = bool(decode_rows)
        self.kind[0] = DECODE if decoding else PREFILL
        self.tokens[0] = rows.size + given
        if self.predicted is not None:
            self._predict(np.concatenate(decode_rows) if decoding else np.zeros(0, np.int64))
        # logits for every decode position and a prompt's last token (``moesim.sim.requests``)
        outputs = sum(p.n if not p.prefill else p.start + p.n == queue.prompt[p.request] for p in pieces)
        rc = self.costs_of_run.row_costs(float(self.tokens[0]), ctx, float(outputs), prompt_ctx,
                                         prompt_rows / prompt_ctx if prompt_ctx else 1.0)
        self.pre_s[0], self.shared_s[0], self.row_s[0] = rc.pre, rc.shared, rc.once
        self.lut_s[0], self.handoff_s[0] = rc.lut, rc.handoff
        self.lut_bytes += float(rc.lut_bytes) * self.experts.shape[1]

    def _predict(self, decode_rows: np.ndarray) -> None:
        """The decode rows' predictions, united like their experts; under commit, the cells that run them."""
        self.pred.fill(-1)
        self.pred_tokens.fill(0)
        gather(self.predicted, np.zeros(self.predicted.shape, np.float32), np.array([0, decode_rows.size], np.int64),
               decode_rows, self.pred, np.zeros(self.pred.shape, np.float32), self.pred_tokens)
        if not self.commit:
            return
        # a step does not prefetch into the next, so its layer 0 never runs a prediction
        self.committed[0] = self.pred[0, :, 0] >= 0
        self.committed[0, 0] = False
        self.exe[:], self.exe_tokens[:] = self.experts, self.counts
        rows = self.committed[0]
        self.exe[0, rows], self.exe_tokens[0, rows] = self.pred[0, rows], self.pred_tokens[0, rows]


def request_frame(queue) -> pl.DataFrame:
    """One row per request: its sequence, times (seconds) and tokens."""
    output = queue.decode + (queue.prompt > 0)
    decode_s = queue.finish - queue.decode_start
    return pl.DataFrame({
        "request": np.arange(queue.size), "seq": queue.seq, "arrival_s": queue.arrival,
        "prompt_tokens": queue.prompt, "output_tokens": output, "decode_tokens": queue.decode,
        "queue_s": queue.admitted - queue.arrival, "ttft_s": queue.first_token - queue.arrival,
        "tpot_s": np.where(queue.decode > 0, decode_s / np.maximum(queue.decode, 1), np.nan),
        "e2e_s": queue.finish - queue.arrival, "decode_s": np.where(queue.decode > 0, decode_s, 0.0),
        "finish_s": queue.finish}).with_columns(pl.col("tpot_s").fill_nan(None))


def summarise(requests: pl.DataFrame, steps: pl.DataFrame, sv, moved_bytes: float, seconds: float) -> dict:
    """The stream's summary (module docstring); percentiles over requests."""
    span = float(requests["finish_s"].max() - requests["arrival_s"].min())
    output = int(requests["output_tokens"].sum())
    decode_tokens = int(requests["decode_tokens"].sum())
    out = {"requests": requests.height, "duration_s": span,
           "requests_per_s": requests.height / span if span > 0 else float("nan"),
           "tokens_per_s": output / span if span > 0 else float("nan"),
           "tpot_s": float(requests["decode_s"].sum() / decode_tokens) if decode_tokens else float("nan")}
    for name in ("ttft_s", "tpot_s", "e2e_s", "queue_s"):
        values = requests[name].drop_nulls().to_numpy()
        if name != "tpot_s":
            out[f"{name[:-2]}_mean_s"] = float(values.mean()) if values.size else float("nan")
        for q in QUANTILES:
            out[f"{name[:-2]}_p{q}_s"] = float(np.percentile(values, q)) if values.size else float("nan")
    hits, accesses = int(steps["hits"].sum()), int(steps["accesses"].sum())
    out.update(hit_rate=hits / accesses if accesses else float("nan"), hits=hits, accesses=accesses,
               expert_bytes_per_token=moved_bytes / output if output else float("nan"),
               steps=steps.height, mean_running=float(steps["running"].mean()) if steps.height else float("nan"),
               output_tokens=output, seconds=seconds)
    if sv.slo_ttft_s is not None or sv.slo_tpot_s is not None:
        met = pl.lit(True)
        if sv.slo_ttft_s is not None:
            met = met & (pl.col("ttft_s") <= sv.slo_ttft_s)
        if sv.slo_tpot_s is not None:
            met = met & (pl.col("tpot_s").is_null() | (pl.col("tpot_s") <= sv.slo_tpot_s))
        out["slo_attainment"] = float(requests.select(met.mean()).item())
    return out

