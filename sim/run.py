"""One discrete-event run, assembled in one place.

``assemble`` checks a configuration against its trace, model and machine, sizes what memory holds
(``auto`` values, the best split of the cache's slots, then the source's own resizing), times every
piece (``moesim.sim.costs``), has the strategy decide each missing expert's action, builds the engine's
inputs (by keyword), the policy's state and the engine's (``moesim.sim.des_state``), and binds the
compiled loop (``moesim.sim.des_loop``) to the policy's hooks. The ``Run`` it returns is what both
simulations drive through ``Run.step``: the batch run (``moesim.sim.des``) steps every request row in
one call, the served stream (``moesim.sim.serve``) one step per call, each formed when the one before
it ends. What differs between them — which rows there are, what memory must hold for them, what the
policy may read ahead — is their ``RowSource``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import NamedTuple

import numpy as np

from moesim.errors import MoesimError, named
from moesim.policies import get_policy
from moesim.policies.base import Context
from moesim.sim.budget import best_slots
from moesim.sim.config import AUTO, Config, run_params
from moesim.sim.costs import Costs
from moesim.sim.des_loop import HELPERS, des_loop
from moesim.sim.des_state import C_ACCESSES, C_HITS, Inputs, State, build_state
from moesim.sim import field_loads, policy_groups
from moesim.sim.engine import bind, on_disk, part_bounds
from moesim.sim.engines import ENGINES, EngineSpec, engine_for, engines_for
from moesim.sim.machine import Hardware
from moesim.sim.hits import capacity_named, check_fits_experts
from moesim.sim.layer_split import check_shares
from moesim.sim.memory import GIB, Footprint, Memory, resolve
from moesim.sim.strategies import STRATEGIES, StrategySpec, get_strategy, lowbit_dtype
from moesim.sim.strategies.base import A_CPU, A_CPU_FILL, A_LOAD, CACHED, ON_CPU, ON_GPU, Cells
from moesim.sim.weights import Weights, weights_of
from moesim.tracegen.models import ModelSpec
from moesim.tracegen.schema import DECODE
from moesim.tracegen.trace import Trace


BUILDS = ("lean", "whole", "full")  # the discrete-event loop's builds, each doing all the one before it does
LEAN, WHOLE, FULL = range(len(BUILDS))


@dataclass(frozen=True)
class RowArrays:
    """The request rows a run reads (R of them: a batch run's every row, a served stream's one step, rewritten
    by its source before each step), the per-row arrays of ``moesim.sim.des_state.Inputs``."""

    experts: np.ndarray      # int16 [R, L, W]: the routed experts of each row (-1 padding)
    exe: np.ndarray          # int16 [R, L, W']: the experts each cell executes
    exe_tokens: np.ndarray   # int32 [R, L, W']: the tokens each executed expert computes
    committed: np.ndarray    # bool [R, L]: the cell runs its prediction (CommitMoE)
    weights: np.ndarray      # float32 [R, L, W]: router weight of each routed expert, summed over its tokens
    pred: np.ndarray         # int16 [R, L, P]: experts predicted for each cell (P = 0: no prefetcher)
    kind: np.ndarray         # int8 [R]: PREFILL or DECODE
    tokens: np.ndarray       # [R]: tokens of each row
    pre_s: np.ndarray        # float64 [R]: a layer's attention + router (+ shared experts)
    shared_s: np.ndarray     # float64 [R]: a layer's shared experts beside the CPU's (``moesim.sim.costs``)
    row_s: np.ndarray        # float64 [R]: once per row: dense layers, head
    lut_s: np.ndarray        # float64 [R]: MoLE: a layer's lookup-row copy
    handoff_s: np.ndarray    # float64 [R]: the activations between GPU and host, one way
    group_start: np.ndarray  # bool [R]: the row starts a batch
    preload_at: np.ndarray   # int64 [R]: the preload set issued at this row (-1: none)
    preload: np.ndarray      # int16 [G, L, W]: preload sets (W = min(C, E), at least 1; -1: none)


class RowSource:
    """Where a run's rows come from: what ``assemble`` asks of the batch run and of the served stream.
    ``rewritten``: the source rewrites its rows before each step (a served stream's one row), so their
    missing experts' actions are decided again at each step."""

    rewritten = False

    def footprint(self, trace: Trace, config: Config) -> tuple[float, int, bool]:
        """What memory must hold for these rows: KV tokens, the widest request row, whether any row prefills."""
        raise NotImplementedError

    def sized(self, config: Config, footprint: Footprint, memory: Memory) -> Config:
        """The configuration the run is built with, once memory has sized ``config`` (the same, unless the
        source resizes the cache as it goes)."""
        return config

    def arrays(self, config: Config, slots: np.ndarray, model: ModelSpec, hardware: Hardware, weights: Weights,
               lowbit: str | None, engine: EngineSpec) -> tuple[RowArrays, Costs]:
        """The rows' arrays and their durations, for ``slots`` per partition, the run's ``weights`` and the engine it
        is timed as (``moesim.sim.engines``)."""
        raise NotImplementedError

    def policy_context(self, config: Config, slots: np.ndarray, params: dict) -> Context:
        """What the policy's ``make_state`` sees of the rows."""
        raise NotImplementedError

    def measure_from(self, config: Config) -> int:
        """The first row measured (the rows before it warm the caches up); -1: every row."""
        return -1


class Stepped(NamedTuple):
    """What one ``Run.step`` did: the seconds its rows took on the simulated machine (the compute stream's
    clock, from where it stood to where it stopped), its decode hits and accesses."""

    seconds: float
    hits: int
    accesses: int


@dataclass(eq=False)
class Run:
    """An assembled run (``assemble``): its configuration as run (``auto`` sizes resolved, the split applied),
    memory, durations, the engine's state and the bound loop. ``step`` runs rows; the rest reads results."""

    config: Config
    model: ModelSpec
    hardware: Hardware
    memory: Memory
    costs: Costs
    strategy: StrategySpec      # the strategy (``moesim.sim.strategies``)
    strategy_params: dict
    engine: EngineSpec          # the engine it is timed as (``moesim.sim.engines``; ``layer_us``: 0 unless as_engine)
    rows: RowArrays
    rewritten: bool             # the source rewrites the rows before each step (``RowSource.rewritten``)
    state: State = field(repr=False)
    policy_state: tuple = field(repr=False)
    build: int                  # the least build of the loop it needs (``build_for``)
    rows_run: int = 0           # rows stepped so far: the run's row number of the next step's first row
    as_engine: bool = False     # timed as its engine (a plan's row, ``--engine NAME``), as the shipped constants were

    @property
    def offload(self) -> float:
        """The fewest tokens of a row whose CPU layers' experts the engine runs on the GPU."""
        return self.engine.offload_tokens(self.model.num_experts, self.model.top_k)

    @cached_property
    def loop(self):
        """The compiled loop it runs (``loop_for``), chosen when it first steps (``moesim.sim.des.simulate_all``
        chooses it before its threads start): a run assembled while its loop compiles elsewhere
        (``moesim.sim.des.compiling``) takes the one compiled."""
        return loop_for(self.config.cache.composed, self.build)

    def step(self, first: int = 0, last: int | None = None, live_slots: int | None = None) -> Stepped:
        """Run array rows ``first .. last - 1`` (default: to the end) as the run's next rows, with the cache's
        partitions holding ``live_slots`` slots each from now on (slots given back first; default: as they
        are). Where the source rewrites its rows, the strategy decides their missing experts' actions again
        (a strategy of one action, ``ACTIONS``, need not be asked: every miss takes it)."""
        last = self.rows.kind.shape[0] if last is None else last
        state = self.state
        tally, progress, counters = state.tally, state.progress, state.tally.counters
        if self.rewritten and len(self.strategy.actions) > 1:
            state.inputs.miss_action[first:last] = miss_actions(self.strategy, self.strategy_params, self.offload,
                                                                self.rows, self.costs, state.inputs, first, last)
        if live_slots is not None:
            if self.build < FULL:  # only the full build gives slots back
                raise ValueError("only a served stream's run (its source rewrites its rows) may give slots back")
            state.cache.live[:] = live_slots
        tally.rows[first:last] = 0.0
        hits, accesses, began = counters[C_HITS], counters[C_ACCESSES], progress.now[0]
        progress.span[0], progress.span[1] = first, last
        progress.offset[0] = self.rows_run - first
        self.loop(state, self.policy_state)
        self.rows_run += last - first
        return Stepped(float(progress.now[0] - began), int(counters[C_HITS] - hits),
                       int(counters[C_ACCESSES] - accesses))

    def wait_until(self, t: float) -> None:
        """Nothing to run before time ``t``: the compute stream's clock moves there (if it is behind)."""
        self.state.progress.now[0] = max(self.now, t)

    @property
    def now(self) -> float:
        """The compute stream's clock: when the last row stepped ended."""
        return float(self.state.progress.now[0])

    @property
    def counters(self) -> np.ndarray:
        """The run's counters so far (``moesim.sim.des_state.C_*``), read-only."""
        view = self.state.tally.counters.view()
        view.flags.writeable = False
        return view

    @property
    def live_slots(self) -> int:
        """The fewest slots a partition may fill now."""
        return int(self.state.cache.live.min())

    @property
    def mean_slots(self) -> float:
        """The slots a partition may fill now, on average over the partitions (a split's layers differ)."""
        return float(self.state.cache.live.mean())



def assemble(trace: Trace, config: Config, source: RowSource, model: ModelSpec | None = None,
             hardware: Hardware | None = None, decisions: bool = False, build: int = LEAN,
             as_engine: bool = False) -> Run:
    """The run of ``config`` on ``trace``'s rows as ``source`` gives them (module docstring). ``model`` and
    ``hardware`` replace the configuration's (a model without a preset, a machine built in code); ``as_engine``: the run
    is its engine's, with the framework time learned for it (``moesim.sim.engines.engine_for``);
    ``decisions`` keeps the engine's decision log (what ``moesim replay`` executes); ``build``: the least build of
    the loop it takes (``compile_loops`` compiles one that way)."""
    model = model if model is not None else config.model.spec(trace.meta)
    hardware = hardware if hardware is not None else config.hardware.spec()
    check(trace, model, hardware, config)
    weights = weights_of(trace, model, config.model.dtype, config.model.other_dtype)
    kv_tokens, width, prompt_rows = source.footprint(trace, config)
    cpu = hardware.cpu
    footprint = Footprint(model, weights.other_bpp, weights.expert_bytes, kv_tokens, width, prompt_rows,
                          sum(g.hbm_gb for g, _ in hardware.gpus) * GIB, cpu.ram_gb * GIB if cpu else 0.0,
                          cpu_only=hardware.gpu is None, sockets=cpu.sockets if cpu else 1,
                          gpus=tuple(g.hbm_gb * GIB for g, _ in hardware.gpus) if hardware.more_gpus else (),
                          unified=hardware.gpu is not None and hardware.gpu.unified)
    config, memory = resolve(footprint, config, trace.meta.top_k)
    if memory.split or memory.shares:  # what each GPU holds: the machine as the run places the model on it
        hardware = replace(hardware, split=memory.split, shares=memory.shares)
    strategy = get_strategy(config.execution.strategy)
    cache = config.cache
    if cache.split == "best" and strategy.cache and cache.capacity != 0:
        # a cache that holds the widest row whole in every layer needs no scratch buffer: no layer of the split
        # goes below that row, so the memory stays the same
        held = int(cache.slots(trace.meta.num_layers).min()) >= width
        config = replace(config, cache=best_slots(trace, cache, width if held else None))
    config = source.sized(config, footprint, memory)
    slots = config.cache.slots(trace.meta.num_layers)
    sparams = run_params(strategy, config.execution.params)
    as_engine = as_engine or config.execution.engine != "auto"  # an engine the configuration names is timed as itself
    engine = engine_for(config, as_engine)
    if as_engine and engine.kernel is not None:  # the engine runs its own kind of expert kernel
        config = config.replace(kernel=engine.kernel)
    if as_engine:  # on its own threads, where it fixes them, and with its framework time on the machine's GPU
        hardware, engine = engine.machine(hardware), engine.on(hardware)
    rows, cost = source.arrays(config, slots, model, hardware, weights, lowbit_dtype(strategy, sparams), engine)
    per_expert = config.execution.kernel == "per-expert"
    inputs = Inputs(
        experts=rows.experts, exe=rows.exe, exe_tokens=rows.exe_tokens, committed=rows.committed,
        weights=rows.weights, pred=rows.pred, kind=rows.kind, group_start=rows.group_start,
        preload_at=rows.preload_at, preload=rows.preload, pre_s=rows.pre_s, shared_s=rows.shared_s, row_s=rows.row_s,
        lut_s=rows.lut_s,
        by_tokens=cost.by_tokens, times=cost.scalar_times(), per_expert=per_expert, bounds=part_bounds(slots),
        num_experts=np.int64(trace.meta.num_experts), per_layer=config.cache.scope == "per-layer",
        reset_each_group=config.cache.reset, mole=model.kind == "mole",
        dram_capacity=np.int64(-1 if config.cache.dram_capacity is None else config.cache.dram_capacity),
        placement=strategy.placement(model.num_layers, sparams),
        miss_action=np.zeros(rows.exe.shape, np.int8), cpu_by_tokens=cost.cpu_by_tokens,
        late_to_cpu=bool(strategy.cpu and strategy.cache), handoff_s=rows.handoff_s,
        measure_from=np.int64(source.measure_from(config)))
    inputs.miss_action[:] = miss_actions(strategy, sparams, engine.offload_tokens(model.num_experts, model.top_k), rows,
                                         cost, inputs)
    log_rows = log_size(rows) if decisions else 0
    policy = get_policy(config.cache.composed)
    policy_state = policy_groups.state(config.cache.composed, policy.make_state(
        source.policy_context(config, slots, run_params(policy, config.cache.params))))
    return Run(config, model, hardware, memory, cost, strategy, sparams, engine, rows, source.rewritten,
               build_state(inputs, hardware.link.engines if hardware.link else 1, log_rows), policy_state,
               max(build, build_for(config, model, decisions, source.rewritten)), as_engine=as_engine)


def kernel_unread(run: Run, most_tokens: int, asked: Config) -> str | None:
    """Why the GPU's expert kernel kind (``kernel``) is read by nothing in ``run``, whose rows hold at most
    ``most_tokens`` tokens; None where it may be read. Nothing reads it where every expert is computed on the host CPU
    whatever the kernel: every layer's experts placed there (its ``places`` parameter, ``auto`` resolved) and no row of
    the engine's ``offload_tokens`` (the tokens at which it runs them on the GPU), or a strategy whose only actions
    compute on the CPU, with no slot ever to hold an expert and no prefetcher to stage one. ``asked``: the configuration
    as given (its ``auto`` sizes named so). (A strategy that weighs the GPU against the CPU, cpu-miss, reads it even
    where every expert ended on the CPU: the kernel's launches are part of what it weighed.)"""
    if run.hardware.gpu is None:
        return None  # ``moesim.sim.reads`` refuses it by the machine's name
    strategy, n_layers = run.strategy, run.model.num_layers
    placement = strategy.placement(n_layers, run.strategy_params)
    offload = run.offload  # a row this long runs them on the GPU
    if (placement == ON_CPU).all() and most_tokens < offload:
        places = strategy.places
        placed = run.strategy_params.get(places)
        given = asked.execution.params.get(places, strategy.params[places].default) if places else None
        return (f"strategy {strategy.name} puts all {n_layers} layers' experts on the CPU"
                + ("" if placed is None else f" ({named(places, given)}"
                   + ("" if given == placed else f", resolved to {placed}") + ")")
                + ("" if math.isinf(offload) else f" and no step holds the {offload} tokens at which it runs them on the "
                                              f"GPU (at most {most_tokens} here)"))
    if set(strategy.actions) <= {A_CPU, A_CPU_FILL} and (placement == CACHED).all() \
            and not np.any(run.config.cache.slots(n_layers)) and run.config.prefetch.prefetcher == "none":
        capacity = asked.cache.capacity
        resolved = " resolved to 0" if capacity == "auto" else ""
        return (f"strategy {strategy.name} with no expert slot ({named('capacity', capacity)}{resolved}) and no "
                "prefetcher computes every expert on the CPU")
    return None


def check_fills(run: Run, filled: bool | None = None) -> None:
    """A cache nothing ever fills is refused: a strategy whose every miss runs on the CPU, with no prefetcher and no
    background fill (cpu-miss at batch 1: Fiddler's rule finds the CPU sooner at every token count), would be
    charged GPU memory for slots that change nothing. A batch run is judged before it runs, by the action each
    executed expert would take; a served stream (``moesim.sim.serve``), whose steps are formed as it runs, after it:
    ``filled``, whether it copied any expert into a slot."""
    inputs, config = run.state.inputs, run.config
    if not (run.strategy.cache and run.strategy.cpu and inputs.bounds[-1] > 0 and config.prefetch.prefetcher == "none"):
        return  # what follows may read every cell: 10-20 ms at 10M accesses
    what = "run" if filled is None else "stream"
    if filled is None:
        actions = inputs.miss_action[inputs.exe >= 0]  # the executed experts' (padding takes any action)
        filled = not actions.size or bool(np.isin(actions, (A_LOAD, A_CPU_FILL)).any())
    if not filled:
        raise MoesimError(f"strategy {run.strategy.name} runs every miss of this {what} on the CPU (the CPU beats the "
                          f"copy at each of its token counts), so the cache of {named('capacity', config.cache.capacity)}"
                          f" never fills and changes nothing: give a prefetcher ({named('prefetch', 'popular')} with "
                          f"{named('policy', 'static')} is Fiddler's), or {named('capacity', 0)}")


def miss_actions(strategy, params: dict, offload: float, rows: RowArrays, cost: Costs, inputs: Inputs,
                 first: int = 0, last: int | None = None) -> np.ndarray:
    """The strategy's action for each executed expert of rows ``first .. last - 1`` should it miss, run by an engine
    that runs a row of ``offload`` tokens or more on the GPU (``EngineSpec.offload_tokens``), checked to be one of
    those the strategy declares (``ACTIONS``)."""
    span = slice(first, last)
    gpu = bool(np.isfinite(cost.copy_s))
    cells = Cells(tokens=rows.exe_tokens[span], weights=rows.weights[span], decode=rows.kind[span] == DECODE,
                  committed=rows.committed[span], row_tokens=rows.tokens[span], placement=inputs.placement,
                  cpu_s=cost.cpu_by_tokens, gpu_s=cost.gpu_expert_s(inputs.per_expert), copy_s=cost.copy_s, gpu=gpu,
                  offload_tokens=offload)
    actions = strategy.miss_actions(cells, params)
    if getattr(actions, "shape", None) != cells.tokens.shape or not _all_in(actions, strategy.actions):
        raise MoesimError(f"strategy {strategy.name}: its miss_actions gave an array of shape "
                          f"{getattr(actions, 'shape', None)} for cells of shape {cells.tokens.shape}, or an action "
                          f"not among its actions {strategy.actions}")
    if not gpu and not _all_in(actions[cells.tokens > 0], (A_CPU, A_CPU_FILL)):
        raise MoesimError(f"the machine has no GPU, and strategy {strategy.name} copies experts to one")
    return actions


def _all_in(values: np.ndarray, allowed) -> bool:
    """Whether every one of ``values`` is one of ``allowed``: at once where the values' range is all allowed (two
    reductions), else element by element."""
    if values.size == 0:
        return True
    if values.dtype.kind in "iu":
        lo, hi = int(values.min()), int(values.max())
        if hi - lo < len(allowed) and set(range(lo, hi + 1)) <= set(allowed):
            return True
    return bool(np.isin(values, allowed).all())


def bound_loop(policy: str, build: int = FULL):
    """The discrete-event loop of ``policy``'s group (``moesim.sim.policy_groups``: one loop serves every member)
    in one of its builds (``moesim.sim.des_loop.EXTRAS`` and ``RARE``): ``LEAN`` runs a plain GPU cache, which
    compiles in about half the time of ``WHOLE``, which adds prefetches, preloads and experts run on the CPU or
    fetched in low bits; ``FULL`` adds what only a replay, a served stream or a MoLE model needs (``RARE``) — the
    decision log, slots given back while a run goes on, lookup-row copies — another fifth of the compile time."""
    group = policy_groups.group_of(policy)
    return bind(des_loop, policy_groups.group_name(group), policy_groups.hooks(group), HELPERS,
                {"EXTRAS": int(build >= WHOLE), "RARE": int(build == FULL)}, field_loads.pipeline())


def build_for(config: Config, model: ModelSpec, decisions: bool = False, served: bool = False) -> int:
    """The least build a run of ``config`` needs: ``FULL`` to keep its decisions, for a served stream (its cache
    may shrink as it goes) or a MoLE model; ``WHOLE`` for a prefetcher or a strategy whose misses do more than
    copy; else ``LEAN``."""
    if decisions or served or model.kind == "mole":
        return FULL
    if config.prefetch.prefetcher != "none" or tuple(get_strategy(config.execution.strategy).actions) != (A_LOAD,):
        return WHOLE
    return LEAN


def loop_for(policy: str, build: int):
    """The loop a run that needs ``build`` takes: the least build at or above it that is compiled already (in this
    process or in numba's disk cache: one loop serves every run it can), else ``build`` itself."""
    for b in range(build, len(BUILDS)):
        loop = bound_loop(policy, b)
        if loop.signatures or on_disk(loop):
            return loop
    return bound_loop(policy, build)


def log_size(rows: RowArrays) -> int:
    """An upper bound on the decision log: every request twice (an ``A_CPU_FILL`` miss is computed and filled), every
    prediction and preload entry once."""
    n = 2 * int((rows.experts >= 0).sum()) + int((rows.pred >= 0).sum())
    return n + int((rows.preload[rows.preload_at[rows.preload_at >= 0]] >= 0).sum())


def _listed(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _machine(hw: Hardware) -> str:
    """A machine as an error names it: its file, or its preset's name."""
    return hw.source if hw.source.endswith(".toml") else f"hardware '{hw.name}'"


def _check_whole_layers(hardware: Hardware, strategy: StrategySpec, engine: EngineSpec) -> None:
    """Several GPUs take whole layers each (``moesim.sim.layer_split``), and a GPU that shares the host's memory reads
    every weight where it lies: a placement of whole layers (no GPU cache), by an engine that splits a model's layers
    over that many GPUs."""
    count = len(hardware.gpus)
    if strategy.cache:
        placing = _listed(n for n, m in STRATEGIES.items() if m.places and not m.cache)
        why = (f"has {count} GPUs, which moesim models as an engine's split of the model over them (whole layers "
               "on each, or a share of every layer)"
               if hardware.more_gpus else
               "has a GPU that shares the host's memory and reads every weight where it lies")
        raise MoesimError(f"{_machine(hardware)} {why}: nothing is copied to a GPU, so an expert cache is not "
                          f"modelled; use {named('strategy')} {placing}")
    if engine.gpus < count:
        raise MoesimError(f"{_machine(hardware)} has {count} GPUs, and {engine.name} places a model on "
                          f"{engine.gpus}; the engines that split its layers over them: "
                          f"{_listed(e.name for e in ENGINES.values() if e.gpus >= count) or 'none'}")


def _check_tensor_split(model: ModelSpec, strategy: StrategySpec, params: dict, engine: EngineSpec) -> None:
    """Every layer split over several GPUs (``moesim.sim.tensor_split``): a family the engine splits so, and every
    expert on the GPUs (``auto`` places none on the CPU in this mode: ``moesim.sim.memory.resolve``)."""
    if model.family not in engine.tensor_families:
        raise MoesimError(f"{named('split_mode', 'tensor')}: {engine.name} splits every layer of "
                          f"{_listed(engine.tensor_families)} models, not {model.family} ({model.name}); use "
                          f"{named('split_mode', 'layer')}")
    placed = params.get(strategy.places) if strategy.places else None
    off = 0 if placed in (None, AUTO) else int((strategy.placement(model.num_layers, params) != ON_GPU).sum())
    if off:
        raise MoesimError(f"{named('split_mode', 'tensor')} splits every layer over the GPUs, and this placement keeps "
                          f"{off} layers' experts off them: moesim models the split with every expert on the GPUs "
                          f"(give {named('split_mode', 'layer')}, or {named(strategy.places, 0)})")


def check(trace: Trace, model: ModelSpec, hardware: Hardware, config: Config) -> None:
    """What the configuration alone cannot tell: whether it suits this trace, model and machine (before
    memory is sized: an ``auto`` capacity is checked by ``moesim.sim.memory``)."""
    capacity, dram_capacity = config.cache.capacity, config.cache.dram_capacity
    strategy = get_strategy(config.execution.strategy)
    name = strategy.name
    check_shares(config.hardware.tensor_split, hardware)
    if not (trace.phase == DECODE).any():
        raise MoesimError("the trace has no decode steps (every row is a prompt's): tokens/s and TPOT time decoding, "
                          "so there is nothing to time")
    if strategy.cpu and hardware.cpu is None:
        raise MoesimError(f"strategy {name} computes experts on the host CPU, and {_machine(hardware)} has no [cpu] "
                          "section (add one: moesim hardware --template shows it)")
    if hardware.gpu is None:
        if not strategy.cpu or (strategy.cache and capacity not in (0, "auto")):
            placed = _listed(n for n, m in STRATEGIES.items() if m.cpu and m.places)
            all_cpu = _listed(f"{n} with {named('capacity', 0)}" for n, m in STRATEGIES.items()
                              if m.cache and set(m.actions) <= {A_CPU, A_CPU_FILL})
            raise MoesimError(f"{_machine(hardware)} has no GPU: every expert runs on its CPU; use {named('strategy')} "
                              f"{placed}, or {all_cpu}")
        places = strategy.places
        placed = run_params(strategy, config.execution.params).get(places) if places else None
        if placed not in (None, "auto") and (strategy.placement(model.num_layers, {places: placed}) != ON_CPU).any():
            raise MoesimError(f"{_machine(hardware)} has no GPU: every layer's experts are on its CPU; use "
                              f"{named(places, 'auto')} (or {model.num_layers})")
    if hardware.more_gpus or (hardware.gpu is not None and hardware.gpu.unified):
        engine = engine_for(config, as_engine=True)
        _check_whole_layers(hardware, strategy, engine)
        if hardware.more_gpus and config.hardware.split_mode == "tensor":
            _check_tensor_split(model, strategy, run_params(strategy, config.execution.params), engine)
    numa = config.hardware.numa
    if numa != AUTO and strategy.cpu and not engines_for(config):  # a layout no engine that runs it has
        runs = engines_for(config.replace(numa=AUTO))
        if runs:
            laid = "; ".join(f"{e.name}: {' or '.join(e.layouts)}" for e in runs)
            raise MoesimError(f"{named('numa', numa)}: no engine that runs strategy {name} lays its threads out so "
                              f"({laid})")
    profile = ENGINES.get(config.execution.engine)
    why = profile.gpu_refusal(hardware.gpu.vendor if hardware.gpu is not None else None) if profile else ""
    if why:
        raise MoesimError(f"{named('engine', profile.name)}: {why} ({_machine(hardware)})")
    if model.kind == "mole" and not strategy.lookup_tables:
        tables = _listed(n for n, m in STRATEGIES.items() if m.lookup_tables)
        raise MoesimError(f"{named('strategy', name)} places experts, and a MoLE model has lookup tables; use {tables}")
    if not strategy.prefetch and config.prefetch.prefetcher != "none":
        raise MoesimError(f"{named('strategy', name)} keeps no cache for a prefetcher to fill; use {named('prefetch', 'none')}")
    if strategy.cpu and strategy.cache and dram_capacity is not None:  # (a CPU layer's experts mapped from the SSD:
        # cpu-experts; a CPU beside a GPU cache weighs its misses against copies that take no SSD read)
        tiered = _listed(n for n, m in STRATEGIES.items() if not (m.cpu and m.cache))
        raise MoesimError(f"{named('strategy', name)} weighs a miss on the CPU against its copy; an SSD tier "
                          f"({named('dram_capacity')}) is modelled for {tiered}")
    if strategy.needs_weights and trace.weights is None:
        raise MoesimError(f"{named('strategy', name)} judges a miss by its gate weight, and the trace has no weights")
    if config.cache.semantics != "step":
        raise MoesimError("the discrete-event simulator serves a step's experts at once (semantics step); "
                          "sequential semantics is the hit-rate engine's")
    if config.workload.batch > trace.num_sequences:
        raise MoesimError(f"{named('batch', config.workload.batch)} is more than the trace's {trace.num_sequences} sequence(s)")
    if isinstance(dram_capacity, int) and dram_capacity > model.num_layers * model.num_experts:
        every = model.num_layers * model.num_experts
        raise MoesimError(f"{named('dram_capacity', dram_capacity)} is more than the {every:,} experts of {model.name} "
                          f"({model.num_layers} layers of {model.num_experts}): host RAM would be charged for slots "
                          "nothing fills")
    if dram_capacity is not None and hardware.ssd is None:
        held = "as many experts as host RAM holds" if dram_capacity == AUTO else f"{dram_capacity} experts"
        raise MoesimError(f"a DRAM cache of {held} sits in front of an SSD, and {_machine(hardware)} has none; pass "
                          f"{named('ssd', 'pcie5-nvme')} (or another SSD preset)")
    if model.num_layers != trace.meta.num_layers:
        raise MoesimError(f"model {model.name} has {model.num_layers} layers, the trace {trace.meta.num_layers}")
    if capacity != "auto" and strategy.cache:
        check_fits_experts(trace.meta, config.cache)
        slots = config.cache.slots(trace.meta.num_layers)
        low = np.where(slots > 0, slots, trace.meta.top_k)  # a layer of 0 slots keeps no cache: it streams
        if low.min() < trace.meta.top_k:
            which = capacity_named(capacity, slots, int(low.argmin()))
            raise MoesimError(f"{which} is below top_k {trace.meta.top_k}: a step's k experts are resident "
                              f"at once; use a capacity >= {trace.meta.top_k}, or 0 for no expert cache")
