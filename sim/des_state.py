"""The discrete-event engine's state: named, typed arrays built by one function (``build_state``).

The compiled loop (``moesim.sim.des_loop``) reads and writes nothing else. ``State`` holds six named
tuples, numba-typed by their fields, so a field is read by name, never by position; the columns of
an array with named columns (counters, row times, the tiers' clocks, the scalar durations) are
declared once, by the tuple of names their indices come from (``COUNTERS``, ``ROW_COLUMNS``,
``CLOCKS``; ``moesim.sim.costs.TIMES``), and ``build_state`` sizes the arrays from those:

- ``Inputs``: what the run reads — the request rows, what each cell executes, predictions and
  preloads, the durations of ``moesim.sim.costs``, the strategy's placement of each layer and what
  each missing expert does (``miss_action``), and the run's switches;
- ``Cache``: residency — which object (``layer * E + expert``) sits in which GPU slot, when its
  weights land, whether a prefetch brought it, and the request-set marks victims must avoid;
- ``Tiers``: the copy engines, the SSD queue and the DRAM cache in front of it (``moesim.sim.des_tiers``),
  and the host CPU's stream;
- ``Tally``: what the run records — counters (``C_*``), per-row times (``R_*``), per-layer hits,
  the decision log (``EV_*``);
- ``Kernels``: the current layer's expert kernels (when each one's weights land, its tokens), the ranks of
  its hits and of the experts still to load or prefetch, and when the CPU's share of the layer is back on the
  GPU;
- ``Progress``: which rows a call runs and where the last call stopped (the clock, the stamp), so a
  run may go on in later calls: ``moesim.sim.serve`` runs one step per call, each formed after the
  one before it ends (``moesim.sim.run.Run.step`` sets it).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from moesim.policies.base import Lists, make_lists

# counters (C_CPU, C_LOWBIT and C_LOWBIT_MASS count decode accesses)
COUNTERS = ("hits", "accesses", "loads", "prefill_loads", "prefetch_loads", "prefetch_used", "ssd_reads",
            "substitutions", "substituted_weight", "cpu", "lowbit", "lowbit_weight", "fills", "reclaimed")
C_HITS, C_ACCESSES, C_LOADS, C_PREFILL_LOADS, C_PF_LOADS, C_PF_USED, C_SSD_READS, C_SUBS, C_SUBS_MASS, \
    C_CPU, C_LOWBIT, C_LOWBIT_MASS, C_FILLS, C_RECLAIMED = range(len(COUNTERS))
# per-row accounting columns (R_CPU: seconds the host CPU computed experts)
ROW_COLUMNS = ("time", "compute", "stall", "copy", "cpu")
R_TIME, R_COMPUTE, R_STALL, R_COPY, R_CPU = range(len(ROW_COLUMNS))
# decision log events (row, layer, event, object, slot), in the order the engine made them: the
# replay executes them. A slot of -1 is no slot (no-cache streaming, a staged prefetch, a bypass, a
# layer placed whole on the GPU). EV_CPU: computed on the host CPU; EV_LOWBIT: a low-bit copy into
# scratch, computed on the GPU; EV_FILL: a copy into a slot the cell does not wait for (hybrid).
EV_HIT, EV_LOAD, EV_PREFETCH, EV_PRELOAD, EV_CPU, EV_LOWBIT, EV_FILL = range(7)
LOG_COLUMNS = ("row", "layer", "event", "object", "slot")
# the tiers' clocks: when the SSD's queue is free, seconds the copy engines were busy, DRAM slots used,
# when the host CPU is free
CLOCKS = ("ssd_free", "copy_busy", "dram_used", "cpu_free")
SSD_FREE, COPY_BUSY, DRAM_USED, CPU_FREE = range(len(CLOCKS))


class Inputs(NamedTuple):
    experts: np.ndarray        # int16 [R, L, W]: the routed experts of each request row (-1 padding)
    exe: np.ndarray            # int16 [R, L, W']: the experts each cell executes
    exe_tokens: np.ndarray     # int32 [R, L, W']: the tokens each executed expert computes
    committed: np.ndarray      # bool [R, L]: the cell runs its prediction (CommitMoE)
    weights: np.ndarray        # float32 [R, L, W]: router weight of each routed expert
    pred: np.ndarray           # int16 [R, L, P]: experts predicted for each cell (P = 0: no prefetcher)
    kind: np.ndarray           # int8 [R]: PREFILL or DECODE
    group_start: np.ndarray    # bool [R]: the row starts a batch
    preload_at: np.ndarray     # int64 [R]: the preload set issued at this row (-1: none)
    preload: np.ndarray        # int16 [G, L, W]: preload sets (W = min(C, E), at least 1; -1: none)
    pre_s: np.ndarray          # float64 [R]: a layer's attention + router (+ shared experts), before routing
    shared_s: np.ndarray       # float64 [R]: a layer's shared experts after routing, beside the CPU's (``moesim.sim.costs``)
    row_s: np.ndarray          # float64 [R]: once per row, after its last layer: dense layers, head
    lut_s: np.ndarray          # float64 [R]: MoLE: a layer's lookup-row copy
    by_tokens: np.ndarray      # float64 [T + 1]: one expert's work on T tokens
    times: np.ndarray          # float64 [len(moesim.sim.costs.TIMES)]: scalar durations (``moesim.sim.costs.T_*``)
    per_expert: bool           # kernel kind: per-expert (else fused)
    bounds: np.ndarray         # int64 [P + 1]: partition p's GPU slots are bounds[p]..bounds[p+1]-1 (none: no cache)
    num_experts: np.int64
    per_layer: bool            # scope per-layer (else one global pool)
    reset_each_group: bool
    mole: bool
    dram_capacity: np.int64    # DRAM slots in front of the SSD (-1: every expert in DRAM)
    placement: np.ndarray      # int8 [L]: CACHED, ON_GPU or ON_CPU (``moesim.sim.strategies.base``)
    miss_action: np.ndarray    # int8 [R, L, W']: what each executed expert does if not resident (A_*, the strategy's)
    cpu_by_tokens: np.ndarray  # float64 [T + 1]: one expert's work on T tokens on the host CPU
    late_to_cpu: bool          # a resident expert whose copy the CPU would beat runs there (a CPU strategy's cache)
    handoff_s: np.ndarray      # float64 [R]: a row's activations between GPU and host, one way
    measure_from: np.int64     # the first row measured (rows before it warm the caches up)


class Cache(NamedTuple):
    slot_of: np.ndarray        # int64 [objects]: its slot (-1: not resident)
    obj_of: np.ndarray         # int64 [slots]: the object in it (-1: free)
    used: np.ndarray           # int64 [partitions]: slots filled (slots bounds[p] .. bounds[p] + used[p] - 1)
    live: np.ndarray           # int64 [partitions]: slots it may fill now (bounds[p + 1] - bounds[p] unless lowered)
    mark: np.ndarray           # int64 [objects]: stamp of the request set (or prediction) it is in
    ready: np.ndarray          # float64 [objects]: when its weights landed or land
    by_prefetch: np.ndarray    # int64 [objects]: 1 if a prefetch put it in its slot and no hit used it yet
    staged: np.ndarray         # int64 [objects]: no cache: the cell a prefetched copy waits for


class Tiers(NamedTuple):
    eng_free: np.ndarray       # float64 [engines]: when each copy engine is free
    clocks: np.ndarray         # float64 [len(CLOCKS)]: SSD_FREE, COPY_BUSY, DRAM_USED, CPU_FREE
    dram_lists: Lists          # the DRAM cache's recency list, most recent at the head
    in_dram: np.ndarray        # bool [objects]
    lut_ready: np.ndarray      # float64 [L]: MoLE: when each layer's lookup rows land


class Tally(NamedTuple):
    counters: np.ndarray       # float64 [len(COUNTERS)]: the C_* counters
    rows: np.ndarray           # float64 [R, len(ROW_COLUMNS)]: each row's R_* columns
    layer_hits: np.ndarray     # int64 [L]: decode hits
    layer_accesses: np.ndarray  # int64 [L]: decode accesses
    log: np.ndarray            # int64 [n, len(LOG_COLUMNS)]: the decision log (0 rows: not kept)
    n_log: np.ndarray          # int64 [1]: entries logged
    warm_counters: np.ndarray  # the counters, layer hits and accesses when the measured rows began
    warm_hits: np.ndarray
    warm_accesses: np.ndarray


class Kernels(NamedTuple):
    ready: np.ndarray          # float64 [W']: when each expert of the layer's run has its weights
    tokens: np.ndarray         # int32 [W']: the tokens it computes
    hit: np.ndarray            # int64 [W']: the ranks in X of the members resident when the cell began
    listed: np.ndarray         # int64 [max(W', P)]: the ranks of the others, then of residents whose copies are
                               # in flight (``late_to_cpu``); then of the next cell's predicted experts not resident
    cpu_ready: np.ndarray      # float64 [1]: when the CPU's experts of the layer are back on the GPU (-1: none)


class Progress(NamedTuple):
    span: np.ndarray           # int64 [2]: the rows of the arrays this call runs
    offset: np.ndarray         # int64 [1]: the run's row number of the arrays' row 0 (the clock ``t`` counts in it)
    now: np.ndarray            # float64 [1]: the compute stream's clock where the last call stopped
    stamp: np.ndarray          # int64 [1]: the last request-set stamp given out


class State(NamedTuple):
    inputs: Inputs
    cache: Cache
    tiers: Tiers
    tally: Tally
    kernels: Kernels
    progress: Progress


def make_tiers(num_objects: int, num_layers: int, engines: int) -> Tiers:
    """Idle copy engines, an idle SSD queue, an empty DRAM cache."""
    return Tiers(np.zeros(max(engines, 1)), np.zeros(len(CLOCKS)), make_lists(num_objects, 1, 1),
                 np.zeros(num_objects, np.bool_), np.zeros(num_layers))


def build_state(inputs: Inputs, engines: int, log_rows: int) -> State:
    """Everything the loop works on, for ``inputs``: an empty cache, idle tiers, zeroed tallies, every row
    to run from time 0."""
    n_rows, n_layers, width = inputs.experts.shape
    n_objects = n_layers * int(inputs.num_experts)
    n_parts = n_layers if inputs.per_layer else 1
    exe_width = inputs.exe.shape[2]
    cache = Cache(np.full(n_objects, -1, np.int64), np.full(max(int(inputs.bounds[-1]), 1), -1, np.int64),
                  np.zeros(n_parts, np.int64), np.diff(inputs.bounds), np.zeros(n_objects, np.int64), np.zeros(n_objects),
                  np.zeros(n_objects, np.int64), np.full(n_objects, -1, np.int64))
    tally = Tally(np.zeros(len(COUNTERS)), np.zeros((n_rows, len(ROW_COLUMNS))), np.zeros(n_layers, np.int64),
                  np.zeros(n_layers, np.int64), np.zeros((log_rows, len(LOG_COLUMNS)), np.int64),
                  np.zeros(1, np.int64), np.zeros(len(COUNTERS)), np.zeros(n_layers, np.int64),
                  np.zeros(n_layers, np.int64))
    progress = Progress(np.array([0, n_rows], np.int64), np.zeros(1, np.int64), np.zeros(1), np.zeros(1, np.int64))
    return State(inputs, cache, make_tiers(n_objects, n_layers, engines), tally,
                 Kernels(np.zeros(exe_width), np.zeros(exe_width, np.int32), np.zeros(exe_width, np.int64),
                         np.zeros(max(exe_width, inputs.pred.shape[2]), np.int64), np.full(1, -1.0)), progress)
