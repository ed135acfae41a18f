"""What every policy module shares: its context, the hook contract, how it declares its fast paths,
no-op hooks and the helpers several policies use.

A policy module defines ``SPEC``, a ``PolicySpec``: its name, ``make_state(ctx)`` returning its state as a
``NamedTuple`` of arrays (fields read by name, never by position), its njit hooks (``hooks(...)``), which
``moesim.sim.engine.bind`` compiles into the hit-rate loop and into the discrete-event loop, its parameters
(``moesim.params.Param``), and what it declares of itself (``PolicySpec``'s fields). ``moesim.policies.get_policy``
returns it.

The hooks, reached in a loop's code as ``policy.<hook>`` (``UNBOUND`` until ``bind`` compiles the loop
with a policy's table); those a policy leaves out are no-ops (``on_miss`` then admits every miss):

- ``reset(st)``: forget everything (start, and each sequence when the cache resets).
- ``on_step(st, part, layer, row, ranked, t)``: R for (row, layer) arrives; ``ranked`` is int16[W]
  (W = k in the hit-rate engine; the discrete-event engine's batched rows are wider and pad with -1).
- ``on_hit(st, part, slot, obj, t)``: one access that found ``obj`` resident.
- ``on_miss(st, part, obj, t) -> bool``: one access that missed, before any eviction; False leaves
  ``obj`` uncached (a bypass: it is served from the slow tier and nothing is evicted).
- ``on_prefetch(st, part, obj, t)``: ``obj`` is about to be loaded without being requested (a
  prefetch or a preload, DESIGN.md: "no access"). ``place`` follows, as after an admitted miss; a
  policy that treats a fill unlike a demand load records that here and applies it in ``on_insert``.
- ``choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t) -> slot``: slots
  ``lo..hi-1`` are full; never pick a slot whose object has ``mark[o] == stamp`` (it is in R, or
  protected while a prefetch is placed); -1 leaves ``obj`` uncached.
- ``on_evict(st, part, slot, obj, t)`` and ``on_insert(st, part, slot, obj, t)``.
- ``on_move(st, part, src, dst, obj)``: ``obj`` moved from slot ``src`` to slot ``dst`` of its partition, not an
  access (the discrete-event engine giving slots back: ``moesim.sim.des_loop.fit_live``); a policy whose state is
  kept per slot follows it.

``t`` is a clock: the flat position ``(row * L + layer) * W + j`` of an access. A prefetch carries the
position of the cell that issues it (before the accesses it anticipates); a preload at the start of
a row carries the position just before the row.

State lives in the named tuple of arrays the policy built, so an engine compiles once per policy (the
discrete-event loop once per group of policies, ``moesim.sim.policy_groups``) and never changes when a policy
is added. The hooks are inlined into the loop, which runs without
reference counting: they must not allocate arrays (do that in ``make_state``).

**Unsigned indices on the hot paths.** Numba reads ``a[i]`` with a signed ``i`` as ``a[i + len(a)]`` when ``i``
is negative, and unless LLVM can prove ``i >= 0`` (a ``range`` counter) it computes that at every access: a shift,
an AND with the length (loaded, often from the stack) and an add, on the index's path to the load. An index
computed from loaded values (an object ``layer * E + expert``, a list link, a slot) is cast to ``uint64`` where
it is used (``node_at``, ``end_at``; ``o = uint64(obj)`` in the loops), which leaves it none; arithmetic stays signed,
or all unsigned where wrapping around is harmless (FIFO's ring, ``keyed_place``): numba makes a mixed signed and
unsigned sum a float. docs/benchmarks.md gives what the casts gained ("Other router shapes"; "Unsigned indices and
LRU's list of slots").
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np
from llvmlite import binding as llvm
from numba import njit, uint64
from numba.core import types as nbtypes
from numba.extending import intrinsic

from moesim.params import Param


@dataclass(frozen=True)
class Context:
    """What ``make_state`` may look at: the trace being simulated and the cache configuration."""

    experts: np.ndarray          # int16 [rows, L, W], W >= k; -1 entries are padding, not requests
    seq_offsets: np.ndarray      # int64 [S + 1]
    num_experts: int
    slots: np.ndarray            # int64 [num_parts]: each partition's slots
    per_layer: bool
    sequential: bool
    reset_each_seq: bool
    params: dict = field(default_factory=dict)
    clock_rows: int | None = None  # rows the run's clock will count (default: those of ``experts``)

    @property
    def num_rows(self) -> int:
        """Rows the run serves: the clock's extent (``on_step``'s row is below it)."""
        return self.experts.shape[0] if self.clock_rows is None else self.clock_rows

    @property
    def num_layers(self) -> int:
        return self.experts.shape[1]

    @property
    def top_k(self) -> int:
        return self.experts.shape[2]

    @property
    def num_objects(self) -> int:
        return self.num_layers * self.num_experts

    @property
    def num_parts(self) -> int:
        return self.num_layers if self.per_layer else 1

    def layer_major(self) -> np.ndarray:
        """The experts as [L, rows, W], each layer's accesses contiguous, for a path that runs a layer at a time
        (ARC's lists, LeCaR's keyed slots): read across the rows instead, a step of every layer's experts apart,
        LeCaR's keyed slots ran at 0.7 of the speed."""
        return np.ascontiguousarray(self.experts.transpose(1, 0, 2))


@njit(cache=True)
def no_reset(st):
    pass


@njit(cache=True)
def no_step(st, part, layer, row, ranked, t):
    pass


@njit(cache=True)
def no_access(st, part, slot, obj, t):
    pass


@njit(cache=True)
def admit(st, part, obj, t):
    return True


@njit(cache=True)
def no_prefetch(st, part, obj, t):
    pass


@njit(cache=True)
def no_move(st, part, src, dst, obj):
    pass


# each hook's arguments after the state ``st``, as the contract above names them
HOOK_ARGS = dict(reset="", on_step="part, layer, row, ranked, t", on_hit="part, slot, obj, t", on_miss="part, obj, t",
                 on_prefetch="part, obj, t", choose_victim="part, lo, hi, obj_of, slot_of, mark, stamp, obj, t",
                 on_evict="part, slot, obj, t", on_insert="part, slot, obj, t", on_move="part, src, dst, obj")
HOOK_NAMES = tuple(HOOK_ARGS)
DEFAULT_HOOKS = dict(reset=no_reset, on_step=no_step, on_hit=no_access, on_miss=admit, on_prefetch=no_prefetch,
                     on_evict=no_access, on_insert=no_access, on_move=no_move)


def hooks(**given) -> dict:
    """A policy's hooks: ``choose_victim`` and any of ``HOOK_NAMES``; the others are the no-ops above."""
    unknown = set(given) - set(HOOK_NAMES)
    if unknown or "choose_victim" not in given:
        raise TypeError(f"hooks are {', '.join(HOOK_NAMES)} (choose_victim required), got {', '.join(sorted(given))}")
    return {**DEFAULT_HOOKS, **given}


# What ``policy`` names in a loop's code (``policy.on_hit(...)``) until ``moesim.sim.engine.bind`` compiles
# the loop with a policy's hook table in its place: a namespace with no hooks, so an unbound loop fails
# to compile rather than run without a policy.
UNBOUND = types.ModuleType("moesim.policies.unbound")


@dataclass(frozen=True)
class FastPath:
    """A backend that gives a policy's hits per layer faster than the engine, for caches per layer under
    sequential semantics (``moesim.sim.hits.count_hits`` tries a policy's ``fast_paths`` in order).

    ``kind`` names the driver in ``moesim.sim``: ``"counts"`` (``make`` is the policy's own whole-run
    function, ``make(ctx) -> hits per layer``, or None where it does not fit the trace), ``"lanes"``
    (``moesim.sim.lanes``: ``make(ctx, lanes)`` builds the state, ``hooks`` are ``lane_reset`` and
    ``lane_access``) or ``"across"`` (``moesim.sim.across``: ``make(ctx, layers, width)``, ``hooks``
    ``across_reset`` and ``across_step``). It serves caches of at most ``widest`` slots (None: any), at most
    ``narrow`` on a CPU without 512-bit vectors (``WIDE_VECTORS``; None: as many), where a loop over sixteen
    lanes takes two instructions, not one, and wider lanes lose to the engine; and, where ``crowded`` slots or
    more, at most ``fullest`` of a layer's experts: there nearly every access hits, a branch on a hit is predicted,
    and the engine (or the policy's next fast path) is faster (the crossovers are measured in docs/benchmarks.md)."""

    kind: str
    make: Callable
    hooks: dict = field(default_factory=dict)
    fullest: float = 1.0
    crowded: int = 0
    widest: int | None = None
    narrow: int | None = None

    def takes(self, most: int, num_experts: int) -> bool:
        """Whether it serves caches of up to ``most`` slots in layers of ``num_experts`` experts."""
        widest = self.widest if WIDE_VECTORS or self.narrow is None else self.narrow
        if widest is not None and most > widest:
            return False
        return most <= self.crowded or most <= self.fullest * num_experts


@njit(cache=True, inline="always")
def lane_at(field, lanes, lane):
    """Where lane ``lane``'s entry of field ``field`` sits in a block laid out field-major, ``lanes`` entries a
    field (``moesim.sim.across``'s lanes): a compile-time offset plus the lane, unsigned, the only address
    form LLVM vectorises a loop over the lanes with."""
    return uint64(field) * lanes + lane


def _wide_vectors() -> bool:
    """Whether this CPU has 512-bit vectors (AVX-512F, as LLVM reads the host)."""
    try:
        return bool(llvm.get_host_cpu_features().get("avx512f"))
    except RuntimeError:  # a host LLVM cannot read
        return False


WIDE_VECTORS = _wide_vectors()
NARROW_LANES = 8  # the widest lanes across layers worth running without them: on AVX2 ARC's and LeCaR's beat the engine
# at 8 slots, trail it slightly at 16 and by up to 2.4 times past (docs/benchmarks.md)


@intrinsic
def prefer_wide_vectors(typingctx):
    """Marks the function that calls it ``"prefer-vector-width"="512"``. LLVM's tuning for Intel's AVX-512 cores
    (Skylake-X onward) caps the loop vectoriser at 256-bit vectors, set for the clock penalty 512-bit instructions
    had on Skylake-era servers; a loop over sixteen int32 lanes or 64 one-byte ranks then takes two instructions
    where one would do. With the cap lifted ARC's and LeCaR's lanes (``moesim.sim.across``) and LRU's ranks at 128
    and 160 experts (``moesim.policies.lru_ranks``) ran faster (docs/benchmarks.md); a CPU without AVX-512 ignores
    it. Not used by ``moesim.sim.lanes``: tried process-wide, LFU's lanes lost speed. llvmlite accepts only its
    known attribute names, so the string attribute is put into the function's attribute set directly; it is
    written verbatim into the ``define`` line."""
    def codegen(context, builder, signature, args):
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()
    return nbtypes.none(), codegen


# the orders a stack algorithm keeps (``Stack.order``); ``moesim.sim.mrc`` moves an object up each
RECENCY, NEXT_USE, DECAYED_COUNT = "recency", "next-use", "decayed-count"


@dataclass(frozen=True)
class Stack:
    """A policy that is a stack algorithm (Mattson et al., 1970) under ``semantics``: its cache of C holds
    the first C objects of an ``order`` (``RECENCY``, ``NEXT_USE``, ``DECAYED_COUNT``) that does not
    depend on C, so ``moesim.sim.mrc`` finds its hits at every capacity in one pass. ``histogram``
    (optional) is the policy's own pass for caches per layer, ``histogram(experts, seq_offsets,
    num_experts, reset) -> int64 [L, E + 1]`` of stack distances (column E: first uses); ``decay(params,
    rows)`` gives a ``DECAYED_COUNT`` order's γ^d for d = 0..rows, as the policy tabulates it."""

    order: str
    semantics: tuple
    histogram: Callable | None = None
    decay: Callable | None = None


SEED = Param(0, "seed", "Seed of the policy's random choices (random, lecar).")  # one setting for both


@dataclass(frozen=True)
class PolicySpec:
    """A replacement policy as the engines, ``mrc``, serving and the command line read it.

    - ``params``: its parameters, name -> ``moesim.params.Param``;
    - ``bypasses``: it may leave a missed expert uncached (the memory account then keeps a scratch buffer for it);
    - ``reads_rows``: ``make_state`` reads the rows the run will serve ahead of serving them (Belady's next uses,
      ML-FFN's predictions), so it cannot serve steps formed while the run goes on (``moesim.sim.serve``);
    - ``resizable``: its ``choose_victim`` ignores the object being placed and its state does not depend on the
      capacity (it may be sized for the slots the run starts with, and follow them: ``on_move``), so the engine may
      take slots away between steps (a served stream's KV cache growing: ``moesim.sim.des_loop.fit_live``);
    - ``fast_paths``: ``FastPath``s, faster backends that give the engine's hits per layer under sequential
      semantics (tried in order; the first that takes the run runs it);
    - ``stack``: a ``Stack`` when it is a stack algorithm (``moesim.sim.mrc``: its whole miss-ratio curve in one
      pass)."""

    name: str
    make_state: Callable
    hooks: dict
    params: dict = field(default_factory=dict)
    bypasses: bool = False
    reads_rows: bool = False
    resizable: bool = False
    fast_paths: tuple = ()
    stack: Stack | None = None

    def __post_init__(self):
        if set(self.hooks) != set(HOOK_NAMES) or not all(isinstance(p, Param) for p in self.params.values()):
            raise TypeError(f"policy {self.name}: its hooks come from hooks(...) and its params are Params")


@njit(cache=True, inline="always")
def min_key_slot(key, tie, lo, hi, obj_of, mark, stamp):
    """The slot in lo..hi-1 whose object has the smallest ``(key[obj], tie[obj])``, skipping R.

    Equal pairs go to the lowest slot.
    """
    best, best_key, best_tie = -1, 0.0, 0.0
    for slot in range(lo, hi):
        obj = obj_of[slot]
        if mark[obj] == stamp:
            continue
        k = key[obj]
        if best < 0 or k < best_key or (k == best_key and tie[obj] < best_tie):
            best, best_key, best_tie = slot, k, tie[obj]
    return best


# Doubly linked lists, several per partition (LRU order, FIFO order, ARC's T1/T2/B1/B2, LeCaR's histories), over
# object ids or, for a policy whose state follows the slots (LRU's, FIFO's and LIFO's order), over slot numbers.
# node holds (prev, next, list it is on) of each node and ends (head, tail, size) of each partition's lists,
# columns named below; the head is the most recent end. Both are flat tables whose rows have a width fixed at
# compile time: numba's two-dimensional indexing multiplies by a stride it loads from the array on every read,
# which lengthened each step of a list walk by about as much as the read itself. Their offsets are unsigned
# (``node_at``, ``end_at``; module docstring); measured one loop at a time that cost no compile time.
PREV, NEXT, WHICH = 0, 1, 2
HEAD, TAIL, SIZE = 0, 1, 2
MAX_LISTS = 4  # lists per partition (ARC's four)


class Lists(NamedTuple):
    node: np.ndarray  # int64 [nodes * 3]: PREV, NEXT, WHICH of each node (an object, or a slot)
    ends: np.ndarray  # int64 [partitions * MAX_LISTS * 3]: HEAD, TAIL, SIZE of each partition's lists


def make_lists(num_nodes: int, num_parts: int, num_lists: int) -> Lists:
    if num_lists > MAX_LISTS:
        raise ValueError(f"at most {MAX_LISTS} lists a partition, not {num_lists}")
    lists = Lists(np.empty(num_nodes * 3, np.int64), np.empty(num_parts * MAX_LISTS * 3, np.int64))
    lists_clear.py_func(lists)
    return lists


@njit(cache=True, inline="always")
def lists_clear(lists):
    lists.node[:] = -1
    ends = lists.ends
    for i in range(0, ends.shape[0], 3):
        ends[i + HEAD] = -1
        ends[i + TAIL] = -1
        ends[i + SIZE] = 0


@njit(cache=True, inline="always")
def node_at(n, field):
    """Where node ``n``'s ``field`` (PREV, NEXT, WHICH) is in ``Lists.node``, unsigned (module docstring)."""
    return uint64(n * 3 + field)


@njit(cache=True, inline="always")
def end_at(part, li, field):
    """Where list ``li`` of partition ``part`` keeps ``field`` (HEAD, TAIL, SIZE) in ``Lists.ends``, unsigned."""
    return uint64((part * MAX_LISTS + li) * 3 + field)


@njit(cache=True, inline="always")
def list_size(lists, part, li):
    return lists.ends[end_at(part, li, SIZE)]


@njit(cache=True, inline="always")
def list_head(lists, part, li):
    return lists.ends[end_at(part, li, HEAD)]


@njit(cache=True, inline="always")
def list_tail(lists, part, li):
    return lists.ends[end_at(part, li, TAIL)]


@njit(cache=True, inline="always")
def list_next(lists, obj):
    """The node after ``obj`` (an object, or a slot) towards the tail (-1: none)."""
    return lists.node[node_at(obj, NEXT)]


@njit(cache=True, inline="always")
def list_of(lists, obj):
    return lists.node[node_at(obj, WHICH)]


@njit(cache=True, inline="always")
def list_push_head(lists, part, li, obj):
    node, ends = lists.node, lists.ends
    head = ends[end_at(part, li, HEAD)]
    node[node_at(obj, PREV)] = -1
    node[node_at(obj, NEXT)] = head
    if head >= 0:
        node[node_at(head, PREV)] = obj
    else:
        ends[end_at(part, li, TAIL)] = obj
    ends[end_at(part, li, HEAD)] = obj
    node[node_at(obj, WHICH)] = li
    ends[end_at(part, li, SIZE)] += 1


@njit(cache=True, inline="always")
def _bridge(lists, part, li, prev, nxt, after_prev, before_next):
    """Where a node between ``prev`` and ``nxt`` on list ``li`` leaves: ``prev`` (or the head, if -1) now leads
    to ``after_prev`` and ``nxt`` (or the tail, if -1) back to ``before_next``."""
    node, ends = lists.node, lists.ends
    if prev >= 0:
        node[node_at(prev, NEXT)] = after_prev
    else:
        ends[end_at(part, li, HEAD)] = after_prev
    if nxt >= 0:
        node[node_at(nxt, PREV)] = before_next
    else:
        ends[end_at(part, li, TAIL)] = before_next


@njit(cache=True, inline="always")
def list_remove(lists, part, obj):
    node, ends = lists.node, lists.ends
    li = node[node_at(obj, WHICH)]
    prev = node[node_at(obj, PREV)]
    nxt = node[node_at(obj, NEXT)]
    _bridge(lists, part, li, prev, nxt, nxt, prev)
    node[node_at(obj, PREV)] = -1
    node[node_at(obj, NEXT)] = -1
    node[node_at(obj, WHICH)] = -1
    ends[end_at(part, li, SIZE)] -= 1


@njit(cache=True, inline="always")
def list_to_head(lists, part, li, obj):
    """Move ``obj``, on list ``li``, to its head (``list_remove`` then ``list_push_head``, in fewer steps)."""
    node, ends = lists.node, lists.ends
    head = ends[end_at(part, li, HEAD)]
    if head == obj:
        return
    prev = node[node_at(obj, PREV)]  # not the head: it has one
    nxt = node[node_at(obj, NEXT)]
    node[node_at(prev, NEXT)] = nxt
    if nxt >= 0:
        node[node_at(nxt, PREV)] = prev
    else:
        ends[end_at(part, li, TAIL)] = prev
    node[node_at(obj, PREV)] = -1
    node[node_at(obj, NEXT)] = head
    node[node_at(head, PREV)] = obj
    ends[end_at(part, li, HEAD)] = obj


@njit(cache=True, inline="always")
def list_first_unmarked(lists, part, li, end, mark, stamp, obj_of=None):
    """Walking list ``li`` from ``end`` (TAIL: oldest first, HEAD: newest first), the first
    node whose object is not in R, or -1: a list of objects, or with ``obj_of`` one of slots."""
    node = lists.node
    step = PREV if end == TAIL else NEXT
    n = lists.ends[end_at(part, li, end)]
    while n >= 0 and mark[object_at(n, obj_of)] == stamp:
        n = node[node_at(n, step)]
    return n


@njit(cache=True, inline="always")
def object_at(n, obj_of):
    """The object of node ``n``: the node itself, or in a list of slots (``obj_of`` given) the slot's, unsigned."""
    if obj_of is None:
        return uint64(n)
    return uint64(obj_of[uint64(n)])


@njit(cache=True, inline="always")
def list_rename(lists, part, old, new):
    """Node ``new`` (not on a list) takes ``old``'s place on its list, and ``old`` leaves it (``on_move`` of a
    policy whose lists hold slots)."""
    node = lists.node
    li, prev, nxt = node[node_at(old, WHICH)], node[node_at(old, PREV)], node[node_at(old, NEXT)]
    node[node_at(new, WHICH)], node[node_at(new, PREV)], node[node_at(new, NEXT)] = li, prev, nxt
    _bridge(lists, part, li, prev, nxt, new, new)
    node[node_at(old, PREV)], node[node_at(old, NEXT)], node[node_at(old, WHICH)] = -1, -1, -1


# A seeded generator that lives in the policy's state: SplitMix64 (Steele, Lea & Flood, OOPSLA 2014),
# one stream per partition. rng = uint64[parts, 2] = (start, position) per partition; partition p's
# stream is the seed's, started p * STREAM draws in (disjoint for fewer than STREAM draws each), so
# partition 0 draws what a single generator of the seed draws. No global state.
GOLDEN, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
STREAM = 1 << 40


def rng_starts(seed: int, parts: int) -> np.ndarray:
    """Where each partition's stream starts: seed + p * STREAM * golden (mod 2^64)."""
    return np.array([(seed + p * STREAM * int(GOLDEN)) % (1 << 64) for p in range(parts)], np.uint64)


def make_rng(seed: int, parts: int = 1) -> np.ndarray:
    return np.repeat(rng_starts(seed, parts)[:, None], 2, axis=1)


@njit(cache=True, inline="always")
def rng_reset(rng):
    for part in range(rng.shape[0]):
        rng[part, 1] = rng[part, 0]


@njit(cache=True, inline="always")
def rng_at(position):
    """The draw at a stream's ``position`` (after its step), uniform in [0, 1)."""
    z = position
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, inline="always")
def rng_uniform(rng, part):
    """Partition ``part``'s next draw, uniform in [0, 1)."""
    rng[part, 1] += GOLDEN
    return rng_at(rng[part, 1])
