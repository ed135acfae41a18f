"""The one configuration object: what a simulation, a sweep row, a replay and a notebook call are set to.

``Config`` is seven frozen sections, each validated when it is built (bad values are one-line
``MoesimError``s), holding names and numbers only, so it hashes (``config_id``), writes to TOML
(``to_toml``/``from_toml``) and to a results row (``flat``/``build``):

- ``model``: the preset (default: the trace's own model) and the experts' dtype;
- ``hardware``: a machine preset or a hardware TOML file, a host link, CPU and SSD to swap in, and the
  GPU's and host's memory sizes;
- ``cache``: replacement policy and its parameters, GPU slots (or ``auto``: what memory leaves), scope,
  access semantics, reset, the DRAM cache in front of an SSD;
- ``prefetch``: the prefetcher and its parameters, and what runs after a misprediction;
- ``execution``: the kernel kind, the execution strategy (``moesim.sim.strategies``) and its parameters;
- ``workload``: sequences decoded in lockstep, KV tokens added to each;
- ``serve``: a serving run's requests (arrivals, how many), its continuous-batching scheduler (running
  requests, tokens per step, chunked prefill), speculative decoding and the latency targets
  (``moesim.sim.serve``; the other runs ignore it).

The flat setting names (``SETTINGS``: ``policy``, ``capacity``, ``gamma``, ...) are the command
line's options, the public API's keywords, a sweep spec's keys and the results' columns; they are
declared here and nowhere else: each section field's metadata (``declare``) gives its help, unit and
the type its text parses to, and ``DECLARED`` holds one ``Setting`` per name, the parameters included,
from which every command's options are generated (``moesim.cli.settings``). A policy's, prefetcher's or
strategy's parameters are those its ``SPEC`` declares (``moesim.params.Param``: kind, bounds, help); any other
is an error, as is a key no section knows. ``auto`` values (capacity, a strategy's
``cpu_layers``) are resolved from memory when a run starts (``moesim.sim.memory``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import numbers
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError, option
from moesim.files import atomic_output, check_output, read_toml
from moesim.params import AUTO, INT_MOST, SEED_MOST
from moesim.policies import DEFAULT_POLICY, POLICIES, get_policy
from moesim.policies.prefetch import FETCHING, PREFETCHERS, get_prefetcher
from moesim.sim.engines import ENGINES, engine_named
from moesim.sim.hardware import LOCAL, get_hardware, is_file_name, with_parts
from moesim.sim.presets import CPUS, LINKS, SSDS, SYSTEMS
from moesim.sim.machine import Hardware
from moesim.sim.strategies import STRATEGIES, get_strategy
from moesim.tracegen.model_files import is_model_file
from moesim.tracegen.models import BYTES_PER_PARAM, ModelSpec, model_for_trace

SCOPES = ("per-layer", "global")
SPLITS = ("uniform", "best")
SEMANTICS = ("step", "sequential")
MODES = ("fallback", "commit")
KERNELS = ("fused", "per-expert")
DTYPES = tuple(BYTES_PER_PARAM)


def declare(default, help_text: str, kind: type = str, unit: str = "", auto: bool = False, flag: str | None = None):
    """A section field with its declaration: the help a command line and the API show, the type a value
    given as text parses to (``kind``; ``auto`` also takes ``"auto"``), its unit, and the command line's
    option name where it is not ``--`` plus the flat name with dashes (``flag``)."""
    return field(default=default, metadata={"help": help_text, "kind": kind, "unit": unit, "auto": auto,
                                            "flag": flag})


def _choice(section: str, name: str, value, choices) -> None:
    if value not in choices:
        raise MoesimError(f"[{section}] unknown {name} {value!r}; choose from {', '.join(map(str, choices))}")


def _int(obj, section: str, name: str, low: int, optional: bool = False, auto: bool = False,
         most: int = INT_MOST) -> None:
    """``obj.name`` must be an integer from ``low`` to ``most`` (or None when ``optional``, ``"auto"`` when
    ``auto``); numpy's become int."""
    value = getattr(obj, name)
    if (optional and value is None) or (auto and value == AUTO):
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise MoesimError(f"[{section}] {name} must be an integer{' or auto' if auto else ''}, got {value!r}")
    if value < low:
        raise MoesimError(f"[{section}] {name} must be at least {low}, got {value}")
    if value > most:
        raise MoesimError(f"[{section}] {name} must be at most {most:,}, got {value:,}")
    object.__setattr__(obj, name, int(value))


def _flag(obj, section: str, name: str) -> None:
    """``obj.name`` must be True or False."""
    if not isinstance(getattr(obj, name), bool):
        raise MoesimError(f"[{section}] {name} must be true or false, got {getattr(obj, name)!r}")


def _name(section: str, name: str, value, optional: bool = True) -> None:
    if (value is None and optional) or isinstance(value, str) and value:
        return
    raise MoesimError(f"[{section}] {name} must be a name{' or left out' if optional else ''}, got {value!r}")


def _size(obj, section: str, name: str, what: str = "a size in GiB", most: float = math.inf) -> None:
    """``obj.name`` must be a finite number > 0 (and at most ``most``), or None."""
    value = getattr(obj, name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0 \
            or value > most:
        bound = f" and at most {most:g}" if math.isfinite(most) else ""
        raise MoesimError(f"[{section}] {name} must be {what} > 0{bound}, got {value!r}")
    object.__setattr__(obj, name, float(value))


def _params(section: str, owner: str, value, spec) -> dict:
    """A policy's, prefetcher's or strategy's parameters: only those its ``spec`` declares, each checked by its
    ``Param``."""
    if not isinstance(value, dict):
        raise MoesimError(f"[{section}] params must be a table, got {value!r}")
    takes = spec.params if spec is not None else {}
    out = {}
    for key, v in sorted(value.items()):
        if key not in takes:
            raise MoesimError(f"[{section}] {owner} takes no parameter {key!r} "
                              f"({'it takes ' + ', '.join(takes) if takes else 'it takes none'})")
        try:
            out[key] = takes[key].check(v)
        except MoesimError as exc:
            raise MoesimError(f"[{section}] {owner}'s {key} {exc}") from None
    return out


@dataclass(frozen=True)
class ModelConfig:
    """``name``: a model preset or file (None: the trace's own model); ``dtype``: the experts' precision (None: a
    model file's own storage, else the trace's recorded expert bytes, else bf16); ``other_dtype``: every other
    weight's (attention, embeddings, shared experts: a GGUF or AWQ checkpoint quantises them too; None: a model
    file's, else the trace's, else bf16)."""

    name: str | None = declare(None, "Model preset (see 'moesim models'; default: the trace's model).")
    dtype: str | None = declare(None, f"Expert precision: {', '.join(DTYPES)} (default: a model file's own storage, "
                                      "else the trace's expert bytes, else bf16).")
    other_dtype: str | None = declare(None, "Precision of every other weight (attention, embeddings, shared experts), "
                                            "as dtype (default: a model file's, else the trace's where the experts "
                                            "keep the trace's bytes, else bf16).")

    def __post_init__(self):
        _name("model", "name", self.name)
        for name in ("dtype", "other_dtype"):
            value = getattr(self, name)
            if isinstance(value, str) and value.lower() in DTYPES:  # as llama.cpp writes them too: Q4_K_M is q4_k_m
                object.__setattr__(self, name, value.lower())  # (one that is none is refused as written)
            if getattr(self, name) is not None:
                _choice("model", name, getattr(self, name), DTYPES)

    def spec(self, meta) -> ModelSpec:
        """The model a trace with metadata ``meta`` is simulated on."""
        return model_for_trace(meta, self.name)


@dataclass(frozen=True)
class HardwareConfig:
    """``machine``: a preset (``moesim hardware``) or a hardware TOML file; ``link`` / ``ssd`` / ``cpu`` swap in
    presets; ``vram`` / ``ram``: the GPU's and the host's memory in GiB (None: the machine's); ``force``: take
    numbers of the machine (or ``vram``, ``ram``) far past every real part's, which are refused otherwise as a likely
    unit slip (``moesim.sim.hardware.PLAUSIBLE``). ``force`` lets a run start and changes nothing it computes: a
    forced run's numbers are the unforced one's where that one runs, so ``config_id`` leaves it out (``UNHASHED``), and
    a result found or resumed without it is the same result."""

    machine: str = declare("rtx4090", "Hardware preset, TOML file (moesim hardware --template), or local (this "
                                      "machine, detected).")
    link: str | None = declare(None, f"Swap the host link for a preset: {', '.join(LINKS)}.")
    ssd: str | None = declare(None, f"Add an SSD preset: {', '.join(SSDS)}.")
    cpu: str | None = declare(None, "Swap the host CPU for a preset, its RAM with it (see 'moesim hardware'; --ram "
                                    "sets another).")
    vram: float | None = declare(None, "GPU memory (default: the GPU's).", float, "GiB")
    ram: float | None = declare(None, "Host RAM (default: the machine's).", float, "GiB")
    threads: int | None = declare(None, "Threads the engine computes with on the CPU, as llama.cpp's -t (default: "
                                        "the machine's, every core).", int, "threads")
    force: bool = declare(False, "Take a machine whose numbers are far past every real part's (12288 GiB of GPU "
                                 "memory: MiB?), refused otherwise as a likely unit slip (docs/hardware.md).", bool)

    def __post_init__(self):
        _name("hardware", "machine", self.machine, optional=False)
        if not is_file_name(self.machine) and self.machine.lower() != LOCAL:
            _choice("hardware", "hardware", self.machine.lower(), SYSTEMS)
        if self.link is not None:
            _choice("hardware", "link", self.link, LINKS)
        if self.ssd is not None:
            _choice("hardware", "ssd", self.ssd, SSDS)
        if self.cpu is not None:
            _choice("hardware", "cpu", self.cpu, CPUS)
        _size(self, "hardware", "vram")
        _size(self, "hardware", "ram")
        _int(self, "hardware", "threads", 1, optional=True)
        _flag(self, "hardware", "force")

    def spec(self, built: Hardware | None = None) -> Hardware:
        """The machine: the preset or file (or ``built``, one built in code, in its place), with the link, SSD and
        CPU swapped in and the memory sizes and threads set, its numbers taken past every real part's with ``force``."""
        parts = (self.link, self.ssd, self.cpu, self.vram, self.ram, self.threads, self.force)
        return get_hardware(self.machine, *parts) if built is None else with_parts(built, *parts)


@dataclass(frozen=True)
class CacheConfig:
    """The GPU's expert cache: ``capacity`` slots per layer (scope ``per-layer``) or in one pool
    (``global``), 0 for none, ``auto`` for as many as GPU memory holds, or a list of every layer's
    own slots (per-layer); ``split`` ``best`` shares the layers' slots (L·C, or the list's sum) out
    over them the way that maximises the policy's hits on the trace (``moesim.sim.budget``);
    ``semantics`` of a step's accesses (the hit-rate engine; the discrete-event engine serves a step
    at once); ``reset`` empties it at each sequence (batch); ``dram_capacity`` experts host DRAM
    caches in front of an SSD (None: every expert in DRAM; ``auto``: as many as host RAM holds, the page cache of
    a model file mapped from the SSD); ``params`` of the policy."""

    policy: str = declare(DEFAULT_POLICY, f"Replacement policy: {', '.join(POLICIES)}.")
    capacity: int | str | tuple = declare(4, "GPU expert slots per layer (or in the pool with scope global); 0: no "
                                             "expert cache; auto: as many as GPU memory holds.", int, "experts",
                                          auto=True)
    scope: str = declare("per-layer", "per-layer: C slots in every layer; global: one pool.")
    split: str = declare("uniform", "uniform: C slots in every layer; best: the layers' slots shared out the way "
                                    "that maximises the policy's hits on the trace (per-layer scope; exact, from its "
                                    "hit rate at every capacity).")
    semantics: str = declare("step", "step: a step's k experts arrive at once and are never evicted for each other; "
                                     "sequential: one by one, a textbook cache.")
    reset: bool = declare(False, "Empty the cache at every new sequence (batch).", bool)
    dram_capacity: int | str | None = declare(None, "Experts host DRAM caches in front of the SSD (needs ssd; "
                                                    "default: every expert in DRAM; auto: as many as host RAM "
                                                    "holds beside everything else).", int, "experts", auto=True)
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        _choice("cache", "policy", self.policy, POLICIES)
        _choice("cache", "scope", self.scope, SCOPES)
        _choice("cache", "split", self.split, SPLITS)
        if isinstance(self.capacity, np.ndarray):  # numpy's: one number, or every layer's slots
            object.__setattr__(self, "capacity", self.capacity.tolist())
        if isinstance(self.capacity, (list, tuple)):
            _layer_slots(self)
        else:
            _int(self, "cache", "capacity", 0, auto=True)
        if self.split == "best" and self.scope != "per-layer":
            raise MoesimError("[cache] split best shares slots out over the layers' own caches: it needs scope "
                              "per-layer")
        _choice("cache", "semantics", self.semantics, SEMANTICS)
        _flag(self, "cache", "reset")
        _int(self, "cache", "dram_capacity", 0, optional=True, auto=True)
        object.__setattr__(self, "params", _params("cache", f"policy {self.policy}", self.params,
                                                   get_policy(self.policy)))

    def __hash__(self):
        return hash(_canonical(self))

    def slots(self, num_layers: int) -> np.ndarray:
        """int64 [partitions]: the slots of each layer (per-layer scope) or of the one pool (global),
        of a resolved capacity (not ``auto``)."""
        if isinstance(self.capacity, tuple):
            if len(self.capacity) != num_layers:
                raise MoesimError(f"[cache] capacity lists {len(self.capacity)} layers' slots, the trace has "
                                  f"{num_layers} layers")
            return np.array(self.capacity, np.int64)
        return np.full(num_layers if self.scope == "per-layer" else 1, self.capacity, np.int64)


def _layer_slots(cache) -> None:
    """A capacity given per layer: whole numbers from 0 to ``INT_MOST`` (numpy's become int), under per-layer
    scope."""
    values = tuple(cache.capacity)
    if not values or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 0 <= v <= INT_MOST
                         for v in values):
        raise MoesimError(f"[cache] a capacity per layer is a list of whole numbers from 0 to {INT_MOST:,}, got "
                          f"{list(values)!r}")
    if cache.scope != "per-layer":
        raise MoesimError("[cache] a capacity per layer needs scope per-layer (a global pool has one size)")
    object.__setattr__(cache, "capacity", tuple(int(v) for v in values))


@dataclass(frozen=True)
class PrefetchConfig:
    """``prefetcher`` (``none``: fetch on demand only) and its ``params``; ``mode`` after a misprediction:
    ``fallback`` fetches the routed experts, ``commit`` runs the predicted ones (CommitMoE)."""

    prefetcher: str = declare("none", f"Prefetcher: {', '.join(PREFETCHERS)}.")
    mode: str = declare("fallback", "After a misprediction: fallback (fetch the right experts) or commit (run the "
                                    "predicted ones, CommitMoE).")
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        _choice("prefetch", "prefetcher", self.prefetcher, PREFETCHERS)
        _choice("prefetch", "mode", self.mode, MODES)
        prefetcher = get_prefetcher(self.prefetcher)
        if self.mode == "commit" and (prefetcher is None or prefetcher.kind != "next"):
            raise MoesimError(f"[prefetch] mode commit runs next-layer predictions; prefetcher '{self.prefetcher}' "
                              "makes none (use oracle, speculative or history)")
        object.__setattr__(self, "params",
                           _params("prefetch", f"prefetcher {self.prefetcher}", self.params, prefetcher))

    def __hash__(self):
        return hash(_canonical(self))


@dataclass(frozen=True)
class ExecutionConfig:
    """``kernel``: ``fused`` (a layer's experts in one kernel once all are resident, vLLM) or
    ``per-expert`` (each as its weights land, Mixtral-offloading); ``strategy``: where experts run
    (``moesim.sim.strategies``: gpu-cache, cpu-experts, cpu-miss, hybrid, lowbit-miss) and its ``params``."""

    kernel: str = declare("fused", "fused: a layer's experts in one kernel once all are on the GPU (vLLM); "
                                   "per-expert: each as its weights land (Mixtral-offloading).")
    strategy: str = declare("gpu-cache", "Where experts run: " + "; ".join(
        f"{name} ({strategy.summary}: {', '.join(e.name for e in ENGINES.values() if name in e.runs)})"
        for name, strategy in STRATEGIES.items()) + ".")
    engine: str = declare(AUTO, "The engine the run is timed as (moesim engines): auto, the placement's operations with "
                                "the figures of the first engine that runs it; an engine's name, that engine with its "
                                "framework time learned from published points, as plan's rows are.")
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "engine", engine_named(self.engine))
        _choice("execution", "kernel kind", self.kernel, KERNELS)
        _choice("execution", "strategy", self.strategy, STRATEGIES)
        _choice("execution", "engine", self.engine, (AUTO, *ENGINES))
        runs = [e.name for e in ENGINES.values() if self.strategy in e.runs]
        if self.engine != AUTO and self.engine not in runs:
            raise MoesimError(f"[execution] engine {self.engine} does not run strategy {self.strategy} (it runs "
                              f"{', '.join(ENGINES[self.engine].runs)}; the engines that run {self.strategy}: "
                              f"{', '.join(runs) or 'none'})")
        object.__setattr__(self, "params", _params("execution", f"strategy {self.strategy}", self.params,
                                                   get_strategy(self.strategy)))

    def __hash__(self):
        return hash(_canonical(self))


@dataclass(frozen=True)
class WorkloadConfig:
    """``batch`` sequences decode in lockstep (a layer loads their union); ``context`` KV tokens are added to
    every sequence (a prompt the trace did not record, not computed); ``prompt`` tokens are prefilled before
    each sequence the trace recorded without one (``moesim.sim.requests``: its time is the TTFT); the first
    ``warmup`` batches run but are not measured (the caches fill during them: steady state)."""

    batch: int = declare(1, "Sequences decoded in lockstep.", int, "sequences")
    context: int = declare(0, "KV tokens added to every sequence (a prompt the trace did not record, not computed).",
                           int, "tokens")
    prompt: int = declare(0, "A prompt of N tokens prefilled before each sequence the trace recorded without one "
                             "(TTFT).", int, "tokens")
    warmup: int = declare(0, "Batches run first and not measured (steady state).", int, "batches")

    def __post_init__(self):
        _int(self, "workload", "batch", 1)
        _int(self, "workload", "context", 0)
        _int(self, "workload", "prompt", 0)
        _int(self, "workload", "warmup", 0)


# a served stream's settings where none is given, on the command line, in a sweep and in ``moesim.serve`` alike: as
# many expert slots as fit beside the KV cache of ``max_batch`` requests
SERVE_DEFAULTS = {"capacity": "auto"}
ARRIVALS = ("poisson", "burst")
ARRIVAL_FILES = (".csv", ".parquet")  # or a file of arrival times (``moesim.sim.scheduler.read_arrivals``)


@dataclass(frozen=True)
class ServeConfig:
    """A serving run (``moesim.sim.serve``): ``requests`` requests (default: one per trace sequence) arrive
    as a Poisson process of ``rate`` per second (seeded by ``arrival_seed``), all at time 0 (``burst``), or
    at the times an ``arrivals`` file (CSV or Parquet) lists;
    the scheduler runs at most ``max_batch`` of them at once and ``max_batch_tokens`` tokens per step,
    splitting prompts across steps when ``chunked_prefill``; each decode step verifies ``draft_tokens`` + 1
    positions per request, each draft accepted with probability ``acceptance``; with ``dynamic_kv`` (and
    capacity auto) the expert cache gets, step by step, the GPU memory the running requests' KV cache
    leaves; ``slo_ttft_s`` and ``slo_tpot_s`` are the latency targets whose attainment is reported."""

    rate: float | None = declare(None, "Requests per second (Poisson arrivals).", float, "requests/s")
    arrivals: str = declare("poisson", "poisson (at rate), burst (every request at time 0), or a CSV or Parquet file "
                                       "with a row per request: arrival_s (seconds) and optionally seq (the trace "
                                       "sequence it serves).")
    requests: int | None = declare(None, "Requests in the stream (default: one per trace sequence; more reuse the "
                                         "sequences, shuffled).", int)
    max_batch: int = declare(8, "Requests running at once (vLLM's max_num_seqs).", int, "requests")
    max_batch_tokens: int = declare(2048, "Tokens per step (vLLM's max_num_batched_tokens).", int, "tokens")
    chunked_prefill: bool = declare(True, "Split a prompt across steps to fit the token budget.", bool)
    draft_tokens: int = declare(0, "Speculative decoding: draft tokens verified per step (0: off).", int, "tokens")
    acceptance: float = declare(0.8, "Speculative decoding: the chance each draft is accepted.", float)
    arrival_seed: int = declare(0, "Seed of the arrivals, the shuffles and the acceptances.", int)
    dynamic_kv: bool = declare(False, "With capacity auto: the expert cache gets, step by step, the GPU memory the "
                                      "running requests' KV cache leaves (else it keeps what the KV cache of "
                                      "max_batch requests of the longest sequence leaves).", bool)
    slo_ttft_s: float | None = declare(None, "TTFT target (reports the share of requests meeting every target).",
                                       float, "s", flag="--slo-ttft")
    slo_tpot_s: float | None = declare(None, "TPOT target.", float, "s", flag="--slo-tpot")

    def __post_init__(self):
        if not (isinstance(self.arrivals, str) and self.arrivals.lower().endswith(ARRIVAL_FILES)):
            _choice("serve", "arrivals", self.arrivals, ARRIVALS + tuple(f"a {s} file" for s in ARRIVAL_FILES))
        _size(self, "serve", "rate", "a rate in requests/s")
        _int(self, "serve", "requests", 1, optional=True)
        _int(self, "serve", "max_batch", 1)
        _int(self, "serve", "max_batch_tokens", 1)
        for name in ("chunked_prefill", "dynamic_kv"):
            _flag(self, "serve", name)
        _int(self, "serve", "draft_tokens", 0)
        _size(self, "serve", "acceptance", "a probability", 1.0)
        _int(self, "serve", "arrival_seed", 0, most=SEED_MOST)
        _size(self, "serve", "slo_ttft_s", "a time in seconds")
        _size(self, "serve", "slo_tpot_s", "a time in seconds")
        if self.max_batch_tokens < self.max_batch * (self.draft_tokens + 1):
            raise MoesimError(f"[serve] max_batch_tokens {self.max_batch_tokens} cannot hold a step of max_batch "
                              f"{self.max_batch} requests verifying {self.draft_tokens + 1} position(s) each")


SECTIONS = {"model": ModelConfig, "hardware": HardwareConfig, "cache": CacheConfig, "prefetch": PrefetchConfig,
            "execution": ExecutionConfig, "workload": WorkloadConfig, "serve": ServeConfig}
# flat setting name -> (section, field); a section's own field names, except where a bare name would be unclear
_RENAMED = {("model", "name"): "model", ("hardware", "machine"): "hardware", ("prefetch", "prefetcher"): "prefetch"}
SETTINGS = {_RENAMED.get((s, f.name), f.name): (s, f.name)
            for s, cls in SECTIONS.items() for f in fields(cls) if f.name != "params"}


def declared_params(owned: dict) -> dict:
    """``owned``: section -> (the setting that owns its parameters, the policies, prefetchers or strategies it names).
    Their parameters, section -> (that setting, parameters by name). A name is one setting, so plug-ins that share one
    must declare it alike (one ``Param``, shared) in one section, and none may take a section field's name."""
    out, seen = {}, {}
    for section, (owner, specs) in owned.items():
        params = {}
        for spec in specs:
            for name, param in spec.params.items():
                if seen.setdefault(name, (section, param)) != (section, param) or name in SETTINGS:
                    raise MoesimError(f"{owner} {spec.name} declares parameter {name} unlike another setting of that "
                                      "name (a name is one setting: declare one Param and share it)")
                params[name] = param
        out[section] = (owner, params)
    return out


# section -> (the setting that owns its parameters, those parameters by name)
PARAMS_OF = declared_params({"cache": ("policy", map(get_policy, POLICIES)),
                             "prefetch": ("prefetch", map(get_prefetcher, FETCHING)),
                             "execution": ("strategy", STRATEGIES.values())})
CACHE_PARAMS, PREFETCH_PARAMS, STRATEGY_PARAMS = (tuple(PARAMS_OF[s][1]) for s in ("cache", "prefetch", "execution"))
OWNERS = {section: (owner, tuple(params)) for section, (owner, params) in PARAMS_OF.items()}
PATH_PARAMS = tuple(n for _, params in PARAMS_OF.values() for n, p in params.items() if p.names_file)  # files
TRACE_PARAMS = tuple(n for _, params in PARAMS_OF.values() for n, p in params.items() if p.kind == "trace")
SERVE_SETTINGS = tuple(k for k, (s, _) in SETTINGS.items() if s == "serve")
NOT_SERVED = ("batch", "warmup", "reset")  # settings a served stream refuses (it forms its batches, shares its cache)
HITRATE_SETTINGS = tuple(k for k, (s, _) in SETTINGS.items() if s == "cache" and k != "dram_capacity") + CACHE_PARAMS
# the settings each kind of run reads: hit rates (no machine, no time), the discrete-event run, a served stream, and
# a replay (``moesim replay``, ``moesim validate``): the discrete-event run's, whose decisions it executes (a real
# backend refuses those that describe the simulated machine and formats: ``moesim.replay.run.check_given``)
DES_SETTINGS = tuple(k for k in SETTINGS if k != "semantics" and k not in SERVE_SETTINGS) + CACHE_PARAMS + \
    PREFETCH_PARAMS + STRATEGY_PARAMS
RUN_SETTINGS = {"hitrate": HITRATE_SETTINGS, "des": DES_SETTINGS,
                "serve": tuple(k for k in DES_SETTINGS if k not in NOT_SERVED) + SERVE_SETTINGS,
                "replay": tuple(k for k in DES_SETTINGS if k != "engine")}  # a replay runs the decisions itself


@dataclass(frozen=True)
class Setting:
    """One setting as it is declared (a section field's ``declare``, or a plug-in's ``Param``):
    its flat name, where it lives, the type its text parses to, its unit, help and default."""

    name: str
    section: str        # the ``Config`` section; a parameter's is its owner's
    kind: type          # str, int, float or bool
    default: object
    help: str
    unit: str = ""
    auto: bool = False  # it also takes "auto"
    flag: str = ""      # the command line's option
    owner: str = ""     # a parameter: the setting that owns it (policy, prefetch, strategy); "" for a field

    def parse(self, text: str):
        """The value of ``text`` given for this setting (on a command line)."""
        if self.auto and text.strip() == AUTO:
            return AUTO
        if self.kind is bool:
            words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
            if text.strip().lower() not in words:
                raise MoesimError(f"{self.flag} must be true or false, got {text!r}")
            return words[text.strip().lower()]
        try:
            return self.kind(text.strip())
        except ValueError:
            raise MoesimError(f"{self.flag} must be {'auto or ' if self.auto else ''}"
                              f"{'a whole number' if self.kind is int else 'a number'}, got {text!r}") from None


def _declared() -> dict[str, Setting]:
    out = {}
    for name, (section, fname) in SETTINGS.items():
        f = next(f for f in fields(SECTIONS[section]) if f.name == fname)
        meta = f.metadata
        out[name] = Setting(name, section, meta["kind"], f.default, meta["help"], meta["unit"], meta["auto"],
                            meta["flag"] or f"--{name.replace('_', '-')}")
    for section, (owner, params) in PARAMS_OF.items():
        for name, param in params.items():
            out[name] = Setting(name, section, param.parses, param.default, param.help, auto=param.auto,
                                flag=f"--{name.replace('_', '-')}", owner=owner)
    return out


DECLARED = _declared()  # every setting and parameter, by flat name


@dataclass(frozen=True)
class Config:
    """Every setting of a run, in seven validated sections (see the module docstring)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    prefetch: PrefetchConfig = field(default_factory=PrefetchConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)

    def __post_init__(self):
        for name, cls in SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise MoesimError(f"Config.{name} must be a {cls.__name__}, got {getattr(self, name)!r}")
        engine = ENGINES.get(self.execution.engine)
        if engine is not None and not engine.takes(self):  # an engine has the mechanism for some settings only
            others = [e.name for e in ENGINES.values() if self.execution.strategy in e.runs and e.takes(self)]
            what = (engine.takes.__doc__ or "").strip().splitlines()[0].rstrip(".").replace("``", "")
            raise MoesimError(f"[execution] engine {engine.name} does not run these settings ({what[:1].lower()}"
                              f"{what[1:]}); {' or '.join(others) or 'no engine'} does")

    @classmethod
    def build(cls, **settings) -> Config:
        """A configuration from flat settings (``policy="lru", capacity=4, gamma=0.9, ...``); the rest default.

        >>> Config.build(policy="gamma", gamma=0.8, capacity=4).cache.params
        {'gamma': 0.8}
        """
        return on_machine(cls().replace(**settings), settings)

    def replace(self, **settings) -> Config:
        """This configuration with the flat settings given changed (a parameter must suit its policy,
        prefetcher or strategy)."""
        parts = {name: {} for name in SECTIONS}
        params = {}  # the sections whose parameters change: their new ones
        for key, value in settings.items():
            owner = next((section for section, (_, names) in OWNERS.items() if key in names), None)
            if key in SETTINGS:
                section, name = SETTINGS[key]
                parts[section][name] = value
            elif owner is not None:
                params.setdefault(owner, dict(getattr(self, owner).params))[key] = value
            else:
                raise MoesimError(f"unknown setting {key!r} (known: {', '.join(SETTINGS)}, "
                                  f"{', '.join(CACHE_PARAMS + PREFETCH_PARAMS + STRATEGY_PARAMS)})")
        # a new policy (prefetcher, strategy) drops the old one's parameters
        for section, (setting, _) in OWNERS.items():
            current = getattr(getattr(self, section), SETTINGS[setting][1])
            if settings.get(setting, current) != current:
                params[section] = {k: v for k, v in params.get(section, {}).items() if k in settings}
            if section in params:
                parts[section]["params"] = params[section]
        # a section nothing changes is kept as it is (they are frozen)
        return Config(**{name: replace(getattr(self, name), **parts[name]) if parts[name] else getattr(self, name)
                         for name in SECTIONS})

    def flat(self) -> dict:
        """Every setting under its flat name, the policy's and prefetcher's parameters included."""
        out = {key: getattr(getattr(self, s), f) for key, (s, f) in SETTINGS.items()}
        return {**out, **self.cache.params, **self.prefetch.params, **self.execution.params}

    def to_toml(self, path: str | Path, *, absolute: bool = False) -> None:
        """Write the sections as TOML tables (unset settings left out), atomically, to a ``.toml`` file (an existing one
        replaced). With ``absolute`` (``moesim sim run --save-config``), each file a setting names (a hardware TOML, an
        arrivals file, a policy's or prefetcher's model or trace) is written as an absolute path: a relative one is
        read against the folder of whoever loads the file (``from_toml``), and a run saved in one folder named other
        files when started from another, or from the file's own."""
        config = _absolute_files(self) if absolute else self
        lines = []
        for name in SECTIONS:
            values = {k: v for k, v in asdict(getattr(config, name)).items() if v is not None and k != "params"}
            params = getattr(getattr(config, name), "params", {})
            lines.append(f"[{name}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
            if params:
                lines.append(f"params = {{ {', '.join(f'{k} = {_toml_value(v)}' for k, v in params.items())} }}")
            lines.append("")
        with atomic_output(check_output(path, "configuration file", suffixes=(".toml",))) as tmp:
            Path(tmp).write_text("\n".join(lines))

    @classmethod
    def from_toml(cls, path: str | Path) -> Config:
        """A configuration file's sections (every one optional); errors name the file. A relative path in it is read,
        as one typed on the command line, against the current folder (``to_toml(absolute=True)`` writes none)."""
        data = read_toml(path, "configuration file")
        unknown = sorted(set(data) - set(SECTIONS))
        if unknown:
            raise MoesimError(f"{path}: unknown section(s) {', '.join(unknown)} (known: {', '.join(SECTIONS)})")
        try:
            parts = {}
            for name, cls_ in SECTIONS.items():
                table = data.get(name, {})
                if not isinstance(table, dict):
                    raise MoesimError(f"[{name}] must be a table")
                known = {f.name for f in fields(cls_)}
                extra = sorted(set(table) - known)
                if extra:
                    raise MoesimError(f"[{name}] unknown key(s) {', '.join(extra)} (known: {', '.join(known)})")
                parts[name] = cls_(**table)
            return cls(**parts)
        except MoesimError as exc:
            raise MoesimError(f"{path}: {exc}") from None


def _absolute_files(config: Config) -> Config:
    """``config`` with each file a setting names as an absolute path: the model (a config.json or GGUF file, not a
    preset), the hardware (a TOML file, not a preset or local), the arrivals (a file, not poisson or burst), and the
    parameters that name files (``PATH_PARAMS``; a trace's ``bundled`` is the shipped one, wherever the run is)."""
    import os

    from moesim.tracegen.trace import BUNDLED

    machine, arrivals, model = config.hardware.machine, config.serve.arrivals, config.model.name
    files = {"hardware": machine if machine.lower() != LOCAL and is_file_name(machine) else None,
             "arrivals": arrivals if arrivals.lower().endswith(ARRIVAL_FILES) else None,
             "model": model if model is not None and is_model_file(model) else None}
    for section in OWNERS:
        files |= {k: str(v) for k, v in getattr(config, section).params.items()
                  if k in PATH_PARAMS and not (k in TRACE_PARAMS and str(v) == BUNDLED)}
    return config.replace(**{k: os.path.abspath(v) for k, v in files.items() if v is not None})


def file_settings(path: str | Path) -> set[str]:
    """The flat names of the settings a configuration file sets (its parameters included)."""
    data = read_toml(path, "configuration file")
    names = {(section, key): name for name, (section, key) in SETTINGS.items()}
    out = set()
    for section, table in data.items():
        if isinstance(table, dict):
            out |= {names[(section, k)] for k in table if (section, k) in names}
            params = table.get("params")
            out |= set(params) if isinstance(params, dict) else set()
    return out


def _canonical(section) -> str:
    """A section as sorted JSON: what it hashes by (its parameters are a dict)."""
    return json.dumps(asdict(section), sort_keys=True, default=str)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(map(_toml_value, value))}]"
    return repr(value)


UNHASHED = ("force",)  # settings that let a run start and change nothing it computes (``HardwareConfig``)
# settings left out of the hash at their default: added after runs were stored, whose ids they keep
HASHED_UNLESS = {"engine": AUTO}


def config_id(kind: str, trace: str, config: Config | dict) -> str:
    """A short stable hash of a run: its kind, its trace and every setting that changes what it computes (not
    ``UNHASHED``'s)."""
    flat = {k: v for k, v in (config.flat() if isinstance(config, Config) else config).items()
            if k not in UNHASHED and not (k in HASHED_UNLESS and v == HASHED_UNLESS[k])}
    return hashlib.sha1(json.dumps([kind, trace, flat], sort_keys=True, default=str).encode()).hexdigest()[:16]


def owner_spec(owner: str, name: str):
    """What an ``owner`` setting's value ``name`` names, whose ``params`` it takes: the policy, prefetcher (None for
    "none") or strategy called ``name``."""
    return {"policy": get_policy, "prefetch": get_prefetcher, "strategy": get_strategy}[owner](name)


def params_for(name: str, given: dict, owner: str = "policy") -> dict:
    """Of parameters given for several policies (prefetchers, strategies) at once (a command line's ``--gamma``),
    those the policy ``name`` (its ``owner`` setting's value) takes."""
    spec = owner_spec(owner, name)
    takes = spec.params if spec is not None else {}
    return {k: v for k, v in given.items() if k in takes}


def check_params_used(policies: list[str], given: dict, prefetchers: list[str] = ("none",),
                      strategies: list[str] = ("gpu-cache",)) -> None:
    """A parameter that none of ``policies`` (nor of the prefetchers or strategies) takes was given by mistake."""
    takes = {k for p in policies if p in POLICIES for k in get_policy(p).params}
    takes |= {k for p in prefetchers if p in FETCHING for k in get_prefetcher(p).params}
    takes |= {k for p in strategies if p in STRATEGIES for k in STRATEGIES[p].params}
    unused = sorted(k for k in given if k not in takes)
    if unused:
        placed = list(strategies) != ["gpu-cache"] or any(k in STRATEGY_PARAMS for k in unused)
        owners = ", prefetcher or strategy" if placed else " or prefetcher"
        raise MoesimError(f"{', '.join(map(option, unused))}: no policy{owners} "
                          f"of this run takes it (policies {', '.join(policies)}; prefetchers {', '.join(prefetchers)}"
                          + (f"; strategies {', '.join(strategies)})" if placed else ")"))


CACHE_CHOICES = ("policy", "capacity", "scope", "split", "reset") + CACHE_PARAMS  # read only by a strategy with a cache


def check_read(given: set, configs: list[Config], strategy_read: bool = True) -> None:
    """A setting given (typed, not taken from a configuration file, which holds every setting when saved) that none
    of the runs ``configs`` reads is refused: it would change nothing the user sees. ``strategy_read`` False: the
    runs do not read the strategy (a hit-rate run, a plan), so the cache's settings are read whatever it is."""
    unread = [n for n in CACHE_CHOICES if n in given] if strategy_read else []
    strategies = list(dict.fromkeys(c.execution.strategy for c in configs))
    if unread and not any(STRATEGIES[s].cache for s in strategies):
        places = [option(p) for p in dict.fromkeys(STRATEGIES[s].places for s in strategies) if p]
        raise MoesimError(f"{', '.join(map(option, unread))}: strategy {', '.join(strategies)} keeps no expert cache, "
                          f"so nothing reads {'it' if len(unread) == 1 else 'them'}"
                          + (f" (it places experts: {', '.join(places)})" if places else ""))
    if strategy_read and "ssd" in given and all(c.cache.dram_capacity is None for c in configs):
        raise MoesimError(f"{option('ssd')}: with no {option('dram_capacity')} (the experts host RAM holds in front of "
                          "the SSD) every expert is in host RAM, so nothing reads the SSD")
    machines = {c.hardware.machine: c.hardware.force for c in configs}  # each's force
    unread = _threads_unread(strategies, machines) if strategy_read and "threads" in given else None
    if unread:
        raise MoesimError(f"{option('threads')}: {unread}")
    named = [ENGINES.get(c.execution.engine) for c in configs]  # an engine that runs its own kernel kind reads none
    if "kernel" in given and all(e is not None and e.kernel for e in named):
        raise MoesimError(f"{option('kernel')}: engine {', '.join(dict.fromkeys(e.name for e in named))} runs its own "
                          f"kind of expert kernel ({', '.join(sorted({e.kernel for e in named}))}), so nothing reads it")
    # (a link, a GPU memory: the hardware's)
    if "kernel" in given and all(_has_gpu(m, f) is False for m, f in machines.items()):
        raise MoesimError(f"{option('kernel')}: {' and '.join(machines)} {'has' if len(machines) == 1 else 'have'} no "
                          "GPU (every expert runs on the CPU), so nothing reads it")
    if "arrival_seed" in given and all(c.serve.arrivals == "burst" and c.serve.draft_tokens == 0
                                       and c.serve.requests is None for c in configs):
        raise MoesimError(f"{option('arrival_seed')}: {option('arrivals', 'burst')} puts every request at time 0, one "
                          "per sequence in order, and no run drafts tokens: nothing is drawn, so nothing reads it")
    if "acceptance" in given and all(c.serve.draft_tokens == 0 for c in configs):
        raise MoesimError(f"{option('acceptance')} is the chance a draft token is accepted, and "
                          f"{option('draft_tokens')} is 0: no run drafts any")


LOOKUP_UNREAD = CACHE_CHOICES + ("prefetch", "mode", "kernel")  # what a MoLE model's run never reads


def check_model_read(given: set, models: list[ModelSpec]) -> None:
    """A MoLE model's experts are lookup tables in host memory whose rows each step copies (MoLE eq. 14): a cache's,
    a prefetcher's or an expert kernel's setting given where every run's model is one is read by nothing."""
    unread = [n for n in LOOKUP_UNREAD if n in given]
    if unread and models and all(m.kind == "mole" for m in models):
        names = " and ".join(dict.fromkeys(m.name for m in models))
        raise MoesimError(f"{', '.join(map(option, unread))}: model {names} computes its experts as lookup tables "
                          "on the host, copied a row a step, and keeps no expert cache nor runs an expert kernel, so "
                          f"nothing reads {'it' if len(unread) == 1 else 'them'}")


def on_machine(config: Config, given, gpu: bool | None = None) -> Config:
    """``config`` where neither a strategy nor a cache's setting was given (``given``: the settings that were): on a
    machine without a GPU (``gpu``; default: its name's), llama.cpp's CPU build (``cpu-experts``, every expert on the
    CPU), as the default ``gpu-cache`` has no GPU to cache on. A cache's settings given keep gpu-cache, which such a
    machine refuses, naming the strategies it can run. Every reader of flat settings applies it: the command line,
    ``Config.build`` (and so a sweep's rows), the API's calls."""
    if "strategy" in given or any(k in CACHE_CHOICES + ("prefetch", "mode") for k in given):
        return config
    if (_has_gpu(config.hardware.machine, config.hardware.force) if gpu is None else gpu) is not False:
        return config
    return config.replace(strategy="cpu-experts")


def _has_gpu(machine: str, force: bool = False) -> bool | None:
    """Whether ``machine`` (taken with ``force``) has a GPU; None where it cannot be read (the run reports that)."""
    try:
        return get_hardware(machine, force=force).gpu is not None
    except (KeyError, MoesimError):
        return None


def _threads_unread(strategies: list[str], machines: dict) -> str | None:
    """Why threads given for runs of these strategies on these machines would change nothing: no strategy computes an
    expert on the host CPU and every machine (a name: its force) has a GPU (one without runs everything on its CPU).
    None where they are read, or where a name is unknown (the run reports it)."""
    if any(s not in STRATEGIES or STRATEGIES[s].cpu for s in strategies) or \
            not all(_has_gpu(m, f) for m, f in machines.items()):
        return None  # a machine without a GPU (or one not known) computes on its CPU
    computes = ", ".join(n for n, m in STRATEGIES.items() if m.cpu)
    return (f"strategy {', '.join(strategies)} computes no expert on the host CPU, so nothing reads it (the "
            f"strategies that do: {computes})")


def check_cache_read(given: set, configs: list[Config]) -> None:
    """A cache or prefetch setting given where every run listed leaves it unread is refused: a cache's with
    ``capacity`` 0 (``--capacity 0 --policy belady,lru`` gave two identical rows), ``mode`` with no prefetcher. The
    command line and a sweep's spec ask it; the API does not (a loop over capacities that include 0, or over
    prefetchers that include none, passes the same settings to each)."""
    unread = [n for n in CACHE_CHOICES if n in given and n != "capacity"]
    if unread and all(c.cache.capacity == 0 or (isinstance(c.cache.capacity, tuple) and not any(c.cache.capacity))
                      for c in configs):
        raise MoesimError(f"{', '.join(map(option, unread))}: {option('capacity', 0)} keeps no expert cache, so nothing "
                          f"reads {'it' if len(unread) == 1 else 'them'}")
    if "mode" in given and all(c.prefetch.prefetcher == "none" for c in configs):
        raise MoesimError(f"{option('mode')} says what follows a wrong prediction, and {option('prefetch', 'none')} "
                          "makes none, so nothing reads it")


def run_params(spec, given: dict) -> dict:
    """The parameters a policy, prefetcher or strategy runs with: its defaults, the values given, and the traces that
    name files loaded (each once per process, the last few kept)."""
    out = {**{k: p.default for k, p in spec.params.items()}, **given}
    for key, param in spec.params.items():
        if param.kind == "trace" and isinstance(out[key], (str, Path)):
            out[key] = load_cached_trace(str(out[key]))
    return out


def placement_of(config: Config, num_layers: int) -> np.ndarray:
    """int8 [L]: where ``config``'s strategy places each layer's experts (``moesim.sim.strategies``: CACHED, ON_GPU,
    ON_CPU), its ``auto`` sizes resolved."""
    strategy = get_strategy(config.execution.strategy)
    return strategy.placement(num_layers, run_params(strategy, config.execution.params))


@functools.lru_cache(maxsize=4)
def load_cached_trace(path: str):
    """A trace file, loaded once per process while it is among the last few asked for."""
    from moesim.tracegen.io import load_trace

    return load_trace(path)
