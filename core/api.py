"""The public API, for notebooks and scripts: ``import moesim`` gives every name here. The command line is
a client of it: every command that runs a simulation builds it through these functions.

Settings are the flat names of ``moesim.Config`` (``policy``, ``capacity``, ``prefetch``, ``gamma``, ...),
the same as the command line's options and a sweep spec's keys (declared once, in
``moesim.sim.config.DECLARED``); pass them as keywords, or pass a whole ``Config`` (``config=``) and
change some of its settings with keywords. Each function takes the settings its kind of run reads
(``moesim.sim.config.RUN_SETTINGS``) and refuses the others. Where a function takes a trace, it takes a ``Trace``
or a trace file's path (``bundled``: the shipped one).
"""

from __future__ import annotations

import inspect
import numbers
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from moesim.errors import MoesimError, argument, whole
from moesim.files import check_output
from moesim.frames import Drawn, Table, from_pandas, is_pandas
from moesim.sim.config import CACHE_PARAMS, RUN_SETTINGS, SERVE_DEFAULTS, Config, on_machine
from moesim.sim.reads import AUDITED, refuse_unread
from moesim.sim.des import DesResult, simulate_des
from moesim.sim.hardware import check_hardware
from moesim.sim.machine import Hardware
from moesim.sim.hits import HitRate
from moesim.tracegen.model_spec import check_model
from moesim.tracegen.models import ModelSpec, check_fits_trace
from moesim.tracegen.synth import Locality
from moesim.tracegen.trace import Trace

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl


def load_trace(path: str | Path) -> Trace:
    """A trace file (Parquet) as dense arrays.

    >>> moesim.load_trace(moesim.bundled_trace()).meta.model
    'mixtral-8x7b'
    """
    from moesim.tracegen.io import load_trace as load

    return load(path)


def write_trace(trace: Trace, path: str | Path, *, force: bool = False) -> None:
    """Write a trace file (Parquet, atomically); an existing file is refused unless ``force``.

    >>> moesim.write_trace(trace.select([1]), "second-sequence.parquet")
    """
    from moesim.tracegen.io import write_trace as write

    argument(trace, "trace", "a Trace (moesim.load_trace)", isinstance(trace, Trace))
    write(trace, check_output(_path(path, "path"), "trace", force=_yes_no(force, "force"), suffixes=(".parquet",)))


def synth_trace(layers: int, experts: int, top_k: int, sequences: int, tokens: int, seed: int = 0,
                locality: Locality | None = None, prompt_tokens: int = 0, model: str | None = None) -> Trace:
    """A synthetic trace with controlled locality (``Locality``: popularity skew per layer and per sequence,
    reuse, cross-layer correlation); ``model`` names a preset whose dimensions it takes on.

    >>> moesim.synth_trace(16, 64, 8, sequences=2, tokens=32, seed=1, model="olmoe-1b-7b").experts.shape
    (64, 16, 8)
    """
    from moesim.tracegen.models import get_model
    from moesim.tracegen.synth import synth_trace as synth

    meta = None
    if model is not None:
        spec = get_model(model)
        if (layers, experts, top_k) != (spec.num_layers, spec.num_experts, spec.top_k):
            raise MoesimError(f"{spec.name} has {spec.num_layers} layers, {spec.num_experts} experts and top-"
                              f"{spec.top_k}; a trace of it cannot have {layers}, {experts} and top-{top_k}")
        meta = spec.trace_meta()
    argument(locality, "locality", "a moesim.Locality or None", locality is None or isinstance(locality, Locality))
    return synth(layers, experts, top_k, sequences, tokens, seed, locality or Locality(), prompt_tokens,
                 model or "synthetic", meta)


def train_ml_ffn(trace: Trace, out: str | Path, per_layer: bool = False, **options) -> dict:
    """Train FlashMoE's ML-FFN eviction model on ``trace`` and save it to ``out`` (the ``ml_model`` of policy
    ``ml-ffn``); ``options`` are ``moesim.policies.ml_ffn_train.train``'s (``horizon``, ``val_fraction``, ``epochs``,
    ``patience``, ``batch``, ``seed``). Returns the training log
    (epochs, losses, the train and validation sequences). Needs torch.

    >>> log = moesim.train_ml_ffn(trace, "ffn.npz", val_fraction=0.5, epochs=5)
    >>> log["val_sequences"]
    [1]
    """
    from moesim.policies.ml_ffn_train import save_model, train

    takes = [n for n, p in inspect.signature(train).parameters.items() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise MoesimError(f"{', '.join(unknown)}: train_ml_ffn takes {', '.join(takes)}")
    out = check_output(_path(out, "out"), "model", suffixes=(".npz",))
    arrays, log = train(_trace(trace), _yes_no(per_layer, "per_layer"), **options)
    save_model(arrays, out)
    return log


def train_prefetcher(trace: Trace, out: str | Path, *, val_fraction: float = 0.2, c: float = 1.0) -> dict:
    """Train the learned prefetcher (a logistic regression per layer and expert, scikit-learn) on ``trace``'s first
    sequences and save it to ``out`` (the ``prefetch_model`` of prefetcher ``learned``); the last ``val_fraction`` of
    the sequences are held out. Returns the log: the train and validation sequences, what the features hold, and
    the held-out precision and recall (mean and per layer) of the model and of ``history`` trained alike
    (``moesim.policies.prefetch.learned_train``). Needs scikit-learn.

    >>> log = moesim.train_prefetcher(trace, "prefetcher.npz", val_fraction=0.5)
    >>> log["val_sequences"]
    [1]
    """
    from moesim.policies.ml_ffn_train import save_model
    from moesim.policies.prefetch.learned_train import train

    out = check_output(_path(out, "out"), "model", suffixes=(".npz",))
    arrays, log = train(_trace(trace), val_fraction=val_fraction, c=c)
    save_model(arrays, out)
    return log


def bundled_trace() -> Path:
    """The path of the real Mixtral-8x7B routing trace shipped with moesim (2 GSM8K sequences, 244 tokens).

    >>> moesim.bundled_trace().name
    'mixtral-8x7b-gsm8k.parquet'
    """
    from moesim.tracegen.trace import bundled_trace_path

    return bundled_trace_path()


def hitrate(trace: Trace, policy: str | None = None, capacity=None, scope: str | None = None,
            semantics: str | None = None, reset: bool | None = None, *, config: Config | None = None,
            log_evictions: int = 0, **settings) -> HitRate:
    """Exact hits of a replacement policy on a trace: ``capacity`` experts per layer (or in one pool,
    ``scope="global"``); the other settings are a hit-rate run's (``split``, the policy's parameters:
    ``gamma``, ``seed``, ``ml_model``, ``pin_trace``). The five named settings, None, are ``config``'s
    (default: the defaults).

    >>> moesim.hitrate(trace, "belady", 4).hit_rate
    0.7329...
    """
    from moesim.sim.hitrate import simulate as run

    argument(log_evictions, "log_evictions", "a whole number of evictions to keep, 0 or more", whole(log_evictions)
              and log_evictions >= 0)
    trace = _trace(trace)
    cache = _configured(config, "hitrate", settings, policy=policy, capacity=capacity, scope=scope,
                        semantics=semantics, reset=reset).cache
    # a run evicts at most once an access: a log kept longer would stay empty (and its array could not be allocated)
    return run(trace, cache, min(int(log_evictions), max(trace.accesses, 1)))


def mrc(trace: Trace, policy: str | None = None, scope: str | None = None, semantics: str | None = None, *,
        capacities=None, config: Config | None = None, **settings) -> Table:
    """A policy's exact hits at every capacity (or at ``capacities``): one ``HitRate`` each, equal to
    ``hitrate`` at that capacity, in a list that is also a table (``.to_polars()``, ``.to_pandas()``: a row each;
    ``moesim.frames``); a stack algorithm in one pass (``moesim.sim.mrc``). The settings are
    ``hitrate``'s but ``capacity`` and ``split``, refused (every layer runs each capacity; ``best_split`` splits
    slots from a curve); ``capacities="all"``: every one, however many.

    >>> [round(r.hit_rate, 4) for r in moesim.mrc(trace, "lru", capacities=[2, 4, 8])]
    [0.3425, 0.6012, 0.9836]
    """
    from moesim.sim.mrc import curve

    if "capacity" in settings:
        given = settings["capacity"]
        raise MoesimError("capacity: mrc runs every capacity (or those in capacities=[...]), so nothing reads it"
                          + (f"; pass capacities=[{int(given)}]" if isinstance(given, numbers.Integral) else ""))
    if "split" in settings:
        raise MoesimError("split: mrc runs each capacity in every layer, so nothing reads it; best_split(trace, "
                          "budget, curve=...) splits slots over the layers from a curve")
    if capacities is not None and not (isinstance(capacities, str) and capacities == "all"):
        capacities = _runs("capacities", capacities, 'or "all"')
    return Table(curve(_trace(trace), _configured(config, "hitrate", settings, policy=policy, scope=scope,
                                                 semantics=semantics).cache, capacities))


def best_split(trace: Trace, budget: int, policy: str | None = None, semantics: str | None = None, *,
               config: Config | None = None, curve: list[HitRate] | None = None, **settings):
    """The split of ``budget`` expert slots over the layers (per-layer caches) that maximises ``policy``'s
    hits, from its per-layer curves, with the uniform split's hits beside it (``moesim.sim.budget``).
    The settings are ``hitrate``'s; ``curve``: the policy's hits at every capacity where ``mrc`` already
    gave them.

    >>> moesim.best_split(trace, 96, "lru").slots[:4]
    [2, 2, 2, 3]
    """
    from moesim.sim.budget import allocate, best_split as split, check_budget
    from moesim.sim.mrc import hits_table

    for name in ("capacity", "split"):
        if name in settings:
            raise MoesimError(f"{name}: best_split shares budget slots out over per-layer caches, so nothing reads it")
    trace = _trace(trace)
    cache = _configured(config, "hitrate", settings, policy=policy, semantics=semantics).cache
    if cache.scope != "per-layer":
        raise MoesimError(f"scope {cache.scope!r}: best_split shares budget slots out over per-layer caches; a global "
                          "pool has no layers to share them over")
    if curve is None:
        return split(trace, cache, budget)
    # the curve is compared with what was asked: the keywords, and what a configuration sets (not its defaults)
    unset, base = Config().cache, _config(config).cache
    asked = {name: given if given is not None else (getattr(base, name) if getattr(base, name) != getattr(unset, name)
                                                    else None)
             for name, given in (("policy", policy), ("semantics", semantics))}
    if asked["policy"] is not None or "admission" in settings or base.admission != unset.admission:
        asked["policy"] = cache.composed  # a policy behind an admission: its curve is the composition's
    _check_curve(curve, trace, asked["policy"], asked["semantics"])
    check_budget(trace, replace(cache, semantics=curve[0].semantics), budget)  # the curve's own smallest capacity
    return allocate(hits_table(curve), budget, min(r.capacity for r in curve), curve[0].accesses)


def _check_curve(curve, trace: Trace, policy: str | None, semantics: str | None) -> None:
    """A curve given to ``best_split``: ``mrc``'s of this trace, per-layer, of one policy and semantics, the ones
    asked where asked (the curve's hits are what the split reads)."""
    if isinstance(curve, (str, bytes)) or not isinstance(curve, (list, tuple)) or not curve or \
            not all(isinstance(r, HitRate) for r in curve):
        raise MoesimError(f"curve must be mrc's list of HitRate (mrc(trace, policy)), got {type(curve).__name__}"
                          + (" (empty)" if isinstance(curve, (list, tuple)) and not curve else ""))
    first = curve[0]
    for r in curve:
        if (r.policy, r.semantics, r.scope) != (first.policy, first.semantics, first.scope):
            raise MoesimError("curve mixes runs of more than one policy, semantics or scope: give one mrc's list")
    if first.scope != "per-layer" or len(first.per_layer_hits) != trace.meta.num_layers or \
            first.accesses != trace.accesses:
        raise MoesimError(f"curve is not this trace's per-layer curve ({first.scope}, {first.accesses} accesses; the "
                          f"trace has {trace.meta.num_layers} layers and {trace.accesses} accesses)")
    for asked, has, name in ((policy, first.policy, "policy"), (semantics, first.semantics, "semantics")):
        if asked is not None and asked != has:
            raise MoesimError(f"{name} {asked!r}: the curve's {name} is {has!r}; leave {name} out or give the curve of "
                              f"{asked!r}")


def simulate(trace: Trace, config: Config | None = None, *, model: str | ModelSpec | None = None,
             hardware: str | Hardware | None = None, decisions: bool = False, **settings) -> DesResult:
    """Time per output token: the discrete-event simulation of decoding ``trace``, under ``config`` with
    the flat ``settings`` changed, and the GPU memory and host RAM it needs (a configuration that does not
    fit is a ``MoesimError``). ``model`` and ``hardware`` are preset names (or a hardware TOML file), or
    objects built in code.

    >>> r = moesim.simulate(trace, policy="lru", capacity="auto", hardware="rtx4090", dtype="int4", prefetch="oracle")
    >>> r.capacity, round(r.tpot_s * 1e3, 1), round(r.tokens_per_s, 2), round(r.hit_rate, 4), round(r.vram_gb, 1)
    (7, 31.7, 31.56, 0.9999, 23.0)
    """
    trace, config, objects = _run_inputs(trace, config, "des", model, hardware, settings)
    return simulate_des(trace, config, decisions=_yes_no(decisions, "decisions"), **objects)


def serve(trace: Trace, config: Config | None = None, *, model: str | ModelSpec | None = None,
          hardware: str | Hardware | None = None, **settings):
    """A served stream: ``trace``'s sequences as requests arriving over time (``rate``, ``requests``, ...: the
    ``serve`` settings), batched continuously (``max_batch``, ``max_batch_tokens``, ``chunked_prefill``) and
    run by the discrete-event simulator under ``config`` with ``settings`` changed (without a ``config``, capacity
    ``auto`` unless given, as on the command line). The result's ``summary``
    holds TTFT, TPOT and latency percentiles, throughput and the hit rate; ``requests`` one row per request;
    ``by_batch()`` the hit rate by running batch (``moesim.sim.serve``).

    >>> s = moesim.serve(trace, rate=0.5, requests=8, hardware="rtx4090", dtype="q4_k", capacity="auto")
    >>> round(s.summary["tpot_s"] * 1e3, 1), round(s.summary["tokens_per_s"], 2), s.summary["capacity"]
    (178.1, 29.06, 6)
    """
    from moesim.sim.serve import simulate_serve

    trace, config, objects = _run_inputs(trace, config, "serve", model, hardware, settings)
    return simulate_serve(trace, config, **objects)


def run_replay(trace: Trace, config: Config | None = None, *, backend: str = "cpu",
               hardware: str | Hardware | None = None, layers: int | None = None, scale: float = 1.0,
               workdir: str | Path | None = None, model: str | ModelSpec | None = None, **settings):
    """The simulator's decisions for ``trace`` under ``config`` executed with real reads and compute (``backend``
    ``cpu`` or ``cuda``) or on the simulator's own durations (``virtual``), the model cut to its first ``layers``
    layers and its widths scaled by ``scale``; measured against simulated TPOT (``moesim.replay.run``). The settings
    are ``simulate``'s, and the virtual backend reads each as it does (its TPOT is ``simulate``'s). A real backend
    simulates ``hardware``, a calibrated hardware file of this machine, or calibrates it first (None), and computes
    in its own format: it refuses ``dtype``, ``other_dtype``, ``link``, ``ssd``, ``cpu``, ``vram``, ``ram`` and
    ``threads`` (``moesim.replay.run.check_given``). (``moesim.replay`` is the subpackage, hence the name.)

    >>> r = moesim.run_replay(trace, backend="virtual", capacity=4, policy="lru", dtype="q4_k")
    >>> r.tpot_s == r.sim_tpot_s
    True
    """
    from moesim.replay.prepare import prepare
    from moesim.replay.run import check_given, replay as run

    check_given(set(settings), backend)
    config, objects = _with_objects(config, "des", model, None, settings)  # RUN_SETTINGS: a replay's are a run's
    trace, spec, hw = prepare(_trace(trace), config, backend, hardware, layers, scale, workdir, objects.get("model"))
    return run(trace, config, hw, backend, layers, scale, workdir, model=spec)


def validate(trace: Trace, config: Config | None = None, *, policies=None, capacities=None,
             cpu_layers=(0,), backend: str = "cpu", hardware: str | Hardware | None = None, layers: int | None = None,
             scale: float = 1.0, workdir: str | Path | None = None, model: str | ModelSpec | None = None,
             **settings) -> Table:
    """``run_replay`` of every policy at every capacity (or, for a strategy that places experts without a cache, at
    every number of ``cpu_layers``): one row each with simulated and measured TPOT, the error and the
    speedups over the first of its group (``moesim.replay.validate``). Each of the three is a list (``policies`` one
    policy's name too; default lru and belady, capacity 4, a cache's runs, refused for a strategy that places
    layers), not empty, no value twice; the settings are ``run_replay``'s but ``policy`` and ``capacity`` (the lists
    replace them), and a policy's parameter (``gamma=0.5``) goes to each listed policy that takes it.

    >>> rows = moesim.validate(trace, backend="virtual", policies=["lru", "belady"], capacities=[4], dtype="q4_k")
    >>> [r["error_pct"] == 0 for r in rows]
    [True, True]
    """
    from moesim.replay.prepare import prepare
    from moesim.replay.run import check_given
    from moesim.replay.validate import run_groups, validate as run

    listed = [name for name, value in (("policies", policies), ("capacities", capacities)) if value is not None]
    policies = _runs("policies", ("lru", "belady") if policies is None else policies, "or one policy's name", one=str)
    capacities = _runs("capacities", (4,) if capacities is None else capacities)
    cpu_layers = _runs("cpu_layers", cpu_layers)
    for one, each in (("policy", "policies"), ("capacity", "capacities")):
        if one in settings:  # the lists replace them: one of them would be read by no run
            raise MoesimError(f"{one}: validate runs each of {each}=[...]; pass {each}=[{settings[one]!r}]")
    params = {k: settings.pop(k) for k in list(settings) if k in CACHE_PARAMS}  # each given to the policies taking it
    check_given(set(settings), backend)
    config, objects = _with_objects(config, "des", model, None, settings)  # RUN_SETTINGS: a replay's are a run's
    run_groups(config, policies, capacities, cpu_layers, params, listed)  # a bad one refused before calibrating
    numbers_of = [c for c in capacities if c != "auto"]  # the buffers a real backend's check sizes: the most slots
    most = max(numbers_of, key=lambda c: max(c) if isinstance(c, (list, tuple)) else c, default="auto")  # of a layer
    trace, spec, hw = prepare(_trace(trace), config.replace(capacity=most), backend, hardware, layers, scale, workdir,
                              objects.get("model"))
    return Table(run(trace, config, hw, policies, capacities, backend, layers, scale, workdir, model=spec,
                     cpu_layers=cpu_layers, params=params))


def _runs(name: str, values, other: str = "", one: type | None = None) -> list:
    """A function's list argument ``name``, one run per value (``validate``'s policies and capacities, ``mrc``'s
    capacities): a list, tuple or array, none empty, no value twice (it would run the same run twice), or one value
    of type ``one`` (a policy's name: iterated, a string gives its letters). ``other`` says what else it takes."""
    if one is not None and isinstance(values, one):
        return [values]
    if isinstance(values, (str, bytes, dict, set, frozenset)) or not hasattr(values, "__iter__"):
        example = f" ({name}=[{values!r}])" if one is None and isinstance(values, numbers.Real) else ""
        raise MoesimError(f"{name} must be a list{' ' + other if other else ''}{example}, got "
                          f"{type(values).__name__} {values!r}")
    values = [v.item() if hasattr(v, "item") else v for v in values]  # numpy's as Python's
    if not values:
        raise MoesimError(f"{name} is empty: give one value or more")
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise MoesimError(f"{name}: {twice!r} listed twice; each value is one run")
    return values


def _trace(trace) -> Trace:
    """A function's trace: a ``Trace``, or a trace file's path, loaded."""
    if isinstance(trace, Trace):
        return trace
    return load_trace(argument(trace, "trace", "a Trace (moesim.load_trace) or a trace file's path",
                                isinstance(trace, (str, Path))))


def _config(config) -> Config:
    """A function's ``config``: a ``Config``, or None for the defaults. A file's path is refused, with the way to
    load it: a function that read it would hide which file its settings came from."""
    if config is None:
        return Config()
    if isinstance(config, Config):
        return config
    hint = " (load a file with moesim.Config.from_toml(path))" if isinstance(config, (str, os.PathLike)) else ""
    raise MoesimError(f"config must be a moesim.Config, got {type(config).__name__}{hint}")


def _yes_no(value, name: str) -> bool:
    """A function's yes/no argument ``name``: True or False (a NumPy bool too); a string such as "no" is refused,
    not read as true."""
    return bool(argument(value, name, "True or False", isinstance(value, (bool, np.bool_))))


def _path(path, name: str) -> Path:
    """A function's file argument ``name``: a str or Path."""
    return Path(argument(path, name, "a file's path (a str or Path)", isinstance(path, (str, os.PathLike))))


def _configured(config: Config | None, kind: str, settings: dict, machine: Hardware | None = None, **named) -> Config:
    """``config`` (default: the defaults) with the flat ``settings``, and those ``named`` that are not None,
    changed, on ``machine`` where one built in code is given (``on_machine``); a setting that a run of ``kind``
    does not read is refused (``moesim.sim.config.RUN_SETTINGS``)."""
    defaults, config = config is None, _config(config)
    if defaults and kind == "serve":  # the command line's and a sweep's defaults, not settings the user gave
        config = config.replace(**SERVE_DEFAULTS)
    settings = {**{k: v for k, v in named.items() if v is not None}, **settings}
    takes = RUN_SETTINGS[kind]
    unread = sorted(k for k in settings if k not in takes)
    if unread:
        what = {"hitrate": "a hit-rate run", "des": "a simulated run", "serve": "a served stream"}[kind]
        raise MoesimError(f"{', '.join(unread)}: {what} does not read it (it reads {', '.join(takes)})")
    configured = config.replace(**settings)
    if kind != "hitrate" and (defaults or "hardware" in settings):  # (a configuration given with its machine is as
        # it was built: ``Config.build`` or the command line applied it); what a configuration given sets counts as given
        unset = Config().flat()
        given = set(settings) | ({k for k, v in config.flat().items() if v != unset.get(k)} if not defaults else set())
        configured = on_machine(configured, given, None if machine is None else machine.gpu is not None)
    refuse_unread(set(settings), [configured], reads_strategy=kind != "hitrate", machines=[machine])
    return configured


def _run_inputs(trace, config: Config | None, kind: str, model, hardware,
                settings: dict) -> tuple[Trace, Config, dict]:
    """A timed run's trace, configuration and objects (``_with_objects``), with the settings its model does not read
    refused (a MoLE model's cache; its model is found only where such a setting was given)."""
    config, objects = _with_objects(config, kind, model, hardware, settings)
    trace = _trace(trace)
    if "model" in objects:  # one built in code (a name is matched to the trace where it is looked up)
        check_fits_trace(objects["model"], trace.meta)
    if set(settings) & AUDITED:
        refuse_unread(set(settings), models=[objects.get("model") or config.model.spec(trace.meta)])
    return trace, config, objects


def _with_objects(config: Config | None, kind: str, model, hardware, settings: dict) -> tuple[Config, dict]:
    """``_configured``, with a model or hardware named by a string set as a setting, and one built in code
    (a ``ModelSpec``, a ``Hardware``) returned apart."""
    objects = {}
    for key, value, built in (("model", model, ModelSpec), ("hardware", hardware, Hardware)):
        if isinstance(value, (str, Path)):
            settings[key] = str(value)
        elif isinstance(value, built):
            if built is ModelSpec:  # (a machine's numbers are checked once its force is known)
                check_model(value, f"{key} {value.name!r}")
            objects[key] = value
        elif value is not None:
            raise MoesimError(f"{key} must be a name, a file or a {built.__name__}, got {type(value).__name__}")
    config = _configured(config, kind, settings, objects.get("hardware"))
    if "hardware" in objects:  # the link, SSD, CPU, memory sizes and threads asked for apply to it as to a preset
        check_hardware(objects["hardware"], f"hardware {objects['hardware'].name!r}", config.hardware.force)
        objects["hardware"] = config.hardware.spec(objects["hardware"])
    return config, objects


def plan(model: str | None = None, hardware: str | None = None, *, config: Config | None = None,
         trace: str | Path | Trace | None = None, dtypes=None, engines=None, **settings):
    """What to put where: every execution strategy for ``model`` on ``hardware``, in the model file's own storage
    (a GGUF's types; a config.json's ``quantization_config``) where it has one and in each format of ``dtypes``
    (every weight in it; default: a ``config``'s dtype, else bf16, q8_0, q4_k where the model has no storage of its
    own), sized to the machine's memory and ranked by decode tokens/s
    (``rows``, with TTFT, GPU memory, host RAM, the format and engine settings), simulated on ``trace`` (default: the
    bundled one for Mixtral-8x7B, else a synthetic one). The settings are the machine's and the workload's
    (``moesim.experiments.plan.PLAN_SETTINGS``: ``vram``, ``ram``, ``cpu``, ``link``, ``batch``, ``prompt``
    (default 512 tokens, for the TTFT; a trace that records every prompt is timed on those), ``split``, ...); of a
    ``config``, these and its format (the candidates set the rest, as from a configuration file on the command line).
    ``engines``: the engines the user has (a name or a list, ``moesim engines``), each placement once for every one of
    them that runs it (``engines=["llama.cpp", "ik_llama.cpp"]``: a row as each); default: every engine, each
    placement timed as the first that runs it. Its ``rows``
    are ``PlanRow``s (``moesim.experiments.plan_row``: ``tokens_per_s`` an ``Estimate`` with its 80% interval,
    ``command`` the engine's command; ``as_dict()`` as ``--json`` gives it), each a placement an engine a user can
    install runs on the model in that format; ``apart`` holds those none does, each saying why. Equal tokens/s rank
    by TTFT; the rows that keep every expert on the
    GPU are one ``all-on-gpu`` row per format (``same_as``: the candidates it stands for). Where nothing fits, a
    ``MoesimError`` names the candidate closest to fitting and its memory part by part.

    >>> p = moesim.plan("mixtral-8x7b", "rtx4090", dtypes=["q4_k"])
    >>> r = next(r for r in p.rows if r.strategy == "cpu-experts")
    >>> round(r.tokens_per_s.mid, 1), r.command, round(r.tokens_per_s.low), round(r.tokens_per_s.high)
    (43.1, 'llama-server -m Mixtral-8x7B-v0.1-Q4_K.gguf -ngl 99 --n-cpu-moe 4 -t 16 -c 678', 28, 58)
    """
    from moesim.experiments.plan import PLAN_PROMPT, PLAN_SETTINGS, plan as run

    for key, value, other in (("model", model, "a preset's name or a model file's path (config.json, GGUF)"),
                              ("hardware", hardware, "a preset's name, a hardware TOML file's path or \"local\"")):
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise MoesimError(f"{key}: a plan takes {other}, got a {type(value).__name__} (simulate takes one built "
                              "in code)")
    unread = sorted(k for k in settings if k not in PLAN_SETTINGS)
    if unread:
        raise MoesimError(f"{', '.join(unread)}: a plan does not take it (it takes {', '.join(PLAN_SETTINGS)}; the "
                          "candidates set the rest)")
    config = _config(config)
    # a prompt asked for, here or by the configuration (0, every configuration's default and what a saved run holds,
    # asks for none); else the plan's default, which a trace's own prompts replace. As on the command line.
    asked = "prompt" in settings or config.workload.prompt != 0
    if not asked:
        settings["prompt"] = PLAN_PROMPT
    named = {k: v for k, v in (("model", model), ("hardware", hardware)) if v is not None}
    # dtypes None: a configuration's format, as the command line's --config gives it; else the plan's
    dtypes, engines = _names("dtypes", dtypes, "a weight format's"), _names("engines", engines, "an engine's")
    return run(config.replace(**named, **settings), trace, dtypes, asked, engines=engines)


def _names(key: str, value, what: str) -> list | None:
    """A name or a list of them as a list (None stays None)."""
    if value is None:
        return None
    try:
        if isinstance(value, (dict, set, frozenset)):  # no order, or keys that are not the names
            raise TypeError
        return [value] if isinstance(value, str) else list(value)  # one, or several
    except TypeError:
        raise MoesimError(f"{key} must be {what} name or a list of them, got {value!r}") from None


def sweep(spec, out: str | Path, jobs: int = 1, resume: bool = False, executor: str = "local",
          flush_seconds: float = 2.0, progress=None, force: bool = False):
    """Run every configuration of a sweep spec (a TOML file: traces, kind, [axes], [fixed], [[exclude]]; or a
    ``moesim.experiments.sweep.SweepSpec``) into a Parquet results file, one row per configuration; returns
    the run's summary. ``progress(done, total)`` is called as rows finish. ``force``: every row takes machines whose
    numbers are far past every real part's (as ``force = true`` in the spec's [fixed]).

    >>> moesim.sweep("examples/flashmoe_fig6.toml", "fig6.parquet", jobs=2).ran
    42
    """
    from moesim.experiments.sweep import SweepSpec, forced, load_spec, run_sweep

    argument(spec, "spec", "a SweepSpec (moesim.experiments.sweep) or a sweep spec's TOML file (a str or Path)",
              isinstance(spec, (SweepSpec, str, os.PathLike)))
    out = _path(out, "out")
    argument(progress, "progress", "a function progress(done, total) or None", progress is None or callable(progress))
    spec = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    if _yes_no(force, "force"):
        spec = forced(spec)
    return run_sweep(spec, out, jobs, _yes_no(resume, "resume"), flush_seconds=flush_seconds, executor=executor,
                     progress=progress)


def plot(results: str | Path | pl.DataFrame | pd.DataFrame, kind: str, out: str | Path, baseline: str | None = None,
         capacity: int | None = None, source: str | None = None) -> Drawn:
    """A figure from sweep results — a results file or its frame, polars or pandas — (``hitrate-vs-capacity``,
    ``tpot-vs-capacity``, ``speedup-heatmap``, ``per-layer-hitrate``; of a serve sweep
    ``latency-vs-throughput``, ``hitrate-vs-batch``); returns its path, which a notebook shows inline
    (``moesim.frames.Drawn``). ``source`` names the results in the figure (default: the file's name); ``baseline``
    (speedup-heatmap, default lru) and ``capacity`` (per-layer-hitrate, default the middle one) are refused by a kind
    that does not read them.

    >>> moesim.plot("fig6.parquet", "hitrate-vs-capacity", "fig6.png")
    Drawn('fig6.png')
    """
    import polars as pl

    from moesim.plots import check_options
    from moesim.plots.results import RESULT_KINDS, plot_results, read_results
    from moesim.plots.serving import SERVE_KINDS, plot_serving

    if is_pandas(results):
        results = from_pandas(results)
    argument(results, "results", "a results file's path (a str or Path) or its DataFrame (polars or pandas)",
              isinstance(results, (str, os.PathLike, pl.DataFrame)))
    out = _path(out, "out")
    kinds = RESULT_KINDS + SERVE_KINDS
    if kind not in kinds:
        raise MoesimError(f"unknown plot kind {kind!r} for results; choose from {', '.join(kinds)}")
    # a string or a float capacity would match no row's and read as "no rows at capacity 2" beside the 2 the rows have
    argument(capacity, "capacity", "a whole number of slots (an int) or None", capacity is None or whole(capacity))
    capacity = None if capacity is None else int(capacity)
    for name, value, what in (("baseline", baseline, "a policy's name"), ("source", source, "a name for the results")):
        argument(value, name, f"{what} (a str) or None", value is None or isinstance(value, str))
    check_options(kind, kinds, baseline=baseline, capacity=capacity)
    baseline = baseline or "lru"
    frame = results if isinstance(results, pl.DataFrame) else read_results(results)
    source = source or ("results" if isinstance(results, pl.DataFrame) else str(results))
    drawn = plot_serving(frame, kind, out, source) if kind in SERVE_KINDS else \
        plot_results(frame, kind, out, baseline, capacity, source)
    return Drawn(drawn)


def models() -> dict[str, ModelSpec]:
    """The model presets by name.

    >>> moesim.models()["mixtral-8x7b"].num_experts
    8
    """
    from moesim.tracegen.models import MODELS

    return dict(MODELS)


def hardware(name: str = "rtx4090", link: str | None = None, ssd: str | None = None, force: bool = False) -> Hardware:
    """A machine: a preset (``h100``, ``rtx4090``, ...) or a hardware TOML file, with a link or SSD preset swapped in;
    ``force`` takes a file's numbers far past every real part's (refused otherwise as a likely unit slip).

    >>> moesim.hardware("rtx4090", link="pcie5").link.gbps
    64
    """
    from moesim.sim.hardware import get_hardware

    return get_hardware(name, link, ssd, force=_yes_no(force, "force"))
