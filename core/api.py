"""The public API, for notebooks and scripts: ``import moesim`` gives every name here.

Settings are the flat names of ``moesim.Config`` (``policy``, ``capacity``, ``prefetch``, ``gamma``, ...),
the same as the command line's options and a sweep spec's keys; pass them as keywords, or pass a
whole ``Config``.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from moesim.sim.config import CacheConfig, Config
from moesim.sim.des import DesResult, simulate_des
from moesim.sim.hardware import Hardware
from moesim.sim.hitrate import HitRate
from moesim.tracegen.models import ModelSpec
from moesim.tracegen.synth import Locality
from moesim.tracegen.trace import Trace


def load_trace(path: str | Path) -> Trace:
    """A trace file (Parquet) as dense arrays.

    >>> moesim.load_trace(moesim.bundled_trace()).meta.model
    'mixtral-8x7b'
    """
    from moesim.tracegen.io import load_trace as load

    return load(path)


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write a trace file (Parquet, atomically).

    >>> moesim.write_trace(trace.select([1]), "second-sequence.parquet")
    """
    from moesim.tracegen.io import write_trace as write

    write(trace, path)


def synth_trace(layers: int, experts: int, top_k: int, sequences: int, tokens: int, seed: int = 0,
                locality: Locality | None = None, prompt_tokens: int = 0, model: str | None = None) -> Trace:
    """A synthetic trace with controlled locality (``Locality``: popularity skew per layer and per sequence,
    reuse, cross-layer correlation); ``model`` names a preset whose dimensions it takes on.

    >>> moesim.synth_trace(16, 64, 8, sequences=2, tokens=32, seed=1, model="olmoe-1b-7b").experts.shape
    (64, 16, 8)
    """
    from moesim.tracegen.models import get_model
    from moesim.tracegen.synth import synth_trace as synth

    meta = get_model(model).trace_meta() if model is not None else None
    return synth(layers, experts, top_k, sequences, tokens, seed, locality or Locality(), prompt_tokens,
                 model or "synthetic", meta)


def train_ml_ffn(trace: Trace, out: str | Path, per_layer: bool = False, **options) -> dict:
    """Train FlashMoE's ML-FFN eviction model on ``trace`` and save it to ``out`` (the ``ml_model`` of policy
    ``ml-ffn``); ``options`` are ``moesim.policies.ml_ffn_train.train``'s. Returns the training log
    (epochs, losses, the train and validation sequences). Needs torch.

    >>> log = moesim.train_ml_ffn(trace, "ffn.npz", val_fraction=0.5, epochs=5)
    >>> log["val_sequences"]
    [1]
    """
    from moesim.policies.ml_ffn_train import save_model, train

    arrays, log = train(trace, per_layer, **options)
    save_model(arrays, Path(out))
    return log


def bundled_trace() -> Path:
    """The path of the real Mixtral-8x7B routing trace shipped with moesim (2 GSM8K sequences, 244 tokens).

    >>> moesim.bundled_trace().name
    'mixtral-8x7b-gsm8k.parquet'
    """
    from moesim.tracegen.io import bundled_trace_path

    return bundled_trace_path()


def hitrate(trace: Trace, policy: str = "lru", capacity: int = 4, scope: str = "per-layer", semantics: str = "step",
            reset: bool = False, *, log_evictions: int = 0, **params) -> HitRate:
    """Exact hits of a replacement policy on a trace: ``capacity`` experts per layer (or in one pool,
    ``scope="global"``); ``params`` are the policy's (``gamma``, ``seed``, ``ml_model``, ``pin_trace``).

    >>> moesim.hitrate(trace, "belady", 4).hit_rate
    0.7329...
    """
    from moesim.sim.hitrate import simulate as run

    return run(trace, CacheConfig(policy=policy, capacity=capacity, scope=scope, semantics=semantics, reset=reset,
                                  params=params), log_evictions)


def mrc(trace: Trace, policy: str = "lru", scope: str = "per-layer", semantics: str = "step", reset: bool = False,
        capacities=None, **params) -> list[HitRate]:
    """A policy's exact hits at every capacity (or at ``capacities``): one ``HitRate`` each, equal to
    ``hitrate`` at that capacity; LRU under sequential semantics in one pass (``moesim.sim.mrc``).

    >>> [round(r.hit_rate, 4) for r in moesim.mrc(trace, "lru", capacities=[2, 4, 8])]
    [0.3425, 0.6012, 0.9836]
    """
    from moesim.sim.mrc import curve

    return curve(trace, CacheConfig(policy=policy, scope=scope, semantics=semantics, reset=reset, params=params),
                 capacities)


def best_split(trace: Trace, budget: int, policy: str = "lru", semantics: str = "step", **params):
    """The split of ``budget`` expert slots over the layers (per-layer caches) that maximises ``policy``'s
    hits, from its per-layer curves, with the uniform split's hits beside it (``moesim.sim.budget``).

    >>> moesim.best_split(trace, 96, "lru").slots[:4]
    [2, 2, 2, 3]
    """
    from moesim.sim.budget import best_split as split

    return split(trace, CacheConfig(policy=policy, semantics=semantics, params=params), budget)


def simulate(trace: Trace, config: Config | None = None, *, model: str | ModelSpec | None = None,
             hardware: str | Hardware | None = None, decisions: bool = False, **settings) -> DesResult:
    """Time per output token: the discrete-event simulation of decoding ``trace``, under ``config`` with
    the flat ``settings`` changed, and the GPU memory and host RAM it needs (a configuration that does not
    fit is a ``MoesimError``). ``model`` and ``hardware`` are preset names (or a hardware TOML file), or
    objects built in code.

    >>> r = moesim.simulate(trace, policy="lru", capacity="auto", hardware="rtx4090", dtype="int4", prefetch="oracle")
    >>> r.capacity, round(r.tpot_s * 1e3, 1), round(r.tokens_per_s, 2), round(r.hit_rate, 4), round(r.vram_gb, 1)
    (7, 30.6, 32.69, 0.9999, 22.4)
    """
    config, objects = _configured(config, model, hardware, settings)
    return simulate_des(trace, config, decisions=decisions, **objects)


def serve(trace: Trace, config: Config | None = None, *, model: str | ModelSpec | None = None,
          hardware: str | Hardware | None = None, **settings):
    """A served stream: ``trace``'s sequences as requests arriving over time (``rate``, ``requests``, ...: the
    ``serve`` settings), batched continuously (``max_batch``, ``max_batch_tokens``, ``chunked_prefill``) and
    run by the discrete-event simulator under ``config`` with ``settings`` changed. The result's ``summary``
    holds TTFT, TPOT and latency percentiles, throughput and the hit rate; ``requests`` one row per request;
    ``by_batch()`` the hit rate by running batch (``moesim.sim.serve``).

    >>> s = moesim.serve(trace, rate=0.5, requests=8, hardware="rtx4090", dtype="q4_k", capacity="auto")
    >>> round(s.summary["tpot_s"] * 1e3, 1), round(s.summary["tokens_per_s"], 2), s.summary["capacity"]
    (179.1, 28.92, 6)
    """
    from moesim.sim.serve import simulate_serve

    config, objects = _configured(config, model, hardware, settings)
    return simulate_serve(trace, config, **objects)


def _configured(config: Config | None, model, hardware, settings: dict) -> tuple[Config, dict]:
    """``config`` with the flat ``settings`` (and a model or hardware named by a string) changed, and the
    model or hardware objects built in code."""
    objects = {}
    for key, value in (("model", model), ("hardware", hardware)):
        if isinstance(value, str):
            settings[key] = value
        elif value is not None:
            objects[key] = value
    return (config or Config()).replace(**settings), objects


def plan(model: str, hardware: str = "rtx4090", **options):
    """What to put where: every execution strategy for ``model`` on ``hardware``, in each expert format,
    sized to the machine's memory and ranked by decode tokens/s (``rows``, with TTFT, GPU memory, host
    RAM and engine settings); ``options`` are ``moesim.experiments.plan.plan``'s (``vram``, ``ram``,
    ``trace``, ``prompt``, ``batch``, ``dtypes``, ``cpu``, ``link``).

    >>> p = moesim.plan("mixtral-8x7b", "rtx4090", dtypes=["q4_k"])
    >>> round(p.rows[0]["tokens_per_s"], 1), next(r["engine_flags"] for r in p.rows if r["strategy"] == "cpu-experts")
    (70.4, '-ngl 99 --n-cpu-moe 4')
    """
    from moesim.experiments.plan import plan as run

    return run(model, hardware, **options)


def sweep(spec: str | Path, out: str | Path, jobs: int = 1, resume: bool = False, executor: str = "local"):
    """Run every configuration of a sweep spec (TOML: traces, kind, [axes], [fixed], [[exclude]]) into a
    Parquet results file, one row per configuration; returns the run's summary.

    >>> moesim.sweep("examples/flashmoe_fig6.toml", "fig6.parquet", jobs=2).ran
    42
    """
    from moesim.experiments.sweep import load_spec, run_sweep

    return run_sweep(load_spec(spec), out, jobs, resume, executor=executor)


def plot(results: str | Path | pl.DataFrame, kind: str, out: str | Path, baseline: str = "lru",
         capacity: int | None = None, source: str | None = None) -> Path:
    """A figure from sweep results — a results file or its frame — (``hitrate-vs-capacity``,
    ``tpot-vs-capacity``, ``speedup-heatmap``, ``per-layer-hitrate``; of a serve sweep
    ``latency-vs-throughput``, ``hitrate-vs-batch``); returns its path. ``source`` names the results in
    the figure (default: the file's name).

    >>> moesim.plot("fig6.parquet", "hitrate-vs-capacity", "fig6.png")
    PosixPath('fig6.png')
    """
    from moesim.plots.results import plot_results, read_results
    from moesim.plots.serving import SERVE_KINDS, plot_serving

    frame = results if isinstance(results, pl.DataFrame) else read_results(results)
    source = source or ("results" if isinstance(results, pl.DataFrame) else str(results))
    if kind in SERVE_KINDS:
        return plot_serving(frame, kind, out, source)
    return plot_results(frame, kind, out, baseline, capacity, source)


def models() -> dict[str, ModelSpec]:
    """The model presets by name.

    >>> moesim.models()["mixtral-8x7b"].num_experts
    8
    """
    from moesim.tracegen.models import MODELS

    return dict(MODELS)


def hardware(name: str = "rtx4090", link: str | None = None, ssd: str | None = None) -> Hardware:
    """A machine: a preset (``h100``, ``rtx4090``, ...) or a hardware TOML file, with a link or SSD preset swapped in.

    >>> moesim.hardware("rtx4090", link="pcie5").link.gbps
    64
    """
    from moesim.sim.hardware import get_hardware

    return get_hardware(name, link, ssd)
