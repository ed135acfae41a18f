"""``moesim plan``: what to put where for a model on a machine — every execution strategy, ranked.

In each weight format — the model file's own storage (a GGUF's types, tensor by tensor; a config.json's
``quantization_config``) where it has one, and each of ``dtypes`` (every weight in it; default, where the model has no
storage of its own: ``DTYPES``) — it simulates each candidate of ``CANDIDATES`` — a strategy with the settings that
make it what engines deploy — with its size taken from memory (``capacity = "auto"``: the most GPU slots that fit;
``cpu_layers = "auto"``: the fewest CPU layers that fit), on a trace: the one given, the bundled real one for
Mixtral-8x7B, else a synthetic trace of the model's dimensions. The first batch of sequences warms the caches up and
the rest are measured (steady state, as a running server sees it). The rows that fit rank by decode tokens/s (equal
ones by TTFT: ``rank_key``); each gives its tokens/s's 80% interval on a spec sheet's machine (the published points'
spread: ``moesim.sim.accuracy``), TPOT, the time to first token of a ``prompt``-token prompt, GPU memory and host RAM
used, the format (``format``, and in words ``storage``) and the engine's whole command that runs it. A row is offered
where an engine a user can install runs the model's family in that format (``moesim.sim.engines``); the others are set
apart, each saying why. On a machine with a GPU, llama.cpp with every layer on the CPU and the GPU left out (``-ngl
0``) is planned too, unless the GPU shares the host's memory (it reads the same memory faster). Candidates that keep
every expert on the GPU are one placement: one ``all-on-gpu`` row per format (``_fold``). A candidate that cannot
fit, or cannot run on the trace (lowbit-miss needs gate weights), is listed with the reason; where none fits, the plan
is an error naming the one closest to fitting. ``curves`` steps the GPU memory of each strategy's best row down, for a
figure of tokens/s against VRAM.

Popularity (``static`` pins, the ``popular`` preload) and the ``history`` prefetcher are learned from the simulated
trace itself, so those rows are upper bounds for their strategy on unseen prompts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np

from moesim.errors import MoesimError, named
from moesim.experiments.plan_row import PlanRow
from moesim.frames import Tabular
from moesim.policies import get_policy
from moesim.policies.prefetch import TRAIN_TRACE, get_prefetcher
from moesim.sim.accuracy import Estimate, tied
from moesim.sim.config import Config, run_params
from moesim.sim.des import DesResult, Prepared, Shared, compiling, prepare_des, simulate_all, simulate_des
from moesim.sim.engines import ALL_ON_GPU as WHOLE_ON_GPU, ENGINES, Launch, engine_for, engine_named, engines_for
from moesim.sim.layer_split import check_shares, describe
from moesim.sim.machine import VENDORS, Hardware
from moesim.sim.presets import SSDS
from moesim.sim.memory import GIB, DoesNotFit
from moesim.sim.requests import check_prompt
from moesim.sim.strategies import ON_CPU, ON_GPU, get_strategy
from moesim.sim.tensor_split import describe as describe_shares
from moesim.sim.weights import unpriced
from moesim.tracegen.models import BYTES_PER_PARAM, ModelSpec, get_model
from moesim.tracegen.trace import Trace

# (strategy, the settings that make it what engines run); sizes from memory. Fiddler and kTransformers
# place the most used (layer, expert) pairs on the GPU: a global pool, pinned (static) and preloaded.
CANDIDATES = (
    ("gpu-cache", {"policy": "lru", "capacity": "auto"}),
    ("gpu-cache", {"policy": "lru", "capacity": "auto", "prefetch": "history"}),
    ("cpu-experts", {"cpu_layers": "auto"}),
    ("cpu-miss", {"policy": "static", "capacity": "auto", "scope": "global", "prefetch": "popular"}),
    ("hybrid", {"policy": "static", "capacity": "auto", "scope": "global", "prefetch": "popular"}),
    ("hybrid", {"policy": "lru", "capacity": "auto"}),
    ("lowbit-miss", {"policy": "lru", "capacity": "auto"}),
)
DTYPES = ("bf16", "q8_0", "q4_k")
ALL_ON_GPU = "all-on-gpu"  # the row of a format whose every expert fits on the GPU, whichever strategy gave it
CPU_ONLY = "cpu-experts (GPU left out)"  # llama.cpp -ngl 0 on a machine with a GPU, where it is refused
TENSOR = "cpu-experts (every layer split)"  # every layer split over several GPUs (-sm tensor), where it is refused
# the drive a plan reads a model larger than RAM from, where the machine names none
SSD_ASSUMED = replace(SSDS["pcie4-nvme"], name="pcie4-nvme, assumed")
SYNTH_TOKENS = 128  # decode tokens per sequence of a synthetic trace
CURVE_POINTS = 6


@dataclass
class Plan(Tabular):
    """The ranked rows (``rows``: ``PlanRow``s, best first, each a placement an engine a user can install runs on
    the model in its format, with its command), the placements simulated that none does (``apart``: research code
    with no release, an engine that runs neither the model's family nor the format; each row says why), the
    candidates that could not run (``skipped``: dicts), and what was planned for."""

    model: str
    hardware: str
    machine: str              # the GPU, link and CPU, in words
    trace: str
    prompt: int               # prompt tokens the TTFT is timed on (where the trace records them: their median)
    batch: int
    rows: list[PlanRow] = field(default_factory=list)
    apart: list[PlanRow] = field(default_factory=list)  # simulated, but no engine a user can run gives them
    skipped: list = field(default_factory=list)
    context: int = 0          # KV tokens per sequence memory was sized for (the prompt and the decoded tokens)
    prompt_recorded: bool = False  # the trace records every sequence's prompt, and the TTFT is timed on those
    results: list = field(default_factory=list, repr=False)  # the DesResult behind each row (an all-on-gpu row:
    # the fastest of those it folds)
    simulated: Trace | None = field(default=None, repr=False)  # the trace the rows were simulated on
    spec: ModelSpec | None = field(default=None, repr=False)  # the model planned for
    machine_spec: Hardware | None = field(default=None, repr=False)  # and the machine (``local``: detected once)
    shared: Shared | None = field(default=None, repr=False)  # what its runs on the trace share (``moesim.sim.des``)
    cpu_only: Hardware | None = field(default=None, repr=False)  # the machine without its GPU (llama.cpp -ngl 0)
    tensor_too: bool = field(default=False, repr=False)  # several GPUs, no split mode asked: each format whole on
    # them with every layer split too (-sm tensor), beside the layer split's rows

    def with_ssd(self) -> Hardware:
        """The plan's machine with its SSD, else a PCIe 4 drive (``SSD_ASSUMED``)."""
        hw = self.machine_spec
        return hw if hw.ssd is not None else replace(hw, ssd=SSD_ASSUMED)

    def table_rows(self) -> list[dict]:
        """A row per ranked placement (``PlanRow.as_dict``: the ``--json`` row)."""
        return [r.as_dict() for r in self.rows]

    def as_dict(self) -> dict:
        return {"model": self.model, "hardware": self.hardware, "machine": self.machine, "trace": self.trace,
                "prompt": self.prompt, "prompt_recorded": self.prompt_recorded, "batch": self.batch,
                "context": self.context, "rows": [r.as_dict() for r in self.rows],
                "apart": [r.as_dict() for r in self.apart], "skipped": self.skipped}


def plan_trace(model: ModelSpec, path: str | Path | Trace | None, batch: int, seed: int = 0) -> tuple[Trace, str]:
    """The trace a plan at ``batch`` simulates, and its name: ``path`` (a file, or a trace in memory), the bundled
    Mixtral trace, or synthetic (two batches of sequences)."""
    from moesim.tracegen.synth import Locality, check_memory, synth_trace
    from moesim.tracegen.trace import bundled_trace_path

    if isinstance(path, Trace):  # a trace in memory (the API's)
        return path, f"the given {path.meta.model or 'trace'} trace"
    if path is not None or model.name == "mixtral-8x7b":
        from moesim.tracegen.io import load_trace  # polars, imported only to read a file

        if path is not None:
            return load_trace(path), str(path)
        return load_trace(bundled_trace_path()), "bundled Mixtral-8x7B GSM8K trace"
    sequences = 2 * batch
    check_memory(sequences * SYNTH_TOKENS * model.num_layers * model.top_k,
                 f"a synthetic trace of {sequences} sequences, {SYNTH_TOKENS} tokens each, is what "
                 f"{named('batch', batch)} plans on: plan a smaller batch")
    trace = synth_trace(model.num_layers, model.num_experts, model.top_k, sequences, SYNTH_TOKENS, seed, Locality(),
                        0, model.name, model.trace_meta())
    return trace, f"synthetic {model.name} trace ({sequences} x {SYNTH_TOKENS} tokens, seed {seed})"


# the settings a plan takes: the model, the machine and the workload it plans for (each candidate sets the rest)
PLAN_SETTINGS = ("model", "hardware", "link", "cpu", "vram", "ram", "threads", "tensor_split", "split_mode", "numa",
                 "force", "batch", "prompt", "split", "kernel")
PLAN_PROMPT = 512  # the prompt a plan times its TTFT on where none is asked for


def plan_loops() -> list[tuple[str, str, str]]:
    """The (policy, prefetcher, strategy) whose discrete-event loops a plan runs (``compile_loops``)."""
    return [(s.get("policy", "lru"), s.get("prefetch", "none"), strategy) for strategy, s in CANDIDATES]


def plan(config: Config, trace: str | Path | Trace | None = None, dtypes=None, prompt_asked: bool = True,
         given: set | frozenset = frozenset(), engines=None) -> Plan:
    """Simulate every candidate in every format (``planned_formats``; ``dtypes`` None: ``config``'s dtype where it has
    one) on ``config``'s model and machine, for its workload; the fitting ones ranked. ``split`` ``best`` shares each
    per-layer cache's slots out over the layers the best way for the trace (``moesim.sim.budget``). On a trace that
    records every sequence's prompt the TTFT is timed on those, and a prompt asked for (``prompt_asked``; else it is
    the plan's default) is refused. A setting in ``given`` (typed by the user) that no row of the plan reads is
    refused (``check_plan_read``). ``engines``: the names of the engines the user has (``moesim engines``), each
    placement planned once for each of them that runs it (``each_engine``); None: every engine, each placement timed
    as the first that runs it."""
    if config.model.name is None:
        raise MoesimError("a plan is for a model: name one (a preset, see 'moesim models')")
    spec = get_model(config.model.name)
    if spec.kind != "moe":
        raise MoesimError(f"{spec.name} is a MoLE model: its lookup tables have one placement; use 'moesim sim run'")
    formats = planned_formats(spec, [config.model.dtype] if dtypes is None and config.model.dtype else dtypes)
    kept = None if engines is None else {engine_named(e) for e in engines}
    unknown = sorted(set(kept or ()) - set(ENGINES))
    if unknown:
        raise MoesimError(f"{named('engine', unknown[0])}: no such engine; choose from {', '.join(ENGINES)}")
    # the candidates start from the model, the machine and the workload alone: a configuration file's cache or
    # prefetcher is not theirs
    flat = config.flat()
    config = Config().replace(**{k: flat[k] for k in (*PLAN_SETTINGS, "dtype")})
    wl = config.workload
    hw = config.hardware.spec()  # before any compiling: a 'local' machine is probed on idle cores
    check_shares(config.hardware.tensor_split, hw)  # once, here: each row's run would report it as not run
    with compiling(plan_loops(), least=1):  # in a worker process, while this one makes the trace and the runs
        tr, name = plan_trace(spec, trace, wl.batch)
        recorded = check_prompt(tr, wl.prompt if prompt_asked else 0)
        own = bool(recorded.min() > 0)  # every sequence's prompt recorded: the TTFT is timed on those
        config = config.replace(prompt=0) if own else config
        out = Plan(spec.name, hw.name, hw.describe(), name, int(np.median(recorded)) if own else wl.prompt,
                   wl.batch, prompt_recorded=own, simulated=tr, spec=spec, machine_spec=hw, shared=Shared(tr),
                   context=wl.context + config.workload.prompt + int(np.diff(tr.seq_offsets).max(initial=0)),
                   cpu_only=hw.without_gpus(f"{hw.name} CPU only")
                   if hw.gpu is not None and not hw.gpu.unified and hw.cpu is not None else None,
                   tensor_too=bool(hw.more_gpus) and "split_mode" not in given
                   and config.hardware.split_mode == "layer")
        prepared, short = _prepare(out, config.replace(model=spec.name,
                                                       warmup=1 if tr.num_sequences > wl.batch else 0), formats, kept)
    out.results = simulate_all(prepared)
    if not out.results and not out.skipped:  # (nothing skipped, nothing short: every candidate's engine left out)
        raise MoesimError(f"{named('engine', ','.join(engines))}: none of them runs a placement a plan simulates "
                          f"(engines: {', '.join(e.name for e in ENGINES.values() if e.runs)})")
    if not out.results:
        reasons = {}  # each reason once, with the candidates it stopped
        for s in out.skipped:
            reasons.setdefault(s["reason"], []).append(f"{s['strategy']} ({s['format']})")
        raise MoesimError(_nothing_fits(spec, hw, short) if short else f"no strategy runs {spec.name}: " + (
            next(iter(reasons)) if len(reasons) == 1 else
            "; ".join(f"{', '.join(dict.fromkeys(who))}: {why}" for why, who in list(reasons.items())[:3])))
    built = sorted(((row(r, spec, r.machine, out.context, kept), r) for r in out.results),
                   key=lambda t: rank_key(t[0][0]))
    rows, results = _fold([b for b, _ in built], [r for _, r in built])
    offered = sorted(((r, result) for r, result in zip(rows, results) if not r.apart), key=lambda t: rank_key(t[0]))
    out.rows, out.results = ranked([r for r, _ in offered]), [result for _, result in offered]
    out.apart = [r for r in rows if r.apart]
    check_plan_read(out, given)
    return out


def planned_formats(spec: ModelSpec, dtypes) -> list:
    """The formats a plan sizes its candidates in: the model file's own storage (None, a run's dtype left to the
    model: ``moesim.sim.weights``) where it has one, then ``dtypes``, each once as the configuration spells it (Q4_K is
    q4_k); ``dtypes`` None: ``DTYPES`` where the model has no storage of its own. A bad name is refused before any
    work, as is a storage moesim cannot price left as the only format."""
    own = [None] if spec.stored_expert_bytes else []
    if dtypes is None:
        why = unpriced(spec)
        if why:
            raise MoesimError(f"{why}: name the formats to plan ({named('dtype')})")
        return own or list(DTYPES)
    dtypes = list(dtypes)
    if not dtypes:
        raise MoesimError("a plan needs at least one weight format (dtypes) to size its candidates in")
    unnamed = [d for d in dtypes if not isinstance(d, str)]
    if unnamed:
        raise MoesimError(f"dtypes: {unnamed[0]!r} is no weight format's name (choose from {', '.join(BYTES_PER_PARAM)})")
    return own + list(dict.fromkeys(Config.build(dtype=dtype).model.dtype for dtype in dtypes))


def format_names(spec: ModelSpec, dtype: str | None) -> tuple[str, str]:
    """A planned format's name (a row's ``format``) and its words (``storage``): a format asked for, every weight in
    it; None, the model file's own storage."""
    return (spec.storage, spec.storage_text) if dtype is None else (dtype, f"{dtype} (every weight)")


# the settings of a plan that only some of its rows read: a per-layer cache's split, the CPU's threads
ROW_READ = ("split", "threads", "numa")


def read_by(p: Plan, name: str, apart: bool = False) -> list[int]:
    """The ranks of the rows of ``p`` (with ``apart``, of its rows set apart too: rank 0) that read the setting
    ``name`` (one of ``ROW_READ``): ``split``, those that keep a per-layer cache (not every expert on the GPU: there
    each layer holds all its experts, however shared); ``threads`` and ``numa``, those that compute an expert on the
    host CPU (every row, on a machine without a GPU)."""
    gpu = p.machine_spec is None or p.machine_spec.gpu is not None
    rows = p.rows + p.apart if apart else p.rows
    if name == "split":
        return [r.rank for r in rows
                if r.strategy != ALL_ON_GPU and r.capacity is not None and r.scope == "per-layer"]
    if name in ("threads", "numa"):
        return [r.rank for r in rows if not gpu or (r.strategy != ALL_ON_GPU and get_strategy(r.strategy).cpu)]
    raise ValueError(f"{name} is not a setting only some rows read ({', '.join(ROW_READ)})")


def check_plan_read(p: Plan, given) -> None:
    """Refuse a setting typed (in ``given``) that no row of ``p``, set apart or not, reads: it would change nothing the
    plan shows. Where every row keeps every expert on the GPU the model fits whole in the machine's GPU memory in each
    format planned."""
    for name in ROW_READ:
        if name not in given or read_by(p, name, apart=True):
            continue
        gpu = p.machine_spec is None or p.machine_spec.gpu is not None
        what = ("no row keeps a per-layer expert cache for it to share out" if name == "split"
                else "no row computes an expert on the host CPU")
        every = p.rows + p.apart
        formats = list(dict.fromkeys(r.format for r in every))
        if not gpu:  # (threads are read by every row there)
            why = f"{p.hardware} has no GPU: every candidate runs its experts on the CPU and none keeps a cache"
        elif all(r.strategy == ALL_ON_GPU for r in every if r.gpu):
            where = f"in {formats[0]}" if len(formats) == 1 else f"in each format planned ({', '.join(formats)})"
            why = (f"{p.model} fits whole in {p.hardware}'s GPU memory {where}: every row on the GPU is {ALL_ON_GPU} "
                   f"and {what}")
        else:
            why = f"{what} (the rows: {', '.join(dict.fromkeys(r.strategy for r in every))})"
        raise MoesimError(f"{named(name)}: {why}, so nothing reads it")


def _prepare(out: Plan, base: Config, formats, kept: set | None) -> tuple[list[Prepared], list]:
    """Every candidate in every format whose engine is ``kept`` (None: any), and on a machine with a GPU, llama.cpp with
    every layer on its CPU (``out.cpu_only``: the GPU left out), on several GPUs with no split mode asked every layer
    on them split (``out.tensor_too``: -sm tensor, where an engine the user has splits the model's family so),
    assembled on the plan's trace, not yet simulated,
    and (refusal, format name) for those memory refused (the CPU-only runs aside: they are not the machine's
    placements); those that cannot run are listed in ``out.skipped``."""
    spec, hw, tr = out.spec, out.machine_spec, out.simulated
    split = base.cache.split
    prepared, short = [], []
    # a machine without a GPU runs every expert on its CPU: the candidates that place experts there, not a cache
    candidates = [(s, c) for s, c in CANDIDATES if hw.gpu is not None or not get_strategy(s).cache]
    for dtype in formats:
        name = format_names(spec, dtype)[0]
        bpp = BYTES_PER_PARAM[dtype] if dtype else spec.stored_expert_bytes / spec.expert_params
        for strategy, settings in candidates:
            if "lowbit_dtype" in get_strategy(strategy).params:  # a low-bit copy well below the format
                settings = {**settings, "lowbit_dtype": "int4" if bpp >= 1 else "int2"}
            scope = settings.get("scope", "per-layer")
            config = base.replace(dtype=dtype, other_dtype=dtype, strategy=strategy,
                                  **{**settings, "split": split if "capacity" in settings and scope == "per-layer"
                                     else "uniform"})
            for config in each_engine(config, kept):
                try:
                    prepared.append(prepare_des(tr, config, spec, hw, shared=out.shared, as_engine=True))
                except DoesNotFit as exc:  # what it needs, without the advice to a 'sim run' user
                    short.append((exc, name))
                    mapped = get_strategy(strategy).places and exc.memory.ram and exc.memory.host > exc.memory.ram
                    ran, refused = _from_ssd(out, config, name, prepared, short) if mapped else (False, None)
                    _skip(out, {"strategy": strategy, "dtype": dtype, "format": name, **_named(settings),
                                "reason": f"needs {exc.parts}" + (
                                    "; run instead with the experts read from the SSD (the rows marked SSD)"
                                    if ran else "")})
                    if refused:
                        _skip(out, refused)
                except MoesimError as exc:
                    _skip(out, {"strategy": strategy, "dtype": dtype, "format": name, **_named(settings),
                                "reason": str(exc)})
        if out.tensor_too:
            _prepare_tensor(out, base.replace(dtype=dtype, other_dtype=dtype), name, kept, prepared)
        if out.cpu_only is None:
            continue
        for config in each_engine(base.replace(dtype=dtype, other_dtype=dtype, strategy="cpu-experts",
                                               cpu_layers="auto"), kept):  # llama.cpp -ngl 0
            try:
                prepared.append(prepare_des(tr, config, spec, out.cpu_only, shared=out.shared, as_engine=True))
            except MoesimError as exc:
                _skip(out, {"strategy": CPU_ONLY, "dtype": dtype, "format": name, "policy": None, "prefetch": None,
                            "reason": f"needs {exc.parts}" if isinstance(exc, DoesNotFit) else str(exc)})
    return prepared, short


def _prepare_tensor(out: Plan, base: Config, name: str, kept: set | None, prepared: list) -> None:
    """The format whole on the GPUs with every layer split over them (``base``'s format), for each engine the user
    has that splits its family so; listed in ``out.skipped`` with why where none does or it does not fit."""
    def skip(exc: MoesimError) -> None:
        _skip(out, {"strategy": TENSOR, "dtype": base.model.dtype, "format": name, "policy": None, "prefetch": None,
                    "reason": f"needs {exc.parts}" if isinstance(exc, DoesNotFit) else str(exc)})

    try:
        configs = each_engine(base.replace(strategy="cpu-experts", cpu_layers="auto", split_mode="tensor"), kept)
    except MoesimError as exc:  # an engine the user has without the mode
        return skip(exc)
    for config in configs:
        try:
            prepared.append(prepare_des(out.simulated, config, out.spec, out.machine_spec, shared=out.shared,
                                        as_engine=True))
        except MoesimError as exc:
            skip(exc)


def each_engine(config: Config, kept: set | None) -> list[Config]:
    """``config`` once for each engine the user has (``kept``) that runs its placement and takes its settings, named
    for it (the first, the engine a run of it is timed as, left as it is); with ``kept`` None, the first alone."""
    if kept is None:
        return [config]
    runs = engines_for(config)
    return [config if e is runs[0] else config.replace(engine=e.name) for e in runs if e.name in kept]


def _skip(out: Plan, skipped: dict) -> None:
    """A candidate that cannot run, listed once however many engines ran into it."""
    if skipped not in out.skipped:
        out.skipped.append(skipped)


def _from_ssd(out: Plan, config: Config, name: str, prepared: list, short: list) -> tuple[bool, dict | None]:
    """A placement of whole layers that host RAM cannot hold, run as llama.cpp runs a model file larger than RAM: the
    file mapped, the CPU layers' experts read from the SSD through the page cache (as many held in RAM as fit beside
    everything else, ``dram_capacity`` ``auto``), on the machine's SSD, else a PCIe 4 drive (``SSD_ASSUMED``). Returns
    whether it ran, and where it does not fit either, its line of what was skipped."""
    tiered = config.replace(dram_capacity="auto")
    try:
        prepared.append(prepare_des(out.simulated, tiered, out.spec, out.with_ssd(), shared=out.shared, as_engine=True))
    except DoesNotFit as exc:
        short.append((exc, name))
        return False, {"strategy": f"{config.execution.strategy} (from the SSD)", "dtype": config.model.dtype,
                       "format": name, "policy": None, "prefetch": None, "reason": f"needs {exc.parts}"}
    return True, None


def rank_key(r: PlanRow) -> tuple[float, float]:
    """Faster first; equal tokens/s (to the 4 significant digits a table shows) by the time to first token (none
    timed, with no prompt: last)."""
    return -float(f"{r.tokens_per_s.mid:.4g}"), math.inf if r.ttft_s is None else r.ttft_s.mid


def ranked(rows: list[PlanRow]) -> list[PlanRow]:
    """``rows`` (of one plan, or of several models') fastest first (``rank_key``), numbered from 1, each after the first
    marked where the published pairs do not tell it apart from the first (``tied``)."""
    rows = sorted(rows, key=rank_key)
    return [replace(r, rank=i + 1, tied=i > 0 and tied(r.tokens_per_s.mid, rows[0].tokens_per_s.mid))
            for i, r in enumerate(rows)]


def _nothing_fits(spec: ModelSpec, hw: Hardware, short: list) -> str:
    """One line: the candidate whose GPU and host shortfalls add up to the least, each shortfall, and what it needs
    part by part."""
    least, name = min(short, key=lambda refused: refused[0].memory.short())
    m = least.memory
    parts = [m.gpu_parts()] if m.gpu_short else []
    parts += [m.host_parts()] if m.ram and m.host > m.ram else []
    missing = [f"{short / GIB:.1f} GiB {what}" for short, what in ((m.gpu_short, "of GPU memory"),
                                                                    (max(m.host - m.ram, 0.0) if m.ram else 0.0,
                                                                     "of host RAM")) if short]
    return (f"nothing fits {spec.name} on {hw.name}; closest ({' and '.join(missing)} short): {name} with "
            f"{least.placement}, which needs " + "; ".join(parts))


def _fold(rows: list[tuple[PlanRow, PlanRow | None]], results: list) -> tuple[list[PlanRow], list]:
    """Rows that keep every expert on the GPU (each given with the row that names that placement, else None) are one
    placement whatever the strategy: per format, one row stays, named for the engine that names the placement, with
    that engine's own run of it where it ran it (its framework time on the machine's GPU included: llama.cpp's on
    an AMD or Apple GPU), else the first (the fastest: an engine with no framework time learned for it; the first
    whose engine a user can run, where the fastest's cannot); it lists the candidates folded into it, and takes the
    least GPU memory and host RAM of the one of them that needs the least GPU memory (then RAM; the engines differ in
    what they hold beside the experts: a host copy, scratch buffers). On several GPUs the layer split and every
    layer split are two placements. Returns the rows and their results, still side by side."""
    out, kept, timed_by = [], {}, {}  # kept: (format, split mode) -> its all-on-gpu row's index in out; timed_by:
    # whose run it is
    for (r, whole), result in zip(rows, results):
        one = (r.format, r.split_mode)
        if whole is None:
            out.append((r, result))
        elif one in kept:  # one placement, one memory: the least any of its engines needs
            at = kept[one]
            row_kept, result_kept = out[at]
            vram, ram = min((row_kept.vram_gb, row_kept.ram_gb), (r.vram_gb, r.ram_gb))
            own = r.engine == whole.engine != timed_by[one] and not whole.apart  # the naming engine's own run
            if own or (row_kept.apart and not whole.apart):  # else the first whose engine a user can run
                row_kept, result_kept, timed_by[one] = replace(whole, same_as=row_kept.same_as), result, r.engine
            same_as = tuple(dict.fromkeys((*row_kept.same_as, candidate(r))))  # (several engines run one candidate)
            out[at] = (replace(row_kept, same_as=same_as, vram_gb=vram, ram_gb=ram), result_kept)
        else:
            kept[one], timed_by[one] = len(out), r.engine
            out.append((replace(whole, same_as=(candidate(r),)), result))
    return [r for r, _ in out], [result for _, result in out]


def candidate(r: PlanRow) -> str:
    """A row's strategy and the settings that tell it apart."""
    settings = [v for v in (r.policy, r.prefetch) if v and v != "none"]
    return r.strategy + (f" ({' + '.join(settings)})" if settings else "")


def row(r: DesResult, spec: ModelSpec, hw: Hardware, context: int, kept: set | None = None
        ) -> tuple[PlanRow, PlanRow | None]:
    """A plan's row: the settings, what they give (tokens/s with its 80% interval on a spec sheet's machine), how to
    run them (the engine's command for ``hw``, with ``context`` KV tokens a sequence) or why no engine a user can
    run gives them (``apart``); and, where it keeps every expert on the GPU, the row of that placement (``_fold``),
    named for llama.cpp where it is ``kept`` (None: every engine) and runs the model in the format, else for the
    row's own engine; else None."""
    config = r.config
    strategy = get_strategy(config.execution.strategy)
    params = run_params(strategy, config.execution.params)
    engine = engine_for(config)
    cached = strategy.cache
    place = strategy.placement(spec.num_layers, params)
    slots = config.cache.slots(spec.num_layers) if cached else np.zeros(1, np.int64)
    every = spec.num_experts if config.cache.scope == "per-layer" else spec.num_layers * spec.num_experts
    gpu = hw.gpu is not None
    all_on_gpu = gpu and ((place == ON_GPU).all() or (cached and (place != ON_CPU).all() and (slots >= every).all()))
    name, storage = format_names(spec, config.model.dtype)
    fmt = config.model.dtype or spec.expert_format
    own_gguf = config.model.dtype is None and spec.file.endswith(".gguf")
    vendor = hw.gpu.vendor if gpu else None
    tensor = bool(hw.shares)  # every layer split over the GPUs: -ts as given, else none (even shares)
    split = (config.hardware.tensor_split or ()) if tensor else hw.split
    launch = Launch(spec, fmt, config, params.get(strategy.places, 0) if strategy.places else 0, gpu,
                    hw.cpu.workers if hw.cpu else 0, hw.cpu.sockets if hw.cpu else 1, context,
                    r.vram_gb / r.vram_limit_gb if r.vram_limit_gb else 0.0, split, vendor or "nvidia",
                    engine.tensor_mode if tensor else "", engine.numa)
    out = PlanRow(model=spec.name, strategy=strategy.name, dtype=config.model.dtype, format=name, storage=storage,
                  policy=config.cache.policy if cached else None,
                  prefetch=config.prefetch.prefetcher if cached else None,
                  capacity=config.cache.capacity if cached else None,
                  scope=config.cache.scope if cached else None,
                  cpu_layers=params.get(strategy.places), layers=spec.num_layers,
                  tokens_per_s=Estimate(r.tokens_per_s, r.tokens_per_s_low, r.tokens_per_s_high), tpot_s=r.tpot_s,
                  ttft_s=None if r.ttft_s is None else Estimate(r.ttft_s, r.ttft_s_low, r.ttft_s_high),
                  vram_gb=r.vram_gb, ram_gb=r.ram_gb, hit_rate=r.hit_rate, cpu_share=r.cpu_share,
                  engine=engine.name, command=engine.command(launch),
                  apart=engine.refuses(spec, fmt, own_gguf, vendor),
                  learned=cached and learns_from_trace(config), framework_us=r.framework_us, side=r.side, gpu=gpu,
                  from_ssd=_ssd_words(config, spec, place, hw), split_mode=("tensor" if tensor else "layer")
                  if hw.more_gpus else "",
                  on_gpus=(describe_shares(hw.shares, VENDORS[vendor]) if tensor else
                           describe(hw.split, params.get(strategy.places) or 0, spec.dense_layers, VENDORS[vendor]))
                  if hw.more_gpus else "")
    if not all_on_gpu:
        return out, None
    whole = WHOLE_ON_GPU if (kept is None or WHOLE_ON_GPU.name in kept) and \
        not WHOLE_ON_GPU.refuses(spec, fmt, own_gguf, vendor) else engine
    launch = replace(launch, cpu_layers=0)
    return out, replace(out, strategy=ALL_ON_GPU, policy=None, prefetch=None, capacity=None, scope=None, cpu_layers=0,
                        engine=whole.name, command=whole.command(launch),
                        apart=whole.refuses(spec, fmt, own_gguf, vendor))


def _ssd_words(config: Config, spec: ModelSpec, place, hw: Hardware) -> str:
    """Where a row reads experts from the SSD: how many RAM holds of those on the CPU, and the drive ("" where every
    expert is in memory)."""
    held = config.cache.dram_capacity
    if held is None:
        return ""
    return (f"{held:,} of the CPU layers' {int((place == ON_CPU).sum()) * spec.num_experts:,} experts in RAM, the "
            f"rest read from the SSD ({hw.ssd.name}) as the mapped file is")


def expert_counts(p: Plan) -> list[list[int]]:
    """How often the plan's trace routes each expert, per layer of the model (a dense layer's none; they come first,
    as DeepSeek's and GLM's first_k_dense_replace place them): what a frequency placement reads (SGLang's
    ``logical_count``)."""
    experts = p.simulated.experts
    counts = [np.bincount(experts[:, layer].ravel().astype(np.int64), minlength=p.spec.num_experts).tolist()
              for layer in range(p.spec.num_layers)]
    return [[0] * p.spec.num_experts] * p.spec.dense_layers + counts


def learns_from_trace(config: Config) -> bool:
    """The run's policy reads the rows it will serve (static's popularity), or its prefetcher learns from a training
    trace and is given none: the simulated trace is its own training set."""
    prefetcher = get_prefetcher(config.prefetch.prefetcher)
    return get_policy(config.cache.composed).reads_rows or prefetcher is not None and any(
        param is TRAIN_TRACE and config.prefetch.params.get(name) is None for name, param in prefetcher.params.items())


def _named(settings: dict) -> dict:
    return {k: settings.get(k) for k in ("policy", "prefetch")}


class Curve(NamedTuple):
    """A strategy's line in a plan's figure: the row it was drawn from, and (VRAM GiB, tokens/s) points, that row's
    settings with less GPU memory and, last, the row's own."""

    row: PlanRow
    points: list


def curves(p: Plan, points: int = CURVE_POINTS) -> list[Curve]:
    """Per strategy, its best row with the GPU memory it uses stepped down on the plan's trace, from the smallest
    placement up to the row (up to ``points`` points, and a cache of no slots); the best all-on-gpu row (if any) is
    one point. The rows that leave the GPU out (``Plan.cpu_only``) are not the machine's placements: not drawn."""
    spec = p.spec if p.spec is not None else get_model(p.model)
    tr = p.simulated
    out = []
    for r, result in zip(p.rows, p.results):
        if any(c.row.strategy == r.strategy for c in out) or not r.gpu:
            continue
        own = (r.vram_gb, r.tokens_per_s.mid)
        if r.strategy == ALL_ON_GPU:
            out.append(Curve(r, [own]))
            continue
        strategy = get_strategy(r.strategy)
        if strategy.cache:
            slots = result.config.cache.slots(spec.num_layers)  # a split's per-layer mean: its L·C
            top = int(slots.sum()) // slots.size
            low = tr.meta.top_k if top >= tr.meta.top_k else 0
            sizes = [{"capacity": c} for c in _spread(low, top, points) if c < top] + ([{"capacity": 0}] if low else [])
        else:
            n = result.config.execution.params[strategy.places]
            sizes = [{strategy.places: c} for c in _spread(n, spec.num_layers, points) if c > n]
        line = set()
        for size in sizes:
            try:
                s = simulate_des(tr, result.config.replace(**size), spec, p.machine_spec, shared=p.shared,
                                 as_engine=True)
            except MoesimError:
                continue
            line.add((s.vram_gb, s.tokens_per_s))
        out.append(Curve(r, sorted(line) + [own]))
    return out


def _spread(low: int, high: int, points: int) -> list[int]:
    """Up to ``points`` whole numbers from ``low`` to ``high``, both included."""
    return sorted(set(np.linspace(low, high, points).round().astype(int).tolist()))

