"""moesim: a trace-driven cache and prefetch simulator for Mixture-of-Experts inference.

The public API for notebooks and scripts (``moesim.api`` documents each with an example)::

    import moesim
    trace = moesim.load_trace(moesim.bundled_trace())
    moesim.hitrate(trace, policy="belady", capacity=4).hit_rate
    moesim.simulate(trace, moesim.Config.build(policy="lru", capacity=4, hardware="rtx4090")).tpot_s

Names are imported on first use, so ``import moesim`` stays cheap.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("moesim")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

# public name -> the module that defines it
_PUBLIC = {
    "MoesimError": "moesim.errors", "MoesimWarning": "moesim.errors",
    **{name: "moesim.api" for name in ("load_trace", "write_trace", "bundled_trace", "synth_trace", "hitrate",
                                       "mrc", "best_split", "simulate", "serve", "plan", "run_replay", "validate",
                                       "sweep", "plot", "models", "hardware", "train_ml_ffn",
                                       "train_prefetcher")},
    "Locality": "moesim.tracegen.synth",
    "Config": "moesim.sim.config", "CacheConfig": "moesim.sim.config", "PrefetchConfig": "moesim.sim.config",
    "ExecutionConfig": "moesim.sim.config", "WorkloadConfig": "moesim.sim.config", "ServeConfig": "moesim.sim.config",
    "ModelSpec": "moesim.tracegen.model_spec", "Hardware": "moesim.sim.machine", "Trace": "moesim.tracegen.trace",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'moesim' has no attribute {name!r}")
    value = getattr(import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
