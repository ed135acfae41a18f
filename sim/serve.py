"""Serving: requests arrive, a continuous-batching scheduler forms each step, the discrete-event engine runs it.

``simulate_serve`` turns a trace into a stream of requests (``moesim.sim.scheduler``), and runs the
discrete-event loop (``moesim.sim.des_loop``) one step at a time, each step formed when the one before it
ends: a step's row is, per layer, the union of the experts its requests' rows chose (prompt chunks and
decode positions, running requests first, as ``moesim.sim.requests`` unites a batch's rows), its cost
the attention of its tokens over their KV cache (``moesim.sim.costs.row_costs``). The cache, the copy
engines, the CPU and the clock carry over from step to step, with the configured policy, prefetcher
(one that predicts the next cell; a step does not prefetch into the next, which is not formed yet) and
strategy. With nothing to run the clock moves to the next arrival.

Per request: queueing delay (arrival to its first step), TTFT (arrival to the end of the step that gave
its first token: its prompt's last chunk, or without a prompt its first decode step), TPOT (its decode
steps' time per decode token, from the end of its prefill, or without a prompt from the start of its first
decode step, to its end) and end-to-end latency. The summary's ``tpot_s`` is all requests' decode time
over their decode tokens (``moesim sim run``'s definition: a lone request gets sim run's batch-1 TPOT);
throughput is output tokens (and requests) over the span from the first arrival to the last finish; the
hit rate is over the accesses of steps that decode, as in ``sim run``.

``capacity auto`` and the memory check size the KV cache for ``max_batch`` requests of the longest
sequence. A policy that reads the rows ahead (Belady, ML-FFN), a preloading prefetcher, and a cache that
resets per batch have no meaning here and are refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from moesim.errors import MoesimError
from moesim.policies import get_policy
from moesim.policies.base import Context
from moesim.policies.prefetch import get_prefetcher
from moesim.sim.budget import best_slots
from moesim.sim.config import ARRIVALS, NOT_SERVED, Config, module_params
from moesim.sim.costs import costs, row_costs
from moesim.sim.des import _check, _sizes
from moesim.sim.des_loop import HELPERS, des_loop
from moesim.sim.des_state import (C_ACCESSES, C_FILLS, C_HITS, C_LOADS, C_LOWBIT, C_PF_LOADS, C_PREFILL_LOADS, C_RECLAIMED,
                                  R_TIME, Inputs, build_state)
from moesim.sim.engine import bind, part_bounds
from moesim.sim.hardware import Hardware
from moesim.sim.memory import GIB, Footprint, Memory, resolve
from moesim.sim.requests import expert_choices, gather, merge, prompt_routing
from moesim.sim.scheduler import Scheduler, arrival_times, make_queue, read_arrivals
from moesim.sim.strategies import cpu_experts, get_strategy
from moesim.sim.strategies.base import CACHED
from moesim.tracegen.models import ModelSpec
from moesim.tracegen.schema import DECODE, PREFILL
from moesim.tracegen.trace import Trace

QUANTILES = (50, 90, 99)


@dataclass
class ServeResult:
    """One served stream: the summary, every request and every step."""

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

    def as_dict(self) -> dict:
        """The model, machine and every setting beside the summary's metrics; per request; by batch size."""
        settings = {k: v for k, v in self.config.flat().items() if k not in ("model", "hardware", *NOT_SERVED)}
        return {"summary": {"model": self.model, "hardware": self.hardware, **settings, **self.summary},
                "requests": self.requests.to_dicts(), "by_batch": self.by_batch().to_dicts()}


def simulate_serve(trace: Trace, config: Config, model: ModelSpec | None = None,
                   hardware: Hardware | None = None) -> ServeResult:
    """Serve ``trace``'s sequences as a stream of requests under ``config`` (its ``serve`` section)."""
    model = model if model is not None else config.model.spec(trace.meta)
    hardware = hardware if hardware is not None else config.hardware.spec()
    _check(trace, model, hardware, config)
    _check_serve(trace, config)
    sv, wl = config.serve, config.workload
    rng = np.random.default_rng(sv.arrival_seed)
    if sv.arrivals in ARRIVALS:
        n_requests = sv.requests or trace.num_sequences
        queue = make_queue(trace, n_requests, wl.prompt, arrival_times(sv.arrivals, sv.rate, n_requests, rng), rng)
    else:
        arrivals, seq = read_arrivals(sv.arrivals, trace.num_sequences)
        queue = make_queue(trace, arrivals.size, wl.prompt, arrivals, rng, seq)
    if not sv.chunked_prefill and queue.prompt.max() > sv.max_batch_tokens:
        raise MoesimError(f"a prompt of {int(queue.prompt.max())} tokens is more than max_batch_tokens "
                          f"{sv.max_batch_tokens}, and without chunked prefill a prompt runs in one step")
    num_experts, k, n_layers = trace.meta.num_experts, trace.meta.top_k, trace.meta.num_layers
    width = min(num_experts, sv.max_batch_tokens * k)
    bpp, eb = _sizes(trace, model, config.model.dtype, config.model.other_dtype)
    longest = int((queue.prompt + queue.decode).max())
    cpu = hardware.cpu
    footprint = Footprint(model, bpp, eb if eb is not None else model.expert_params * bpp,
                          sv.max_batch * (wl.context + longest), width, bool(queue.prompt.max() > 0),
                          hardware.gpu.hbm_gb * GIB, cpu.ram_gb * GIB if cpu else 0.0)
    asked = config
    config, memory = resolve(footprint, config, k)
    cache, strategy = config.cache, get_strategy(config.execution.strategy)
    if cache.split == "best" and strategy.CACHE and cache.capacity != 0:
        held = int(cache.slots(n_layers).min()) >= width  # as in simulate_des: the memory stays the same
        cache = best_slots(trace, cache, width if held else None)
        config = replace(config, cache=cache)
    share = _KvShare.build(footprint, asked, config, memory, k) if sv.dynamic_kv else None
    if share is not None:
        cache = replace(cache, capacity=share.most)
    slots = cache.slots(n_layers)
    sparams = module_params(strategy, config.execution.params)
    cost = costs(model, hardware, np.zeros(1), np.zeros(1), bpp, eb, sv.max_batch_tokens, sparams.get("lowbit_dtype"))
    step = _StepRows(trace, config, model, hardware, bpp, width)
    inputs = Inputs(step.experts, step.exe, step.exe_tokens, step.committed, step.weights, step.pred, step.kind,
                    np.zeros(1, np.bool_), np.full(1, -1, np.int64), np.full((1, n_layers, 0), -1, np.int16),
                    step.pre_s, step.lut_s, cost.by_tokens, cost.scalar_times(),
                    config.execution.kernel == "per-expert", part_bounds(slots), np.int64(num_experts),
                    cache.scope == "per-layer", False, model.kind == "mole",
                    np.int64(-1 if cache.dram_capacity is None else cache.dram_capacity), np.int64(strategy.CODE),
                    strategy.placement(model.num_layers, sparams), step.offload, cost.cpu_by_tokens, step.handoff_s,
                    float(sparams.get("lowbit_threshold", 0.0)), np.int64(-1))
    state = build_state(inputs, hardware.link.engines, 0)
    module = get_policy(cache.policy)
    # the clock counts steps: at most one per prompt token and decode row of every request
    ctx = Context(trace.experts, trace.seq_offsets.astype(np.int64), num_experts, np.maximum(slots, 1),
                  cache.scope == "per-layer", False, False, module_params(module, cache.params),
                  clock_rows=int(queue.prompt.sum() + queue.decode.sum()) + 1)
    run = bind(module, des_loop, HELPERS)
    scheduler = Scheduler(queue, sv.max_batch, sv.max_batch_tokens, sv.chunked_prefill, sv.draft_tokens,
                          sv.acceptance, rng)
    policy_state = module.make_state(ctx)
    steps, seconds = _run_steps(run, state, policy_state, scheduler, step, share, wl.context, memory.gpu)
    counters = state.tally.counters
    loads = counters[C_LOADS] + counters[C_PREFILL_LOADS] + counters[C_PF_LOADS] + counters[C_FILLS]
    moved = float(loads * cost.expert_bytes + counters[C_LOWBIT] * cost.lowbit_bytes + step.lut_bytes)
    requests = request_frame(queue)
    summary = summarise(requests, steps, sv, moved, seconds)
    summary.update(capacity=cache.capacity, **memory.fields(), slots_min=int(steps["slots"].min()),
                   slots_mean=float(steps["slots"].mean()), reclaimed=int(counters[C_RECLAIMED]))
    if share is not None:  # the most the GPU held at once
        summary["vram_gb"] = float(steps["gpu_bytes"].max()) / GIB
    return ServeResult(model.name, hardware.name, config, summary, requests, steps)


def _run_steps(run, state, policy_state, scheduler: Scheduler, step: _StepRows, share: _KvShare | None,
               context: int, gpu_bytes: float) -> tuple[pl.DataFrame, float]:
    """Form and run every step: the compiled loop ``run`` on each step's row, the clock moved to the next arrival
    when nothing runs. Returns a row per step (start, time, requests in it, tokens, hits, accesses, slots per
    partition, GPU bytes) and the seconds it all took."""
    queue, progress, counters, live = scheduler.q, state.progress, state.tally.counters, state.cache.live
    log = []
    begin = time.perf_counter()
    while not scheduler.done():
        now = progress.now[0]
        pieces = scheduler.form(now)
        if not pieces:
            progress.now[0] = max(now, scheduler.next_arrival())
            continue
        step.fill(queue, pieces)
        if share is not None:
            kv = _kv_tokens(queue, scheduler.running, pieces, context)
            live[:] = share.live(kv)
            gpu_bytes = share.gpu_bytes(kv, int(live[0]))
        hits, accesses = counters[C_HITS], counters[C_ACCESSES]
        state.tally.rows[0] = 0.0
        progress.span[:] = (0, 1)
        run(state, policy_state)
        progress.offset[0] += 1
        scheduler.finish_step(pieces, now, progress.now[0])
        log.append((now, state.tally.rows[0, R_TIME], len(pieces), int(step.tokens), counters[C_HITS] - hits,
                    counters[C_ACCESSES] - accesses, int(live.min()), gpu_bytes))
    seconds = time.perf_counter() - begin
    return pl.DataFrame(log, schema={"start_s": pl.Float64, "time_s": pl.Float64, "running": pl.Int64,
                                     "tokens": pl.Int64, "hits": pl.Int64, "accesses": pl.Int64, "slots": pl.Int64,
                                     "gpu_bytes": pl.Float64}, orient="row"), seconds


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
        placement = strategy.placement(fp.model.num_layers, module_params(strategy, resolved.execution.params))
        parts = int((placement == CACHED).sum()) if resolved.cache.scope == "per-layer" else 1
        return cls(least, most, parts, memory.gpu - memory.kv - least * parts * fp.expert_bytes, fp)

    def live(self, kv_tokens: int) -> int:
        room = (self.footprint.vram - self.fixed - self.footprint.model.kv_bytes(kv_tokens)) // \
            (self.footprint.expert_bytes * self.parts)
        return int(min(self.most, max(self.least, room)))

    def gpu_bytes(self, kv_tokens: int, live: int) -> float:
        return self.fixed + self.footprint.model.kv_bytes(kv_tokens) + live * self.parts * self.footprint.expert_bytes


def _check_serve(trace: Trace, config: Config) -> None:
    """What a served stream cannot do (module docstring)."""
    sv, module = config.serve, get_policy(config.cache.policy)
    if sv.arrivals == "poisson" and sv.rate is None:
        raise MoesimError("Poisson arrivals need a rate in requests/s (--rate), or use --arrivals burst")
    if sv.arrivals != "poisson" and sv.rate is not None:
        raise MoesimError(f"arrivals {sv.arrivals} take no rate: it is for Poisson arrivals")
    if sv.arrivals not in ARRIVALS and sv.requests is not None:
        raise MoesimError(f"the arrivals file {sv.arrivals} lists the requests: leave requests unset")
    if getattr(module, "READS_ROWS", False):
        raise MoesimError(f"policy {module.NAME} reads the rows it will serve ahead of serving them, and a served "
                          "stream's steps are formed as it runs; use an online policy (lru, lfu, gamma, ...)")
    predictor = get_prefetcher(config.prefetch.prefetcher)
    if predictor is not None and predictor.KIND != "next":
        raise MoesimError(f"prefetcher {config.prefetch.prefetcher} preloads a batch before it decodes, and a served "
                          "stream has no batches; use one that predicts the next layer (oracle, history, speculative)")
    if config.cache.reset:
        raise MoesimError("a served stream's requests share the cache: reset has no batch to reset at")
    if sv.dynamic_kv:
        if config.cache.capacity != "auto" or not get_strategy(config.execution.strategy).CACHE \
                or config.cache.split != "uniform":
            raise MoesimError("dynamic_kv shares GPU memory between the KV cache and the expert cache: it needs "
                              "capacity auto, split uniform and a strategy with an expert cache")
        if not getattr(module, "RESIZABLE", False):
            raise MoesimError(f"dynamic_kv takes slots away as the KV cache grows, and policy {module.NAME}'s state "
                              "is sized for its capacity; use lru, fifo, lifo, lfu or random")
    if config.workload.batch != 1 or config.workload.warmup != 0:
        raise MoesimError("a served stream forms its own batches (max_batch) and measures every request: "
                          "leave batch at 1 and warmup at 0")


class _StepRows:
    """The one-row arrays the engine reads, rewritten for every step (``fill``)."""

    def __init__(self, trace: Trace, config: Config, model: ModelSpec, hardware: Hardware, bpp: float, width: int):
        n_layers = trace.meta.num_layers
        self.trace, self.model, self.hardware, self.bpp = trace, model, hardware, bpp
        self.context = config.workload.context
        self.src_w = (np.zeros(trace.experts.shape, np.float32) if trace.weights is None
                      else np.nan_to_num(trace.weights).astype(np.float32))
        self.chosen = expert_choices(trace)
        predictor = get_prefetcher(config.prefetch.prefetcher)
        self.predicted = (None if predictor is None else
                          np.ascontiguousarray(predictor.predict(trace, module_params(predictor,
                                                                                      config.prefetch.params)),
                                               np.int16))
        self.offload_strategy = get_strategy(config.execution.strategy) is cpu_experts
        self.experts = np.full((1, n_layers, width), -1, np.int16)
        self.weights = np.zeros(self.experts.shape, np.float32)
        self.counts = np.zeros(self.experts.shape, np.int32)
        self.pred = np.full((1, n_layers, 0 if self.predicted is None else width), -1, np.int16)
        self.pred_tokens = np.zeros(self.pred.shape, np.int32)
        self.commit = config.prefetch.mode == "commit" and self.predicted is not None
        self.exe, self.exe_tokens = self.experts, self.counts
        if self.commit:
            self.exe, self.exe_tokens = self.experts.copy(), self.counts.copy()
        self.committed = np.zeros((1, n_layers), np.bool_)
        self.kind = np.zeros(1, np.int8)
        self.pre_s, self.lut_s, self.handoff_s = np.zeros(1), np.zeros(1), np.zeros(1)
        self.offload = np.zeros(1, np.bool_)
        self.tokens, self.lut_bytes = 0, 0.0
        self.position = trace.steps.astype(np.int64)  # a recorded row's position in its sequence

    def fill(self, queue, pieces) -> None:
        """Write the step of ``pieces`` (``moesim.sim.scheduler.Piece``) into the arrays."""
        rows, decode_rows, ctx, given = [], [], 0.0, 0
        context = self.context
        for p in pieces:
            r = p.request
            if p.prefill and not queue.recorded[r]:  # a given prompt: positions start .. start + n - 1
                given += p.n
                ctx += p.n * (context + 1) + (2 * p.start + p.n - 1) * p.n / 2
                continue
            first = queue.first_row[r] + (0 if p.prefill else queue.prompt[r] * queue.recorded[r]) + p.start
            span = np.arange(first, first + p.n)
            rows.append(span)
            shift = context + (0 if queue.recorded[r] else queue.prompt[r])
            ctx += float((self.position[span] + 1 + shift).sum())
            if not p.prefill:
                decode_rows.append(span)
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
        self.tokens = rows.size + given
        if self.predicted is not None:
            self._predict(np.concatenate(decode_rows) if decoding else np.zeros(0, np.int64))
        pre, lut, lut_bytes, handoff = row_costs(self.model, self.hardware, float(self.tokens), ctx, self.bpp)
        self.pre_s[0], self.lut_s[0], self.handoff_s[0] = pre, lut, handoff
        self.lut_bytes += float(lut_bytes) * self.experts.shape[1]
        self.offload[0] = self.offload_strategy and self.tokens >= cpu_experts.OFFLOAD_MIN_TOKENS

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

