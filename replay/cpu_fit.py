"""The CPU model's parameters fitted to llama.cpp's decode on this machine (``moesim calibrate --engine llama.cpp``),
and, with the same fits, to the torch replay's expert kernel timed alone (``KernelRun``, ``moesim calibrate --model
M``: ``moesim.replay.calibrate_cpu``; no barrier there, so no per-operation fit).

moesim times a CPU-only decode step (batch 1, every layer on the CPU: ``moesim.sim.costs``) as

    t(model, format, threads, ctx) = Σ_ops weight bytes / min(D, threads · u_format)
                                     + max(KV bytes / min(D, threads · u_f16), 4 · q_dim · ctx / (threads · a))
                                     + experts · task + barriers · (barrier_base + barrier_thread · (threads − 1))

with D = ``dram_eff`` x the DRAM read rate a bandwidth probe found beside the run, ``u_format`` the bytes of
weights in that format one thread unpacks into dot products a second (``CPU.unpack_gbps``), ``task`` what an
expert's products cost besides their bytes (``task_us``), ``a`` the flash attention's rate over the KV cache per
thread (``attn_gflops``) and a barrier per operation of the graph (``CPU_LAYER_BARRIERS`` a layer). Four fits of
the decodes at no context, each a least-squares fit of the log step times:

1. **The per-operation cost** from a model whose weights are a few hundred KiB (they stay in the cache, so its
   token is nearly all barriers): ``overhead(threads) = t_measured − t_model(no barriers)``, divided by the
   barriers a token takes, is ``base + thread · (threads − 1)``: a line over the thread counts run, neither part
   below zero (non-negative least squares; with one thread count, the published per-thread cost is kept and only
   the base fitted).
2. **Each format's unpack rate** ``u`` on its runs: two models, many narrow experts and few wide ones, at every
   thread count. Where even ``u = ∞`` (DRAM alone) predicts at least every measured time, DRAM bound every run
   and ``u`` is known only to be at least the rate that binds none: that one is written (not the tables' figure,
   which might bind).
3. **``task``**, on every format's runs: the narrow model's many experts against the wide one's few decide it.
4. **The share of the probe's rate the engine reaches** (``dram_eff``, at most 1), on every format's runs: those
   where DRAM binds (many threads, wide formats) decide it, as the single-thread ones decide ``u``.

Each is a one-dimensional search: t_model is monotone in each parameter, and flat where another limit binds, so
a grid (log-spaced for the rates) finds the neighbourhood of the minimum (where the least loss is flat, its
largest value: a rate or share that binds no run binds none elsewhere either) and Brent's method the minimum
within it. The fits share the runs (the small model's weights take its format's rate; a run bound by DRAM at one
thread count is bound by unpacking at another), so they are made in turn a few times, and then every parameter is
refined at once by least squares from there (``fit``, ``refine``); on timings the model itself produced they give
back the parameters that produced them. Then, everything else as those left it, each format's matrix-product rate
per thread (``matmul_gflops``) on prompts, and the flash attention's rates (``fit_attention``) on decodes after
a long context and on long prompts.

``decode_s`` is the cost model's own step time (``moesim.sim.cost_model``), the same durations the discrete-event
engine strings together, so a fitted file predicts through ``moesim sim run`` what the fit saw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares, minimize_scalar, nnls

from moesim.errors import MoesimError
from moesim.sim.cost_model import cost_model
from moesim.sim.costs import cpu_expert_s
from moesim.sim.cpu_rates import CPU_LAYER_BARRIERS
from moesim.sim.engines import ENGINES
from moesim.sim.machine import CPU, Hardware
from moesim.sim.weights import Weights, weights_of
from moesim.tracegen.models import ModelSpec

LLAMA_CPP = ENGINES["llama.cpp"]  # the engine whose timings are fitted: its barriers per CPU layer

U_RANGE_GBPS = (0.05, 2000.0)  # the unpack rates searched, per thread
TOL = 1e-12                    # Brent's tolerance (on log u)
GRID = 241                     # log-spaced rates tried first (4% apart)
FLAT = 1e-9                    # losses this close to the least count as equal
ROUNDS = 3                     # the fits in turn, before all parameters are refined at once
EFF_RANGE = (0.2, 1.0)         # the share of the probe's DRAM rate the engine may reach
TASK_RANGE_US = (0.0, 200.0)   # an expert's fixed cost
GFLOPS_RANGE = (0.1, 5000.0)   # the matrix-product rates searched, per thread
THREAD_EFF_RANGE = (0.0, 1.0)  # what a further thread adds to attention's one-row path, a share of one thread's


@dataclass(frozen=True)
class Run:
    """One measured decode: the model (its ``stored_*`` bytes and formats, as a GGUF gives them), the threads, the
    mean KV tokens a step read, the tokens/s llama.cpp reached (median of its runs) and the DRAM read rate the
    probe found beside it (GB/s, the whole machine)."""

    model: ModelSpec
    threads: int
    ctx: float
    tok_s: float
    dram_gbps: float
    prompt: int = 0  # a prefill run: the prompt's tokens in one batch (ctx unused)

    def model_s(self, cpu: CPU) -> float:
        """What the model says the run takes on ``cpu``: one decode step, or the whole prompt."""
        hw = at(cpu, self)
        return prefill_s(self.model, hw, self.prompt) if self.prompt else decode_s(self.model, hw, self.ctx)

    @property
    def measured_s(self) -> float:
        return (self.prompt or 1) / self.tok_s


@dataclass(frozen=True)
class KernelRun:
    """One expert kernel timed alone (``moesim calibrate``'s torch kernels, ``moesim.replay.calibrate_cpu``):
    ``params`` weights, ``nbytes`` of them in ``fmt``, on ``tokens`` tokens with ``threads`` threads, ``seconds``
    each (a median), beside a DRAM probe of ``dram_gbps``; the model's time is ``cpu_expert_s``'s."""

    params: int
    fmt: str
    nbytes: float
    tokens: int
    threads: int
    seconds: float
    dram_gbps: float

    def model_s(self, cpu: CPU) -> float:
        return float(cpu_expert_s(at(cpu, self).cpu, self.params, self.fmt, self.nbytes, self.tokens))

    @property
    def measured_s(self) -> float:
        return self.seconds

    @property
    def prompt(self) -> int:
        """The tokens of a many-token run (what the matrix-product fit takes), 0 for one token."""
        return self.tokens if self.tokens > 1 else 0


def weights_of_file(model: ModelSpec) -> Weights:
    """The weights a model file stores (``ModelSpec.stored_*``)."""
    if not model.stored_expert_bytes:
        raise MoesimError(f"{model.name}: a run's model must come from its GGUF file (its bytes per tensor)")
    return weights_of(None, model, None)


def at(cpu: CPU, run) -> Hardware:
    """A CPU-only machine with ``cpu`` at the run's threads and the DRAM read rate its probe found (of which the
    engine reaches ``dram_eff``)."""
    cpu = replace(cpu, threads=run.threads, dram_gbps=run.dram_gbps / cpu.sockets)
    return Hardware(cpu.name, None, None, cpu=cpu)


def decode_s(model: ModelSpec, hw: Hardware, ctx: float) -> float:
    """One batch-1 decode step of ``model`` with every weight on ``hw``'s CPU (no GPU), its sequence holding ``ctx``
    KV tokens: each layer's attention, router and fixed costs and its top-k experts on one token, then the row's
    once-only work (``moesim.sim.cost_model``)."""
    if hw.gpu is not None:
        raise MoesimError("decode_s times a CPU-only machine")
    c = cost_model(model, hw, weights_of_file(model), LLAMA_CPP).costs(np.array([1.0]), np.array([float(ctx)]))
    layer = c.pre_s[0] + model.top_k * c.cpu_by_tokens[1] + c.cpu_layer_fixed_s
    return float(model.num_layers * layer + c.row_s[0])


def prefill_s(model: ModelSpec, hw: Hardware, prompt: int) -> float:
    """A ``prompt``-token prompt of ``model`` in one batch on ``hw``'s CPU alone: each layer's attention and router
    on the row (its KV reads those of every position, ``moesim.sim.requests``), the experts its tokens choose, each
    on its share of them (routing taken as uniform, as a random-weight model's is: ``E·(1 − (1 − k/E)^n)`` distinct
    experts a layer, n·k/that tokens each), the fixed costs; then the row's once-only work (the head on the last
    token)."""
    if hw.gpu is not None:
        raise MoesimError("prefill_s times a CPU-only machine")
    n, experts, k = float(prompt), model.num_experts, model.top_k
    w = weights_of_file(model)
    c = cost_model(model, hw, w, LLAMA_CPP).costs(np.array([n]), np.array([n * (n + 1) / 2]), outputs=np.array([1.0]),
                                                  prefill=np.array([True]))
    used = experts * (1 - (1 - k / experts) ** n)
    expert = cpu_expert_s(hw.cpu, model.expert_params, w.expert_format, w.expert_bytes, n * k / used, mix=w.expert_mix)
    return float(model.num_layers * (c.pre_s[0] + used * expert + c.cpu_layer_fixed_s) + c.row_s[0])


def barriers_per_token(model: ModelSpec) -> int:
    """The barriers a CPU-only decode step takes: ``CPU_LAYER_BARRIERS`` a layer (dense ones too) and the head's."""
    from moesim.sim.costs import KERNELS_HEAD

    return CPU_LAYER_BARRIERS * (model.num_layers + model.dense_layers) + (KERNELS_HEAD if model.vocab else 0)


def fit_barrier(cpu: CPU, runs: list[Run]) -> CPU:
    """``barrier_base_us`` (and, with two or more thread counts, ``barrier_thread_us``) from decodes of a model
    whose weights stay in the cache (module docstring, 1)."""
    if not runs:
        raise MoesimError("the per-operation fit needs at least one run")
    free = replace(cpu, barrier_base_us=0.0, barrier_thread_us=0.0)
    further = np.array([r.threads - 1 for r in runs], np.float64)
    per_barrier_us = np.array([(r.measured_s - r.model_s(free)) / barriers_per_token(r.model)
                               for r in runs]) * 1e6
    if len(set(further)) > 1:
        (base, slope), _ = nnls(np.stack([np.ones_like(further), further], axis=1), per_barrier_us)
    else:
        slope = cpu.barrier_thread_us
        base = max(float(np.mean(per_barrier_us - slope * further)), 0.0)
    return replace(cpu, barrier_base_us=float(base), barrier_thread_us=float(slope))


def with_rate(cpu: CPU, fmt: str, gbps: float | None) -> CPU:
    """``cpu`` with ``fmt``'s unpack rate set (None: removed, the tables decide)."""
    others = tuple(p for p in cpu.unpack_gbps if p[0] != fmt)
    return replace(cpu, unpack_gbps=tuple(sorted(others + (((fmt, gbps),) if gbps is not None else ()))))


def log_error(cpu: CPU, runs: list[Run]) -> float:
    """The squared log error of the model's times on ``cpu`` against the runs'."""
    return float(sum(math.log(r.model_s(cpu) / r.measured_s) ** 2 for r in runs))


def best_value(loss, lo: float, hi: float, log: bool = True) -> float:
    """The ``x`` in [lo, hi] where ``loss(x)`` is least (searched on a log scale, or a linear one). The loss is flat
    where DRAM binds every run, which misleads Brent's method alone: a grid finds the neighbourhood of the minimum,
    Brent's method the minimum within it."""
    to, back = (math.log, math.exp) if log else (float, float)
    grid = np.linspace(to(lo), to(hi), GRID)
    losses = np.array([loss(back(x)) for x in grid])
    # where the least loss is flat (a limit binds no run), the largest value in it: one that binds none elsewhere
    i = int(np.flatnonzero(losses <= losses.min() * (1 + FLAT))[-1])
    bounds = (grid[max(i - 1, 0)], grid[min(i + 1, GRID - 1)])
    return back(minimize_scalar(lambda x: loss(back(x)), bounds=bounds, method="bounded",
                                options={"xatol": TOL}).x)


def fit_unpack(cpu: CPU, fmt: str, runs: list[Run]) -> tuple[float, bool]:
    """The GB/s of ``fmt`` weights one thread unpacks at decode, fitted to ``runs`` (module docstring, 2), and
    whether it binds any of them. Where even no unpack limit leaves the model as slow as every run, DRAM bound them
    all and the rate is only known to be at least the one that binds none (DRAM's share per thread): that one."""
    if not runs:
        raise MoesimError(f"the unpack fit for {fmt} needs at least one run")
    if all(r.model_s(with_rate(cpu, fmt, math.inf)) >= r.measured_s * (1 - 1e-9) for r in runs):
        return least_unbinding(cpu, runs), False
    return best_value(lambda u: log_error(with_rate(cpu, fmt, u), runs), *U_RANGE_GBPS), True


def least_unbinding(cpu: CPU, runs: list[Run]) -> float:
    """The least unpack rate per thread (GB/s) that binds none of ``runs``: DRAM's rate per thread in each."""
    return max(at(cpu, r).cpu.dram_bw() / 1e9 / r.threads for r in runs)


def fit_matmul(cpu: CPU, fmt: str, runs: list[Run]) -> float:
    """The GFLOP/s one thread reaches in ``fmt``'s matrix products on many tokens, fitted to prefill ``runs`` with
    everything else as the decode fit left it."""
    if not runs or not all(r.prompt for r in runs):
        raise MoesimError(f"the matrix-product fit for {fmt} needs runs on many tokens (prefill)")

    def with_flops(gflops: float) -> CPU:
        others = tuple(p for p in cpu.matmul_gflops if p[0] != fmt)
        return replace(cpu, matmul_gflops=tuple(sorted(others + ((fmt, gflops),))))

    return best_value(lambda g: log_error(with_flops(g), runs), *GFLOPS_RANGE)


def fit_field(cpu: CPU, name: str, runs: list, bounds: tuple, log: bool = True) -> CPU:
    """``cpu`` with its scalar ``name`` set where the model's log error on ``runs`` is least, within ``bounds``."""
    return replace(cpu, **{name: best_value(lambda v: log_error(replace(cpu, **{name: v}), runs), *bounds, log=log)})


def fit_attention(cpu: CPU, runs: list[Run]) -> CPU:
    """The flash attention's rates over the KV cache, everything else as the other fits left it: one query row at a
    time, per thread (``attn_gflops``) on the decodes among ``runs`` (after a context of many KV tokens) at the fewest
    threads, and what each further thread adds (``attn_thread_eff``, a share of one thread's) on those at more; in
    tiles (``attn_tiled_gflops``) on the prompts (long ones)."""
    decodes, prompts = [r for r in runs if not r.prompt], [r for r in runs if r.prompt]
    fewest = min((r.threads for r in decodes), default=0)
    for name, part, bounds, log in (
            ("attn_gflops", [r for r in decodes if r.threads == fewest], GFLOPS_RANGE, True),
            ("attn_thread_eff", [r for r in decodes if r.threads > fewest], THREAD_EFF_RANGE, False),
            ("attn_tiled_gflops", prompts, GFLOPS_RANGE, True)):
        if part:
            cpu = fit_field(cpu, name, part, bounds, log)
    return cpu


def fit_task(cpu: CPU, runs: list[Run]) -> CPU:
    """``task_us``: what an expert's products cost besides their weights' bytes, fitted to every format's runs (the
    models with many narrow experts against those with few wide ones decide it)."""
    return fit_field(cpu, "task_us", runs, TASK_RANGE_US, log=False)


def fit_dram(cpu: CPU, runs: list[Run]) -> CPU:
    """``dram_eff``: the share of the probe's read rate llama.cpp's decode reaches, fitted to every format's runs
    (those where DRAM binds decide it)."""
    return fit_field(cpu, "dram_eff", runs, EFF_RANGE)


def fit(cpu: CPU, overhead: list, by_format: dict) -> tuple[CPU, dict]:
    """The fits in turn, then all at once (module docstring): ``cpu`` with every parameter fitted, and each format's
    unpack rate (None: not unpack-bound). Without ``overhead`` runs (kernels timed alone, which take no barrier) the
    per-operation cost stays as ``cpu`` has it."""
    binds: dict = {}
    every = [r for runs in by_format.values() for r in runs]
    for _ in range(ROUNDS):
        for fmt, runs in by_format.items():
            rate, binds[fmt] = fit_unpack(cpu, fmt, runs)
            cpu = with_rate(cpu, fmt, rate)
        cpu = fit_task(fit_dram(cpu, every), every)
        cpu = fit_barrier(cpu, overhead) if overhead else cpu
    scalars = ["task_us", "dram_eff"] + (["barrier_base_us"] if overhead else []) + \
        (["barrier_thread_us"] if len({r.threads for r in overhead}) > 1 else [])
    cpu = refine(cpu, [f for f, bound in binds.items() if bound], every + overhead, scalars)
    rates = {}
    for fmt, runs in by_format.items():  # a rate that, refined, binds none of its runs is known only as a bound
        if all(r.model_s(with_rate(cpu, fmt, math.inf)) >= r.model_s(cpu) * (1 - 1e-12) for r in runs):
            cpu, rates[fmt] = with_rate(cpu, fmt, least_unbinding(cpu, runs)), None
        else:
            rates[fmt] = dict(cpu.unpack_gbps)[fmt]
    return cpu, rates


SCALAR_BOUNDS = {"task_us": TASK_RANGE_US, "dram_eff": EFF_RANGE, "barrier_base_us": (0.0, np.inf),
                 "barrier_thread_us": (0.0, np.inf)}


def refine(cpu: CPU, formats: list[str], runs: list, scalars: list[str]) -> CPU:
    """Every fitted parameter at once, from where the fits in turn left them: least squares of the log step times,
    bounded (``SCALAR_BOUNDS``, rates in ``U_RANGE_GBPS``); the unpack rates of ``formats`` (those that bind a run)
    and the ``scalars`` named (the per-operation costs only where the runs can tell them)."""
    def apply(x) -> CPU:
        rates = tuple(sorted(dict(cpu.unpack_gbps, **{f: math.exp(v) for f, v in zip(formats, x)}).items()))
        values = {name: float(v) if v > 1e-9 else 0.0 for name, v in zip(scalars, x[len(formats):])}
        return replace(cpu, unpack_gbps=rates, **values)

    rates = dict(cpu.unpack_gbps)
    x0 = [math.log(rates[f]) for f in formats] + [getattr(cpu, name) for name in scalars]
    lo = [math.log(U_RANGE_GBPS[0])] * len(formats) + [SCALAR_BOUNDS[name][0] for name in scalars]
    hi = [math.log(U_RANGE_GBPS[1])] * len(formats) + [SCALAR_BOUNDS[name][1] for name in scalars]
    x0 = np.clip(x0, lo, hi)

    def residuals(x) -> np.ndarray:
        fitted = apply(x)
        return np.array([math.log(r.model_s(fitted) / r.measured_s) for r in runs])

    best = least_squares(residuals, x0, bounds=(lo, hi), xtol=1e-15, ftol=1e-15, gtol=1e-15)
    return apply(best.x)
