"""What an engine is to moesim: the program a user runs a placement with, what of it changes durations, and how
to write its settings. One module per engine (``moesim.sim.engines``) holds one ``EngineSpec``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from moesim.sim.machine import ONE_POOL


def every_setting(config) -> bool:
    """An engine's ``takes`` where it runs its placements under any settings."""
    return True


@dataclass(frozen=True)
class EngineSpec:
    """An engine: its ``name`` as its users write it, ``summary`` and ``source`` (where it is published); the
    placements it runs (``runs``: strategy names, ``moesim.sim.strategies``) and, of those runs, the settings it
    has the mechanism for (``takes(config)``: a prefetcher, a cache that changes); what it does that changes
    durations, each with where the figure comes from (``sources``: (field, source) pairs):

    - ``numa``: how it spreads CPU work over sockets (``moesim.sim.machine.ONE_POOL``: one thread pool reading one
      socket's DRAM; ``PER_SOCKET``: a pool and a copy of the experts per socket);
    - ``shared_overlap``: it computes the shared experts on the GPU while the CPU computes the routed ones;
    - ``cpu_ops``: thread barriers a CPU layer's routed experts take, ``a + b · top_k`` (``expert_barriers``);
    - ``offload_min_tokens``: a row of at least this many tokens has its CPU layers' experts copied to the GPU and
      run there (None: never);
    - ``kernel``: the kind of GPU expert kernel it runs (``fused``, ``per-expert``; None: the run's setting), which a
      run named for it takes (a plan's row, ``--engine NAME``; ``auto`` keeps the run's setting);
    - ``layer_us``: its framework's time per MoE layer and row, beyond the operations moesim times (interpreter,
      dequantisation, launches it does not overlap), which no spec sheet gives: learned from published points by
      cross-validation only (``moesim.experiments.crossval``), with its provenance in ``sources``;

    and how to write its settings for a run: ``threads_flag``, the option that sets its CPU threads (None: it has
    none), and ``flags(params, config, model, gpu)``: its options for the run's placement (``params``: the
    strategy's, resolved; ``gpu``: the machine has one), "" where its defaults run it, or "none: why" where no
    setting of it does."""

    name: str
    summary: str
    source: str
    runs: tuple
    flags: Callable
    takes: Callable = every_setting
    numa: str = ONE_POOL
    shared_overlap: bool = False
    cpu_ops: tuple = (5, 1)
    offload_min_tokens: int | None = None
    kernel: str | None = None
    layer_us: float = 0.0
    threads_flag: str | None = None
    sources: tuple = ()

    def expert_barriers(self, top_k: int) -> int:
        """The thread barriers of one CPU layer's routed experts."""
        return self.cpu_ops[0] + self.cpu_ops[1] * top_k

    def command(self, params: dict, config, model, gpu: bool = True) -> str:
        """Its settings for a run (``flags``), with the CPU threads the run was given where it takes them."""
        flags = self.flags(params, config, model, gpu)
        threads = config.hardware.threads
        if threads is None or self.threads_flag is None or flags.startswith("none:"):
            return flags
        return f"{flags} {self.threads_flag} {threads}".strip()
