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
line's options, a sweep spec's keys and the results' columns; they are defined here and nowhere
else. A policy's, prefetcher's or strategy's parameters are those its module lists in ``PARAMS``; any
other is an error, as is a key no section knows. ``auto`` values (capacity, a strategy's
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

from moesim.errors import MoesimError
from moesim.files import atomic_output, read_toml
from moesim.policies import POLICIES, get_policy
from moesim.policies.prefetch import PREFETCHERS, get_prefetcher
from moesim.sim.hardware import CPUS, LINKS, SSDS, SYSTEMS, Hardware, get_hardware, is_file_name
from moesim.sim.strategies import STRATEGIES, get_strategy
from moesim.tracegen.models import BYTES_PER_PARAM, ModelSpec, model_for_trace

SCOPES = ("per-layer", "global")
SPLITS = ("uniform", "best")
SEMANTICS = ("step", "sequential")
MODES = ("fallback", "commit")
KERNELS = ("fused", "per-expert")
DTYPES = tuple(BYTES_PER_PARAM)
PATH_PARAMS = ("ml_model", "pin_trace", "train_trace")  # parameters that name files
TRACE_PARAMS = ("pin_trace", "train_trace")  # ... which are traces, loaded when a run starts
AUTO = "auto"


def _choice(section: str, name: str, value, choices) -> None:
    if value not in choices:
        raise MoesimError(f"[{section}] unknown {name} {value!r}; choose from {', '.join(map(str, choices))}")


def _int(obj, section: str, name: str, low: int, optional: bool = False, auto: bool = False) -> None:
    """``obj.name`` must be an integer of at least ``low`` (or None when ``optional``, ``"auto"`` when
    ``auto``); numpy's become int."""
    value = getattr(obj, name)
    if (optional and value is None) or (auto and value == AUTO):
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise MoesimError(f"[{section}] {name} must be an integer{' or auto' if auto else ''}, got {value!r}")
    if value < low:
        raise MoesimError(f"[{section}] {name} must be at least {low}, got {value}")
    object.__setattr__(obj, name, int(value))


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


def _params(section: str, owner: str, value, module) -> dict:
    """A policy's, prefetcher's or strategy's parameters: only those its module lists, of its types."""
    if not isinstance(value, dict):
        raise MoesimError(f"[{section}] params must be a table, got {value!r}")
    takes = getattr(module, "PARAMS", {}) if module is not None else {}
    out = {}
    for key, v in sorted(value.items()):
        if key not in takes:
            raise MoesimError(f"[{section}] {owner} takes no parameter {key!r} "
                              f"({'it takes ' + ', '.join(takes) if takes else 'it takes none'})")
        choices = getattr(module, "PARAM_CHOICES", {}).get(key)
        if key in PATH_PARAMS:  # a file, read when the run starts
            kind, ok, v = "a file", isinstance(v, (str, Path)) and bool(str(v)), str(v)
        elif choices is not None:
            kind, ok = f"one of {', '.join(choices)}", v in choices
        elif key in getattr(module, "AUTO_PARAMS", ()):
            kind = "auto or an integer >= 0"
            ok = v == AUTO or isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0
            v = v if v == AUTO or not ok else int(v)
        elif isinstance(takes[key], float):
            kind, ok = "float", isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            v = float(v) if ok else v
        else:
            kind, ok = "int", isinstance(v, numbers.Integral) and not isinstance(v, bool)
            v = int(v) if ok else v
        if not ok:
            raise MoesimError(f"[{section}] {owner}'s {key} must be {kind}, got {v!r}")
        low, high = getattr(module, "PARAM_BOUNDS", {}).get(key, (None, None))
        if low is not None and v != AUTO and not low <= v <= high:
            raise MoesimError(f"[{section}] {owner}'s {key} must be in [{low}, {high}], got {v!r}")
        out[key] = v
    return out


@dataclass(frozen=True)
class ModelConfig:
    """``name``: a model preset (None: the trace's own model); ``dtype``: the experts' precision (None: the
    trace's recorded expert bytes, else bf16); ``other_dtype``: every other weight's (attention, embeddings,
    shared experts: a GGUF or AWQ checkpoint quantises them too; None: the trace's, else bf16)."""

    name: str | None = None
    dtype: str | None = None
    other_dtype: str | None = None

    def __post_init__(self):
        _name("model", "name", self.name)
        for name in ("dtype", "other_dtype"):
            if getattr(self, name) is not None:
                _choice("model", name, getattr(self, name), DTYPES)

    def spec(self, meta) -> ModelSpec:
        """The model a trace with metadata ``meta`` is simulated on."""
        return model_for_trace(meta, self.name)


@dataclass(frozen=True)
class HardwareConfig:
    """``machine``: a preset (``moesim hardware``) or a hardware TOML file; ``link`` / ``ssd`` / ``cpu`` swap in
    presets; ``vram`` / ``ram``: the GPU's and the host's memory in GiB (None: the machine's)."""

    machine: str = "rtx4090"
    link: str | None = None
    ssd: str | None = None
    cpu: str | None = None
    vram: float | None = None
    ram: float | None = None

    def __post_init__(self):
        _name("hardware", "machine", self.machine, optional=False)
        if not is_file_name(self.machine):
            _choice("hardware", "hardware", self.machine.lower(), SYSTEMS)
        if self.link is not None:
            _choice("hardware", "link", self.link, LINKS)
        if self.ssd is not None:
            _choice("hardware", "ssd", self.ssd, SSDS)
        if self.cpu is not None:
            _choice("hardware", "cpu", self.cpu, CPUS)
        _size(self, "hardware", "vram")
        _size(self, "hardware", "ram")

    def spec(self) -> Hardware:
        """The machine: the preset or file, with the link, SSD and CPU swapped in and the memory sizes set."""
        return get_hardware(self.machine, self.link, self.ssd, self.cpu, self.vram, self.ram)


@dataclass(frozen=True)
class CacheConfig:
    """The GPU's expert cache: ``capacity`` slots per layer (scope ``per-layer``) or in one pool
    (``global``), 0 for none, ``auto`` for as many as GPU memory holds, or a list of every layer's
    own slots (per-layer); ``split`` ``best`` shares the layers' slots (L·C, or the list's sum) out
    over them the way that maximises the policy's hits on the trace (``moesim.sim.budget``);
    ``semantics`` of a step's accesses (the hit-rate engine; the discrete-event engine serves a step
    at once); ``reset`` empties it at each sequence (batch); ``dram_capacity`` experts host DRAM
    caches in front of an SSD (None: every expert in DRAM); ``params`` of the policy."""

    policy: str = "lru"
    capacity: int | str | tuple = 4
    scope: str = "per-layer"
    split: str = "uniform"
    semantics: str = "step"
    reset: bool = False
    dram_capacity: int | None = None
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        _choice("cache", "policy", self.policy, POLICIES)
        _choice("cache", "scope", self.scope, SCOPES)
        _choice("cache", "split", self.split, SPLITS)
        if isinstance(self.capacity, (list, tuple)):
            _layer_slots(self)
        else:
            _int(self, "cache", "capacity", 0, auto=True)
        if self.split == "best" and self.scope != "per-layer":
            raise MoesimError("[cache] split best shares slots out over the layers' own caches: it needs scope "
                              "per-layer")
        _choice("cache", "semantics", self.semantics, SEMANTICS)
        if not isinstance(self.reset, bool):
            raise MoesimError(f"[cache] reset must be true or false, got {self.reset!r}")
        _int(self, "cache", "dram_capacity", 0, optional=True)
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
    """A capacity given per layer: whole numbers >= 0 (numpy's become int), under per-layer scope."""
    values = tuple(cache.capacity)
    if not values or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0 for v in values):
        raise MoesimError(f"[cache] a capacity per layer is a list of whole numbers >= 0, got {list(values)!r}")
    if cache.scope != "per-layer":
        raise MoesimError("[cache] a capacity per layer needs scope per-layer (a global pool has one size)")
    object.__setattr__(cache, "capacity", tuple(int(v) for v in values))


@dataclass(frozen=True)
class PrefetchConfig:
    """``prefetcher`` (``none``: fetch on demand only) and its ``params``; ``mode`` after a misprediction:
    ``fallback`` fetches the routed experts, ``commit`` runs the predicted ones (CommitMoE)."""

    prefetcher: str = "none"
    mode: str = "fallback"
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        _choice("prefetch", "prefetcher", self.prefetcher, PREFETCHERS)
        _choice("prefetch", "mode", self.mode, MODES)
        module = get_prefetcher(self.prefetcher)
        if self.mode == "commit" and (module is None or module.KIND != "next"):
            raise MoesimError(f"[prefetch] mode commit runs next-layer predictions; prefetcher '{self.prefetcher}' "
                              "makes none (use oracle, speculative or history)")
        object.__setattr__(self, "params", _params("prefetch", f"prefetcher {self.prefetcher}", self.params, module))

    def __hash__(self):
        return hash(_canonical(self))


@dataclass(frozen=True)
class ExecutionConfig:
    """``kernel``: ``fused`` (a layer's experts in one kernel once all are resident, vLLM) or
    ``per-expert`` (each as its weights land, Mixtral-offloading); ``strategy``: where experts run
    (``moesim.sim.strategies``: gpu-cache, cpu-experts, cpu-miss, hybrid, lowbit-miss) and its ``params``."""

    kernel: str = "fused"
    strategy: str = "gpu-cache"
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        _choice("execution", "kernel kind", self.kernel, KERNELS)
        _choice("execution", "strategy", self.strategy, STRATEGIES)
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

    batch: int = 1
    context: int = 0
    prompt: int = 0
    warmup: int = 0

    def __post_init__(self):
        _int(self, "workload", "batch", 1)
        _int(self, "workload", "context", 0)
        _int(self, "workload", "prompt", 0)
        _int(self, "workload", "warmup", 0)


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

    rate: float | None = None
    arrivals: str = "poisson"
    requests: int | None = None
    max_batch: int = 8
    max_batch_tokens: int = 2048
    chunked_prefill: bool = True
    draft_tokens: int = 0
    acceptance: float = 0.8
    arrival_seed: int = 0
    dynamic_kv: bool = False
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None

    def __post_init__(self):
        if not (isinstance(self.arrivals, str) and self.arrivals.lower().endswith(ARRIVAL_FILES)):
            _choice("serve", "arrivals", self.arrivals, ARRIVALS + tuple(f"a {s} file" for s in ARRIVAL_FILES))
        _size(self, "serve", "rate", "a rate in requests/s")
        _int(self, "serve", "requests", 1, optional=True)
        _int(self, "serve", "max_batch", 1)
        _int(self, "serve", "max_batch_tokens", 1)
        for name in ("chunked_prefill", "dynamic_kv"):
            if not isinstance(getattr(self, name), bool):
                raise MoesimError(f"[serve] {name} must be true or false, got {getattr(self, name)!r}")
        _int(self, "serve", "draft_tokens", 0)
        _size(self, "serve", "acceptance", "a probability", 1.0)
        _int(self, "serve", "arrival_seed", 0)
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
CACHE_PARAMS = tuple(dict.fromkeys(k for p in POLICIES for k in getattr(get_policy(p), "PARAMS", {})))
PREFETCH_PARAMS = tuple(dict.fromkeys(k for p in PREFETCHERS if p != "none"
                                      for k in getattr(get_prefetcher(p), "PARAMS", {})))
STRATEGY_PARAMS = tuple(dict.fromkeys(k for m in STRATEGIES.values() for k in m.PARAMS))
OWNERS = {"cache": ("policy", CACHE_PARAMS), "prefetch": ("prefetch", PREFETCH_PARAMS),
          "execution": ("strategy", STRATEGY_PARAMS)}  # section -> (the setting that owns its params, their names)
SERVE_SETTINGS = tuple(k for k, (s, _) in SETTINGS.items() if s == "serve")
NOT_SERVED = ("batch", "warmup", "reset")  # settings a served stream refuses (it forms its batches, shares its cache)
HITRATE_SETTINGS = tuple(k for k, (s, _) in SETTINGS.items() if s == "cache" and k != "dram_capacity") + CACHE_PARAMS


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

    @classmethod
    def build(cls, **settings) -> Config:
        """A configuration from flat settings (``policy="lru", capacity=4, gamma=0.9, ...``); the rest default.

        >>> Config.build(policy="gamma", gamma=0.8, capacity=4).cache.params
        {'gamma': 0.8}
        """
        return cls().replace(**settings)

    def replace(self, **settings) -> Config:
        """This configuration with the flat settings given changed (a parameter must suit its policy,
        prefetcher or strategy)."""
        parts = {name: {} for name in SECTIONS}
        params = {section: dict(getattr(self, section).params) for section in OWNERS}
        for key, value in settings.items():
            owner = next((section for section, (_, names) in OWNERS.items() if key in names), None)
            if key in SETTINGS:
                section, name = SETTINGS[key]
                parts[section][name] = value
            elif owner is not None:
                params[owner][key] = value
            else:
                raise MoesimError(f"unknown setting {key!r} (known: {', '.join(SETTINGS)}, "
                                  f"{', '.join(CACHE_PARAMS + PREFETCH_PARAMS + STRATEGY_PARAMS)})")
        # a new policy (prefetcher, strategy) drops the old one's parameters
        for section, (setting, _) in OWNERS.items():
            current = getattr(getattr(self, section), SETTINGS[setting][1])
            if settings.get(setting, current) != current:
                params[section] = {k: v for k, v in params[section].items() if k in settings}
            parts[section]["params"] = params[section]
        return Config(**{name: replace(getattr(self, name), **parts[name]) for name in SECTIONS})

    def flat(self) -> dict:
        """Every setting under its flat name, the policy's and prefetcher's parameters included."""
        out = {key: getattr(getattr(self, s), f) for key, (s, f) in SETTINGS.items()}
        return {**out, **self.cache.params, **self.prefetch.params, **self.execution.params}

    def to_toml(self, path: str | Path) -> None:
        """Write the sections as TOML tables (unset settings left out), atomically."""
        lines = []
        for name in SECTIONS:
            values = {k: v for k, v in asdict(getattr(self, name)).items() if v is not None and k != "params"}
            params = getattr(getattr(self, name), "params", {})
            lines.append(f"[{name}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
            if params:
                lines.append(f"params = {{ {', '.join(f'{k} = {_toml_value(v)}' for k, v in params.items())} }}")
            lines.append("")
        with atomic_output(path) as tmp:
            Path(tmp).write_text("\n".join(lines))

    @classmethod
    def from_toml(cls, path: str | Path) -> Config:
        """A configuration file's sections (every one optional); errors name the file."""
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


def config_id(kind: str, trace: str, config: Config | dict) -> str:
    """A short stable hash of a run: its kind, its trace and every setting."""
    flat = config.flat() if isinstance(config, Config) else config
    return hashlib.sha1(json.dumps([kind, trace, flat], sort_keys=True, default=str).encode()).hexdigest()[:16]


def params_for(policy: str, given: dict) -> dict:
    """Of parameters given for several policies at once (a command line's ``--gamma``), those ``policy`` takes."""
    takes = getattr(get_policy(policy), "PARAMS", {})
    return {k: v for k, v in given.items() if k in takes}


def check_params_used(policies: list[str], given: dict, prefetchers: list[str] = ("none",),
                      strategies: list[str] = ("gpu-cache",)) -> None:
    """A parameter that none of ``policies`` (nor of the prefetchers or strategies) takes was given by mistake."""
    takes = {k for p in policies if p in POLICIES for k in getattr(get_policy(p), "PARAMS", {})}
    takes |= {k for p in prefetchers if p in PREFETCHERS for k in getattr(get_prefetcher(p), "PARAMS", {})}
    takes |= {k for p in strategies if p in STRATEGIES for k in STRATEGIES[p].PARAMS}
    unused = sorted(k for k in given if k not in takes)
    if unused:
        placed = list(strategies) != ["gpu-cache"]
        raise MoesimError(f"{', '.join(unused)}: no policy{', prefetcher or strategy' if placed else ' or prefetcher'} "
                          f"of this run takes it (policies {', '.join(policies)}; prefetchers {', '.join(prefetchers)}"
                          + (f"; strategies {', '.join(strategies)})" if placed else ")"))


def module_params(module, given: dict) -> dict:
    """The parameters a policy or prefetcher module runs with: its defaults (``PARAMS``), the values given,
    and the traces that name files loaded (each once per process, the last few kept)."""
    out = {**getattr(module, "PARAMS", {}), **given}
    for key in TRACE_PARAMS:
        if isinstance(out.get(key), (str, Path)):
            out[key] = load_cached_trace(str(out[key]))
    return out


@functools.lru_cache(maxsize=4)
def load_cached_trace(path: str):
    """A trace file, loaded once per process while it is among the last few asked for."""
    from moesim.tracegen.io import load_trace

    return load_trace(path)
