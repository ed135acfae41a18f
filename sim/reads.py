"""Which runs read a setting: the part of the settings' schema that refuses one given where it would change nothing.

A setting typed (on the command line, in a sweep's spec, as an API keyword; not one a configuration file holds, which
holds every setting when saved) that no run reads would change nothing the user sees, so it is refused. Each
``Unread`` rule declares settings (``names``) that a run leaves unread where its configuration (or its model) is so
(``leaves``), the settings that predicate looks at (``looks_at``) and why, as it reads after their names (``why``).
``refuse_unread`` is the one audit: a rule's settings given where every run listed leaves them are one error.

A rule that ``needs_strategy`` is about a run that reads the strategy (a simulated run, a served stream); a hit-rate
run or a plan, whose candidates set it, reads a cache's settings whatever the strategy. A rule ``typed_once`` is asked
only where one value is typed for several runs (the command line, a sweep's spec): the API's caller loops over
capacities that include 0, or over prefetchers that include none, passing the same settings to each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from moesim.errors import MoesimError, named
from moesim.sim.config import CACHE_CHOICES, Config, gpu_count, has_gpu
from moesim.sim.engines import ENGINES
from moesim.sim.strategies import STRATEGIES


def _listed(values) -> str:
    return ", ".join(dict.fromkeys(values))


def _no_cache(configs: list[Config]) -> str:
    places = [named(p) for p in dict.fromkeys(STRATEGIES[c.execution.strategy].places for c in configs) if p]
    return (f"strategy {_listed(c.execution.strategy for c in configs)} keeps no expert cache"
            + (f" (it places experts: {', '.join(places)})" if places else ""))


def _gpu_only(config: Config) -> bool:
    """No expert of the run is computed on the host CPU: its strategy computes none there, and its machine has a GPU
    (one without computes everything on its CPU; one not known reads as computing there: the run reports it)."""
    return not STRATEGIES[config.execution.strategy].cpu and bool(has_gpu(config.hardware.machine,
                                                                          config.hardware.force))


def _own_kernel(config: Config) -> bool:
    engine = ENGINES.get(config.execution.engine)
    return engine is not None and bool(engine.kernel)


def _one_gpu_at_most(config: Config, machine) -> bool:
    """Whether a run's machine (``machine``, one built in code, or the one its configuration names) has fewer than
    two GPUs; not where it cannot be read (the run reports that)."""
    count = len(machine.gpus) if machine is not None else gpu_count(config.hardware.machine, config.hardware.force)
    return count is not None and count < 2


def _one_socket_at_most(config: Config, machine) -> bool:
    """Whether a run's machine (``machine``, one built in code, or the one its configuration names), its CPU swapped
    as the configuration says, has at most one CPU socket, or no CPU; not where it cannot be read (the run reports
    that)."""
    try:
        hw = config.hardware.spec(machine)
    except (KeyError, MoesimError):
        return False
    return hw.cpu is None or hw.cpu.sockets < 2


def _machines_have(runs) -> str:
    """The runs' machines (each a (configuration, machine built in code or None)), then "has" or "have"."""
    names = dict.fromkeys(machine.name if machine is not None else config.hardware.machine for config, machine in runs)
    return f"{' and '.join(names)} {'has' if len(names) == 1 else 'have'}"


def _no_slots(config: Config) -> bool:
    capacity = config.cache.capacity
    return capacity == 0 or (isinstance(capacity, tuple) and not any(capacity))


@dataclass(frozen=True)
class Unread:
    """``names``: settings that a run leaves unread where ``leaves`` holds of it (of its configuration; of its model
    where ``of`` is ``"model"``; of its (configuration, machine built in code or None) where it is ``"machine"``);
    ``looks_at``: the settings ``leaves`` reads; ``why``: of the runs, why, as it reads after the settings' names and
    before "so nothing reads it"; ``needs_strategy``, ``typed_once``: the module docstring."""

    names: tuple[str, ...]
    leaves: Callable
    looks_at: tuple[str, ...]
    why: Callable[[list], str]
    needs_strategy: bool = False
    typed_once: bool = False
    of: str = "config"


RULES = (
    Unread(CACHE_CHOICES, lambda c: not STRATEGIES[c.execution.strategy].cache, ("strategy",), _no_cache,
           needs_strategy=True),
    Unread(("ssd",), lambda c: c.cache.dram_capacity is None, ("dram_capacity",),
           lambda cs: f"with no {named('dram_capacity')} (the experts host RAM holds in front of the SSD) every "
                      "expert is in host RAM", needs_strategy=True),
    Unread(("threads", "numa"), _gpu_only, ("strategy", "hardware", "force"),
           lambda cs: f"strategy {_listed(c.execution.strategy for c in cs)} computes no expert on the host CPU (the "
                      f"strategies that do: {', '.join(n for n, s in STRATEGIES.items() if s.cpu)})",
           needs_strategy=True),
    Unread(("kernel",), _own_kernel, ("engine",),
           lambda cs: f"engine {_listed(c.execution.engine for c in cs)} runs its own kind of expert kernel "
                      f"({', '.join(sorted({ENGINES[c.execution.engine].kernel for c in cs}))})"),
    Unread(("kernel",), lambda c: has_gpu(c.hardware.machine, c.hardware.force) is False, ("hardware", "force"),
           lambda cs: f"{' and '.join(dict.fromkeys(c.hardware.machine for c in cs))} "
                      f"{'has' if len({c.hardware.machine for c in cs}) == 1 else 'have'} no GPU (every expert runs on "
                      "the CPU)"),
    Unread(("tensor_split", "split_mode"), lambda run: _one_gpu_at_most(*run), ("hardware", "force"),
           lambda runs: f"{_machines_have(runs)} fewer than two GPUs: no layer is split over GPUs", of="machine"),
    Unread(("numa",), lambda run: _one_socket_at_most(*run), ("hardware", "cpu", "force"),
           lambda runs: f"{_machines_have(runs)} one CPU socket at most: every layout of the threads reads the "
                        "same DRAM", of="machine"),
    Unread(("arrival_seed",), lambda c: c.serve.arrivals == "burst" and not c.serve.draft_tokens
           and c.serve.requests is None, ("arrivals", "draft_tokens", "requests"),
           lambda cs: f"{named('arrivals', 'burst')} puts every request at time 0, one per sequence in order, and no "
                      "run drafts tokens: nothing is drawn"),
    Unread(("acceptance",), lambda c: c.serve.draft_tokens == 0, ("draft_tokens",),
           lambda cs: f"with {named('draft_tokens', 0)} no run drafts a token to accept"),
    Unread(tuple(n for n in CACHE_CHOICES if n != "capacity"), _no_slots, ("capacity",),
           lambda cs: f"{named('capacity', 0)} keeps no expert cache", needs_strategy=True, typed_once=True),
    Unread(("mode",), lambda c: c.prefetch.prefetcher == "none", ("prefetch",),
           lambda cs: f"{named('prefetch', 'none')} makes no prediction whose misses it would follow up",
           needs_strategy=True, typed_once=True),
    Unread(CACHE_CHOICES + ("prefetch", "mode", "kernel"), lambda m: m.kind == "mole", ("model",),
           lambda ms: f"model {' and '.join(dict.fromkeys(m.name for m in ms))} computes its experts as lookup tables "
                      "on the host, copied a row a step, and keeps no expert cache nor runs an expert kernel",
           of="model"),
)
LOOKED_AT = {n for rule in RULES for n in rule.looks_at}  # what the audit reads of a run
AUDITED = {n for rule in RULES for n in rule.names}  # the settings it may refuse


def refuse_unread(given, configs: list[Config] = (), models: list = (), reads_strategy: bool = True,
                  typed_once: bool = False, machines: list = ()) -> None:
    """Refuse the settings ``given`` that every run leaves unread: each rule (``RULES``) that applies (those that need
    the strategy where the runs read it, ``reads_strategy``; those asked of one value typed for several runs where it
    was, ``typed_once``), over the runs' ``configs`` and, for a rule about the model, their ``models``; ``machines``:
    each config's machine where one was built in code (none: each is the one its configuration names)."""
    runs = {"config": list(configs), "model": list(models),
            "machine": list(zip(configs, machines or [None] * len(configs)))}
    for rule in RULES:
        names = [n for n in rule.names if n in given]
        subjects = runs[rule.of]
        if names and subjects and (reads_strategy or not rule.needs_strategy) and (typed_once or not rule.typed_once) \
                and all(rule.leaves(s) for s in subjects):
            raise MoesimError(f"{', '.join(map(named, names))}: {rule.why(subjects)}, so nothing reads "
                              f"{'it' if len(names) == 1 else 'them'}")
