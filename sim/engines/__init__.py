"""Engines: the programs a placement is run with. A strategy (``moesim.sim.strategies``) says where experts are and
what a miss does; the engine that runs it says what changes its durations (how it uses sockets, shared experts
beside the routed ones, barriers per CPU layer, when it copies a CPU layer's experts to the GPU), which models and
formats it runs, and the command that runs the placement. One module per engine, each an ``EngineSpec`` (``moesim.sim.engines.base``), registered in
``ENGINES``, whose order is the order of preference: a run is timed as the first engine that runs its strategy and
takes its settings (``engine_for``), and a plan's row names that engine and its command.

A strategy no engine runs (one written for a study) is timed as ``UNNAMED``: the default figures, with no command.
"""

from __future__ import annotations

from dataclasses import replace

from moesim.params import AUTO
from moesim.sim.engines import (fiddler, hobbit, hybrimoe, ik_llama_cpp, ktransformers, llama_cpp, melinoe,
                                mixtral_offloading, moe_infinity)
from moesim.sim.engines.base import EngineSpec, Launch
from moesim.sim.strategies import STRATEGIES

ENGINES = {e.name: e for e in (m.ENGINE for m in (llama_cpp, ik_llama_cpp, ktransformers, hybrimoe, fiddler,
                                                  mixtral_offloading, moe_infinity, hobbit, melinoe))}
UNNAMED = EngineSpec(name="no engine", summary="a placement no engine runs", source="", runs=(),
                     command=lambda launch: "none: no engine runs this placement")
ALL_ON_GPU = llama_cpp.ENGINE  # every expert on the GPU: a placement any engine runs; a plan names this one's command
__all__ = ["ALL_ON_GPU", "ENGINES", "EngineSpec", "Launch", "UNNAMED", "engine_for", "engine_named", "engines_for"]


def engine_named(name):
    """An engine's name as registered, from one typed in any case (ktransformers is kTransformers); anything else as
    given (the caller refuses it)."""
    return {e.lower(): e for e in ENGINES}.get(name.lower(), name) if isinstance(name, str) else name


def engine_for(config, as_engine: bool = False) -> EngineSpec:
    """The engine a run of ``config`` is timed as: the first of ``ENGINES`` that runs its strategy and takes its
    settings, with its framework time and its prompt's growth learned from published points (``layer_us``,
    ``prompt_growth``) where the run is that engine's
    (``as_engine``: a plan's row, which names it), else the placement as its operations run (a ``sim run``: what a
    cache policy or a placement gives, whichever code runs it); the engine the configuration names
    (``execution.engine``), framework time included, where it names one; its threads and weights laid out over the
    sockets as the run sets (``hardware.numa``; ``auto``: the engine's own)."""
    numa = config.hardware.numa
    if config.execution.engine in ENGINES:  # named by the run itself
        engine = ENGINES[config.execution.engine]
    else:
        engine = next(iter(engines_for(config)), UNNAMED)
        engine = engine if as_engine else replace(engine, layer_us=0.0, gpu_layer_us=(), prompt_growth=0.0)
    return engine if numa in (AUTO, engine.numa) else replace(engine, numa=numa)


def engines_for(config) -> list[EngineSpec]:
    """The engines that run ``config``'s strategy and take its settings (a split of every layer over several GPUs
    among them: ``tensor_mode``; where the strategy computes experts on the CPU, a layout over the sockets: ``numa``,
    ``numa_options``), in ``ENGINES``' order of preference."""
    laid_out = not STRATEGIES[config.execution.strategy].cpu  # (no expert on the CPU: any layout of its threads)
    return [e for e in ENGINES.values() if config.execution.strategy in e.runs and e.takes(config)
            and (config.hardware.split_mode == "layer" or e.tensor_mode)
            and (laid_out or config.hardware.numa in (AUTO, *e.layouts))]

