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
declared here and nowhere else: each section field is declared by a ``moesim.params.Param`` (``declare``: kind,
unit, bounds or choices, help), which judges its values (``_checked``: a ``SettingError`` names the setting), and
``DECLARED`` holds one ``Setting`` per name, the parameters included, from which every command's options are
generated (``moesim.cli.settings``). A policy's, prefetcher's or strategy's parameters are those its ``SPEC``
declares (a ``Param`` too); any other is an error, as is a key no section knows. A setting given where no run
reads it is refused by ``moesim.sim.reads``. ``auto`` values (capacity, a strategy's
``cpu_layers``) are resolved from memory when a run starts (``moesim.sim.memory``).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError, named
from moesim.files import atomic_output, check_output, read_toml
from moesim.params import AUTO, INT_MOST, Param, SettingError
from moesim.policies import DEFAULT_POLICY, POLICIES, get_admission, get_policy
from moesim.policies import admission as admissions
from moesim.policies.admission import ADMITS_ALL, composed, parts
from moesim.policies.prefetch import FETCHING, PREFETCHERS, get_prefetcher
from moesim.sim.engines import ENGINES, engine_named
from moesim.sim.hardware import LOCAL, get_hardware, is_file_name, with_parts
from moesim.sim.presets import CPUS, LINKS, SSDS, SYSTEMS
from moesim.sim.machine import NUMA_LAYOUTS, Hardware
from moesim.sim.strategies import STRATEGIES, get_strategy
from moesim.tracegen.model_files import is_model_file
from moesim.tracegen.models import BYTES_PER_PARAM, ModelSpec, model_for_trace

SCOPES = ("per-layer", "global")
SPLITS = ("uniform", "best")
SEMANTICS = ("step", "sequential")
MODES = ("fallback", "commit")
KERNELS = ("fused", "per-expert")
DTYPES = tuple(BYTES_PER_PARAM)


def declare(param: Param, flag: str | None = None):
    """A section field declared by its ``Param`` (kind, unit, bounds or choices, help), which ``_checked`` judges it
    by; ``flag``: the command line's option where it is not ``--`` plus the flat name with dashes."""
    return field(default=param.default, metadata={"param": param, "flag": flag})


def _checked(section, skip: tuple = ()) -> None:
    """Each field of a section (but ``skip``'s) judged by the ``Param`` it is declared with (its value as the run
    takes it: numpy's numbers become Python's), or a ``SettingError`` naming it: the one check of a section's values."""
    where = f"[{type(section).__name__.removesuffix('Config').lower()}]"
    for f in fields(section):
        if "param" in f.metadata and f.name not in skip:
            try:
                object.__setattr__(section, f.name, f.metadata["param"].check(getattr(section, f.name)))
            except MoesimError as exc:
                raise SettingError(_RENAMED.get((where[1:-1], f.name), f.name), str(exc), where, f.name) from None


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
            raise SettingError(key, str(exc), f"[{section}] {owner}'s") from None
    return out


@dataclass(frozen=True)
class ModelConfig:
    """``name``: a model preset or file (None: the trace's own model); ``dtype``: the experts' precision (None: a
    model file's own storage, else the trace's recorded expert bytes, else bf16); ``other_dtype``: every other
    weight's (attention, embeddings, shared experts: a GGUF or AWQ checkpoint quantises them too; None: a model
    file's, else the trace's, else bf16)."""

    name: str | None = declare(Param(None, "name", "Model preset (see 'moesim models'; default: the trace's model).",
                                     optional=True))
    dtype: str | None = declare(Param(None, "choice", f"Expert precision: {', '.join(DTYPES)} (default: a model "
                                      "file's own storage, else the trace's expert bytes, else bf16).",
                                      choices=DTYPES, optional=True))
    other_dtype: str | None = declare(Param(None, "choice", "Precision of every other weight (attention, embeddings, "
                                            "shared experts), as dtype (default: a model file's, else the trace's "
                                            "where the experts keep the trace's bytes, else bf16).", choices=DTYPES,
                                            optional=True))

    def __post_init__(self):
        for name in ("dtype", "other_dtype"):
            value = getattr(self, name)
            if isinstance(value, str) and value.lower() in DTYPES:  # as llama.cpp writes them too: Q4_K_M is q4_k_m
                object.__setattr__(self, name, value.lower())  # (one that is none is refused as written)
        _checked(self)

    def spec(self, meta) -> ModelSpec:
        """The model a trace with metadata ``meta`` is simulated on."""
        return model_for_trace(meta, self.name)


@dataclass(frozen=True)
class HardwareConfig:
    """``machine``: a preset (``moesim hardware``) or a hardware TOML file; ``link`` / ``ssd`` / ``cpu`` swap in
    presets; ``vram`` / ``ram``: the GPU's and the host's memory in GiB (None: the machine's); ``tensor_split``: a
    machine of several GPUs, the share of the layers each holds (None: ``moesim.sim.layer_split.balance``'s), or with
    ``split_mode`` tensor of every layer (``moesim.sim.tensor_split``); ``numa``: how the engine lays its threads
    and weights over several sockets (``moesim.sim.machine.NUMA_LAYOUTS``; ``auto``: the engine's own);
    ``force``: take numbers of the machine (or ``vram``, ``ram``) far past every real part's, which are refused
    otherwise as a likely unit slip (``moesim.sim.hardware.PLAUSIBLE``). ``force`` lets a run start and changes
    nothing it computes: a forced run's numbers are the unforced one's where that one runs, so ``config_id`` leaves
    it out (``UNHASHED``), and a result found or resumed without it is the same result."""

    machine: str = declare(Param("rtx4090", "name", "Hardware preset, TOML file (moesim hardware --template), or local "
                                                    "(this machine, detected)."))
    link: str | None = declare(Param(None, "choice", f"Swap the host link for a preset: {', '.join(LINKS)}.",
                                     choices=tuple(LINKS), optional=True))
    ssd: str | None = declare(Param(None, "choice", f"Add an SSD preset: {', '.join(SSDS)}.", choices=tuple(SSDS),
                                    optional=True))
    cpu: str | None = declare(Param(None, "choice", "Swap the host CPU for a preset, its RAM with it (see 'moesim "
                                                    "hardware'; --ram sets another).", choices=tuple(CPUS),
                                    optional=True))
    vram: float | None = declare(Param(None, "size", "GPU memory (default: the GPU's).", unit="GiB", optional=True))
    ram: float | None = declare(Param(None, "size", "Host RAM (default: the machine's).", unit="GiB", optional=True))
    threads: int | None = declare(Param(None, "count", "Threads the engine computes with on the CPU, as llama.cpp's -t "
                                                       "(default: the machine's, every core).", bounds=(1, INT_MOST),
                                        unit="threads", optional=True))
    numa: str = declare(Param(AUTO, "choice", "Several sockets: how the engine lays its CPU threads and weights over "
                                              "them: one-pool, one pool reading one socket's DRAM (llama.cpp's "
                                              "default); per-socket, a pool and a copy of the experts on each "
                                              "(kTransformers' archived local_chat built with USE_NUMA=1); "
                                              "distribute, each socket reading its share of one copy (llama.cpp "
                                              "--numa distribute, the page cache dropped first; kt-kernel, which "
                                              "splits each expert over the nodes); auto: the engine's own.",
                              choices=(AUTO, *NUMA_LAYOUTS)))
    tensor_split: tuple | None = declare(Param(None, "shares", "Several GPUs: each one's share of the layers, in "
                                                               "device order, as llama.cpp's -ts (3,1: three quarters "
                                                               "on the first; default: the split that fills each GPU "
                                                               "to the same share of its memory; split_mode tensor: of "
                                                               "every layer, default even).",
                                               optional=True))
    split_mode: str = declare(Param("layer", "choice", "Several GPUs: layer, whole layers on each (llama.cpp's "
                                                       "default); tensor, every layer split over them, its partial "
                                                       "results added twice a layer (llama.cpp -sm tensor, ik_llama.cpp "
                                                       "-sm graph).", choices=("layer", "tensor")))
    force: bool = declare(Param(False, "flag", "Take a machine whose numbers are far past every real part's (12288 GiB "
                                               "of GPU memory: MiB?), refused otherwise as a likely unit slip "
                                               "(docs/hardware.md)."))

    def __post_init__(self):
        _checked(self)
        if not is_file_name(self.machine) and self.machine.lower() != LOCAL and self.machine.lower() not in SYSTEMS:
            raise SettingError("hardware", f"must be a preset ({', '.join(SYSTEMS)}), a hardware TOML file or "
                                           f"{LOCAL}, got {self.machine!r}", "[hardware]", "machine")

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

    policy: str = declare(Param(DEFAULT_POLICY, "choice", f"Replacement policy: {', '.join(POLICIES)}.",
                                choices=tuple(POLICIES)))
    admission: str = declare(Param(ADMITS_ALL, "choice", "Which misses the cache keeps: all, as the policy does; gamma: "
                                                         "only a miss whose decayed request count reaches the Top-C "
                                                         "(MELINOE's γ admission), the policy choosing what it evicts.",
                                   choices=lambda: admissions.ADMISSIONS))
    capacity: int | str | tuple = declare(Param(4, "count", "GPU expert slots per layer (or in the pool with scope "
                                                            "global); 0: no expert cache; auto: as many as GPU memory "
                                                            "holds.", unit="experts", auto=True))
    scope: str = declare(Param("per-layer", "choice", "per-layer: C slots in every layer; global: one pool.",
                               choices=SCOPES))
    split: str = declare(Param("uniform", "choice", "uniform: C slots in every layer; best: the layers' slots shared "
                                                    "out the way that maximises the policy's hits on the trace "
                                                    "(per-layer scope; exact, from its hit rate at every capacity).",
                               choices=SPLITS))
    semantics: str = declare(Param("step", "choice", "step: a step's k experts arrive at once and are never evicted "
                                                     "for each other; sequential: one by one, a textbook cache.",
                                   choices=SEMANTICS))
    reset: bool = declare(Param(False, "flag", "Empty the cache at every new sequence (batch)."))
    dram_capacity: int | str | None = declare(Param(None, "count", "Experts host DRAM caches in front of the SSD (needs "
                                                                   "ssd; default: every expert in DRAM; auto: as many "
                                                                   "as host RAM holds beside everything else).",
                                                    unit="experts", auto=True, optional=True))
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        if isinstance(self.capacity, np.ndarray):  # numpy's: one number, or every layer's slots
            object.__setattr__(self, "capacity", self.capacity.tolist())
        listed = isinstance(self.capacity, (list, tuple))
        if listed:  # every layer's own slots: each a count, under per-layer scope
            object.__setattr__(self, "capacity", _layer_slots(self.capacity))
        _checked(self, skip=("capacity",) if listed else ())
        if listed and self.scope != "per-layer":
            raise SettingError("capacity", "per layer needs scope per-layer (a global pool has one size)", "[cache]")
        if self.split == "best" and self.scope != "per-layer":
            raise SettingError("split", "best shares slots out over the layers' own caches: it needs scope per-layer",
                               "[cache]")
        if self.admission != ADMITS_ALL and get_policy(self.policy).bypasses:
            raise SettingError("admission", f"{self.admission} goes in front of a policy that keeps every miss, and "
                                            f"{self.policy} decides what it keeps itself", "[cache]")
        object.__setattr__(self, "params", _params("cache", f"policy {self.composed}", self.params,
                                                   get_policy(self.composed)))

    @property
    def composed(self) -> str:
        """The policy as ``moesim.policies.get_policy`` names what runs (``composed``)."""
        return composed(self.policy, self.admission)

    def __hash__(self):
        return hash(_canonical(self))

    def slots(self, num_layers: int) -> np.ndarray:
        """int64 [partitions]: the slots of each layer (per-layer scope) or of the one pool (global),
        of a resolved capacity (not ``auto``)."""
        if isinstance(self.capacity, tuple):
            if len(self.capacity) != num_layers:
                raise SettingError("capacity", f"lists {len(self.capacity)} layers' slots, the trace has {num_layers} "
                                               "layers", "[cache]")
            return np.array(self.capacity, np.int64)
        return np.full(num_layers if self.scope == "per-layer" else 1, self.capacity, np.int64)


LAYER_SLOTS = Param(0, "count", "One layer's expert slots.", unit="experts")


def _layer_slots(values) -> tuple:
    """A capacity given per layer: a non-empty list of counts (numpy's become int)."""
    if not values:
        raise SettingError("capacity", "per layer must list every layer's slots, got []", "[cache]")
    try:
        return tuple(LAYER_SLOTS.check(v) for v in values)
    except MoesimError as exc:
        raise SettingError("capacity", f"per layer: each {exc}", "[cache]") from None


@dataclass(frozen=True)
class PrefetchConfig:
    """``prefetcher`` (``none``: fetch on demand only) and its ``params``; ``mode`` after a misprediction:
    ``fallback`` fetches the routed experts, ``commit`` runs the predicted ones (CommitMoE)."""

    prefetcher: str = declare(Param("none", "choice", f"Prefetcher: {', '.join(PREFETCHERS)}.",
                                    choices=tuple(PREFETCHERS)))
    mode: str = declare(Param("fallback", "choice", "After a misprediction: fallback (fetch the right experts) or "
                                                    "commit (run the predicted ones, CommitMoE).", choices=MODES))
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        _checked(self)
        prefetcher = get_prefetcher(self.prefetcher)
        if self.mode == "commit" and (prefetcher is None or prefetcher.kind != "next"):
            raise SettingError("mode", f"commit runs next-layer predictions; prefetcher '{self.prefetcher}' makes none "
                                       "(use oracle, speculative or history)", "[prefetch]")
        object.__setattr__(self, "params",
                           _params("prefetch", f"prefetcher {self.prefetcher}", self.params, prefetcher))

    def __hash__(self):
        return hash(_canonical(self))


@dataclass(frozen=True)
class ExecutionConfig:
    """``kernel``: ``fused`` (a layer's experts in one kernel once all are resident, vLLM) or
    ``per-expert`` (each as its weights land, Mixtral-offloading); ``strategy``: where experts run
    (``moesim.sim.strategies``: gpu-cache, cpu-experts, cpu-miss, hybrid, lowbit-miss) and its ``params``."""

    kernel: str = declare(Param("fused", "choice", "fused: a layer's experts in one kernel once all are on the GPU "
                                                   "(vLLM); per-expert: each as its weights land (Mixtral-offloading).",
                                choices=KERNELS))
    strategy: str = declare(Param("gpu-cache", "choice", "Where experts run: " + "; ".join(
        f"{name} ({strategy.summary}: {', '.join(e.name for e in ENGINES.values() if name in e.runs)})"
        for name, strategy in STRATEGIES.items()) + ".", choices=lambda: tuple(STRATEGIES)))
    engine: str = declare(Param(AUTO, "choice", "The engine the run is timed as (moesim engines): auto, the "
                                                "placement's operations with the figures of the first engine that "
                                                "runs it; an engine's name, that engine with its framework time "
                                                "learned from published points, as plan's rows are.",
                                choices=lambda: (AUTO, *ENGINES)))
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "engine", engine_named(self.engine))
        _checked(self)
        runs = [e.name for e in ENGINES.values() if self.strategy in e.runs]
        if self.engine != AUTO and self.engine not in runs:
            raise SettingError("engine", f"{self.engine} does not run strategy {self.strategy} (it runs "
                                         f"{', '.join(ENGINES[self.engine].runs)}; the engines that run "
                                         f"{self.strategy}: {', '.join(runs) or 'none'})", "[execution]")
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

    batch: int = declare(Param(1, "count", "Sequences decoded in lockstep.", bounds=(1, INT_MOST), unit="sequences"))
    context: int = declare(Param(0, "count", "KV tokens added to every sequence (a prompt the trace did not record, "
                                             "not computed).", unit="tokens"))
    prompt: int = declare(Param(0, "count", "A prompt of N tokens prefilled before each sequence the trace recorded "
                                            "without one (TTFT).", unit="tokens"))
    warmup: int = declare(Param(0, "count", "Batches run first and not measured (steady state).", unit="batches"))

    def __post_init__(self):
        _checked(self)


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

    rate: float | None = declare(Param(None, "size", "Requests per second (Poisson arrivals).", unit="requests/s",
                                       optional=True))
    arrivals: str = declare(Param("poisson", "name", "poisson (at rate), burst (every request at time 0), or a CSV or "
                                                     "Parquet file with a row per request: arrival_s (seconds) and "
                                                     "optionally seq (the trace sequence it serves)."))
    requests: int | None = declare(Param(None, "count", "Requests in the stream (default: one per trace sequence; more "
                                                        "reuse the sequences, shuffled).", bounds=(1, INT_MOST),
                                         optional=True))
    max_batch: int = declare(Param(8, "count", "Requests running at once (vLLM's max_num_seqs).", bounds=(1, INT_MOST),
                                   unit="requests"))
    max_batch_tokens: int = declare(Param(2048, "count", "Tokens per step (vLLM's max_num_batched_tokens).",
                                          bounds=(1, INT_MOST), unit="tokens"))
    chunked_prefill: bool = declare(Param(True, "flag", "Split a prompt across steps to fit the token budget."))
    draft_tokens: int = declare(Param(0, "count", "Speculative decoding: draft tokens verified per step (0: off).",
                                      unit="tokens"))
    acceptance: float = declare(Param(0.8, "size", "Speculative decoding: the chance each draft is accepted.",
                                      bounds=(0.0, 1.0)))
    arrival_seed: int = declare(Param(0, "seed", "Seed of the arrivals, the shuffles and the acceptances."))
    dynamic_kv: bool = declare(Param(False, "flag", "With capacity auto: the expert cache gets, step by step, the GPU "
                                                    "memory the running requests' KV cache leaves (else it keeps what "
                                                    "the KV cache of max_batch requests of the longest sequence "
                                                    "leaves)."))
    slo_ttft_s: float | None = declare(Param(None, "size", "TTFT target (reports the share of requests meeting every "
                                                           "target).", unit="s", optional=True), flag="--slo-ttft")
    slo_tpot_s: float | None = declare(Param(None, "size", "TPOT target.", unit="s", optional=True), flag="--slo-tpot")

    def __post_init__(self):
        _checked(self)
        if not self.arrivals.lower().endswith(ARRIVAL_FILES) and self.arrivals not in ARRIVALS:
            raise SettingError("arrivals", f"must be one of {', '.join(ARRIVALS)} or a CSV or Parquet file, got "
                                           f"{self.arrivals!r}", "[serve]")
        if self.max_batch_tokens < self.max_batch * (self.draft_tokens + 1):
            raise SettingError("max_batch_tokens", f"{self.max_batch_tokens} cannot hold a step of max_batch "
                                                   f"{self.max_batch} requests verifying {self.draft_tokens + 1} "
                                                   "position(s) each", "[serve]")


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
    """One setting under its flat name: where it lives (the ``Config`` section; a parameter's is its owner's), its
    declaration (``param``: kind, unit, bounds, help, default), the command line's option (``flag``) and, for a
    plug-in's parameter, the setting that owns it (``owner``: policy, prefetch or strategy; "" for a field)."""

    name: str
    section: str
    param: Param
    flag: str
    owner: str = ""

    kind = property(lambda self: self.param.parses)  # str, int, float or bool: what its text parses to
    default = property(lambda self: self.param.default)
    help = property(lambda self: self.param.help)
    unit = property(lambda self: self.param.unit)
    auto = property(lambda self: self.param.auto)  # it also takes "auto"

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
        meta = next(f for f in fields(SECTIONS[section]) if f.name == fname).metadata
        out[name] = Setting(name, section, meta["param"], meta["flag"] or f"--{name.replace('_', '-')}")
    for section, (owner, params) in PARAMS_OF.items():
        for name, param in params.items():
            out[name] = Setting(name, section, param, f"--{name.replace('_', '-')}", owner)
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
        if engine is not None and self.hardware.split_mode != "layer" and not engine.tensor_mode:
            raise SettingError("split_mode", f"tensor: {engine.name} has no split of every layer over GPUs; "
                                             f"{' and '.join(e.name for e in ENGINES.values() if e.tensor_mode)} have "
                                             "one", "[hardware]")
        numa = self.hardware.numa
        if engine is not None and numa not in (AUTO, *engine.layouts):
            raise SettingError("numa", f"{numa}: {engine.name} lays its threads out as {' or '.join(engine.layouts)}; "
                                       f"the engines that run {numa}: "
                                       + ", ".join(e.name for e in ENGINES.values() if numa in e.layouts), "[hardware]")
        if engine is not None and not engine.takes(self):  # an engine has the mechanism for some settings only
            others = [e.name for e in ENGINES.values() if self.execution.strategy in e.runs and e.takes(self)]
            what = (engine.takes.__doc__ or "").strip().splitlines()[0].rstrip(".").replace("``", "")
            raise SettingError("engine", f"{engine.name} does not run these settings ({what[:1].lower()}{what[1:]}); "
                                         f"{' or '.join(others) or 'no engine'} does", "[execution]")

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
        # a new policy (prefetcher, strategy) drops the old one's parameters, a new admission its own: what stays keeps
        # its parameters (an admission under a new policy, a policy under a new admission)
        for section, (setting, _) in OWNERS.items():
            current = getattr(getattr(self, section), SETTINGS[setting][1])
            new_owner = settings.get(setting, current) != current
            admission = settings.get("admission", self.cache.admission) if section == "cache" else None
            if new_owner or (section == "cache" and admission != self.cache.admission):
                known = admission in admissions.ADMISSIONS and admission != ADMITS_ALL  # else refused as the section is built
                kept = {*(get_admission(admission).params if known else ()),
                        *(() if new_owner else get_policy(current).params)}
                params[section] = {k: v for k, v in {**getattr(self, section).params, **params.get(section, {})}.items()
                                   if k in settings or k in kept}
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
HASHED_UNLESS = {"engine": AUTO, "tensor_split": None, "admission": ADMITS_ALL, "split_mode": "layer", "numa": AUTO}


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
    takes = {k for p in policies if parts(p)[0] in POLICIES for k in get_policy(p).params}
    takes |= {k for p in prefetchers if p in FETCHING for k in get_prefetcher(p).params}
    takes |= {k for p in strategies if p in STRATEGIES for k in STRATEGIES[p].params}
    unused = sorted(k for k in given if k not in takes)
    if unused:
        placed = list(strategies) != ["gpu-cache"] or any(k in STRATEGY_PARAMS for k in unused)
        owners = ", prefetcher or strategy" if placed else " or prefetcher"
        raise MoesimError(f"{', '.join(map(named, unused))}: no policy{owners} "
                          f"of this run takes it (policies {', '.join(policies)}; prefetchers {', '.join(prefetchers)}"
                          + (f"; strategies {', '.join(strategies)})" if placed else ")"))


CACHE_CHOICES = ("policy", "admission", "capacity", "scope", "split", "reset") + CACHE_PARAMS  # read only by a strategy with a cache


def on_machine(config: Config, given, gpu: bool | None = None) -> Config:
    """``config`` where neither a strategy nor a cache's setting was given (``given``: the settings that were): on a
    machine without a GPU (``gpu``; default: its name's), llama.cpp's CPU build (``cpu-experts``, every expert on the
    CPU), as the default ``gpu-cache`` has no GPU to cache on. A cache's settings given keep gpu-cache, which such a
    machine refuses, naming the strategies it can run. Every reader of flat settings applies it: the command line,
    ``Config.build`` (and so a sweep's rows), the API's calls."""
    if "strategy" in given or any(k in CACHE_CHOICES + ("prefetch", "mode") for k in given):
        return config
    if (has_gpu(config.hardware.machine, config.hardware.force) if gpu is None else gpu) is not False:
        return config
    return config.replace(strategy="cpu-experts")


def gpu_count(machine: str, force: bool = False) -> int | None:
    """The GPUs of ``machine`` (taken with ``force``); None where it cannot be read (the run reports that)."""
    try:
        return len(get_hardware(machine, force=force).gpus)
    except (KeyError, MoesimError):
        return None


def has_gpu(machine: str, force: bool = False) -> bool | None:
    """Whether ``machine`` (taken with ``force``) has a GPU; None where it cannot be read (the run reports that)."""
    count = gpu_count(machine, force)
    return None if count is None else count > 0


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
