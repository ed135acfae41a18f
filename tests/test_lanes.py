"""The lane paths (``moesim.sim.lanes``: FIFO's ring, LFU's and Belady's packed keys, eight layers at a
time; ``moesim.sim.across``: ARC and LeCaR with a layer in each SIMD lane) against the plain-Python
reference per layer and against the engine, and their way back to the engine where they do not
apply. The lanes are made to take every capacity up to every expert (each path's ``fullest`` 1), so
the full caches they leave to the engine by default are checked too; ARC's and LeCaR's lanes take every
capacity up to their ``WIDEST`` (ARC 64, LeCaR 24). LeCaR's reference runs whole traces: each layer draws from its own
stream, so a layer cut out of the trace would draw from layer 0's."""

from dataclasses import replace
from importlib import import_module
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference
from fast_paths import watched
from moesim.policies import arc_across, base, get_policy, lecar_across
from moesim.policies.base import Context
from moesim.policies.keyed_slots import make_keyed
from moesim.sim import across, lanes
from moesim.sim.config import CacheConfig
from moesim.sim.hitrate import simulate
from moesim.tracegen.synth import synth_trace

LANE_POLICIES = ("fifo", "lfu", "belady", "arc")
ACROSS_POLICIES = ("arc", "lecar")  # a layer in each SIMD lane
FAST = ("fifo", "lfu", "belady", "arc", "lecar")  # the policies with lanes of either kind
FULLEST = {name: get_policy(name).fast_paths[0].fullest for name in FAST}  # the defaults, before the fixture
WIDEST = {"arc": arc_across.WIDEST, "lecar": lecar_across.WIDEST}  # the slots each one's passes serve


def paths_changed(policy: str, **changes):
    """The policy's fast paths with ``changes`` made, for the duration of a ``with``."""
    spec = get_policy(policy)
    return mock.patch.object(import_module(f"moesim.policies.{policy}"), "SPEC",
                             replace(spec, fast_paths=tuple(replace(p, **changes) for p in spec.fast_paths)))


def making(policy: str):
    """The policy's first fast path (its lanes) with its ``make`` recorded: (the patch, the list each state made is
    added to)."""
    made = []
    return watched(policy, made), made


@pytest.fixture(autouse=True)
def every_capacity_in_lanes():
    """Every capacity of each fast path in its lanes, on every CPU (with 512-bit vectors or without)."""
    patches = [paths_changed(name, fullest=1.0, narrow=None) for name in FAST]
    for patch in patches:
        patch.start()
    yield
    for patch in patches:
        patch.stop()


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(LANE_POLICIES), seed=st.integers(0, 999), layers=st.sampled_from([1, 3, 8, 9, 17]),
       experts=st.sampled_from([2, 5, 8, 63, 64, 65, 300]), reset=st.booleans(), data=st.data())
def test_lanes_equal_the_reference_per_layer(policy, seed, layers, experts, reset, data):
    """Layer counts that fill no, one or several groups of eight (ARC: sixteen) with some lanes left
    over; slot counts drawn per layer from 1 to every expert (several vector blocks of keys at 300;
    ARC's lanes up to 64 slots, 8 to 64 wide)."""
    k = min(3, experts)
    trace = synth_trace(layers, experts, k, 3, 25, seed=seed)
    slots = tuple(data.draw(st.lists(st.integers(1, experts), min_size=layers, max_size=layers)))
    got = simulate(trace, CacheConfig(policy=policy, capacity=slots, semantics="sequential", reset=reset))
    want = [reference.hitrate(trace.experts[:, [layer]], trace.seq_offsets, experts, policy, slots[layer],
                              True, True, reset)[0][0] for layer in range(layers)]
    assert got.per_layer_hits == want


@pytest.mark.parametrize("policy", LANE_POLICIES + ("lecar",))
@pytest.mark.parametrize("reset", [False, True])
def test_lanes_equal_the_engine_on_the_bundled_trace(policy, reset, mixtral):
    for c in range(1, 9):
        cache = CacheConfig(policy=policy, capacity=c, semantics="sequential", reset=reset)
        lanes, engine = simulate(mixtral, cache), simulate(mixtral, cache, log_evictions=1)
        assert lanes.per_layer_hits == engine.per_layer_hits, c


def test_only_per_layer_sequential_runs_without_an_eviction_log_take_the_lanes(mixtral):
    patch, made = making("fifo")
    with patch:
        simulate(mixtral, CacheConfig(policy="fifo", capacity=4, semantics="sequential"))
        assert made
        made.clear()
        simulate(mixtral, CacheConfig(policy="fifo", capacity=4, semantics="sequential"), log_evictions=5)
        simulate(mixtral, CacheConfig(policy="fifo", capacity=4, semantics="step"))
        simulate(mixtral, CacheConfig(policy="fifo", capacity=32, scope="global", semantics="sequential"))
        assert not made
    patch, made = making("fifo")
    with patch, paths_changed("fifo", fullest=FULLEST["fifo"]):  # the default: 6 of Mixtral's 8 experts, not 7
        simulate(mixtral, CacheConfig(policy="fifo", capacity=(6, 7) * 16, semantics="sequential"))
        assert not made
        simulate(mixtral, CacheConfig(policy="fifo", capacity=6, semantics="sequential"))
        assert made


@pytest.mark.parametrize("policy", ["lfu", "belady", "arc", "lecar"])
def test_a_trace_too_long_for_the_keys_takes_the_engine(policy, mixtral):
    """A path's ``make`` gives up (None) where the keys would overflow; the engine's hits come back."""
    cache = CacheConfig(policy=policy, capacity=4, semantics="sequential")
    tried = []
    with paths_changed(policy, make=lambda *a: tried.append(a) and None):
        assert simulate(mixtral, cache).per_layer_hits == simulate(mixtral, cache, log_evictions=1).per_layer_hits
        assert tried


@pytest.mark.parametrize("policy", ACROSS_POLICIES)
def test_across_policies_take_their_lanes_up_to_the_widest_and_the_fullest(policy):
    """ARC and LeCaR per layer under sequential semantics run in the lanes up to ``WIDEST`` slots and,
    in lanes wider than eight slots, up to their default ``fullest`` share of a layer's experts;
    eight-slot lanes at any fullness; elsewhere not the lanes (the layer path, tests/test_layer_paths.py)."""
    most, wide = int(FULLEST[policy] * 40), 2 * WIDEST[policy] + 16
    cases = ((wide, (WIDEST[policy] + 1, 1), False), (wide, (WIDEST[policy], 1), True), (40, (most, 1), True),
             (40, (most + 1, 1), False), (8, (8, 8), True), (9, (8, 9), False))
    patch, made = making(policy)
    with patch, paths_changed(policy, fullest=FULLEST[policy]):
        for experts, slots, in_lanes in cases:
            simulate(synth_trace(2, experts, 2, 2, 30, seed=1), CacheConfig(policy=policy, capacity=slots,
                                                                            semantics="sequential"))
            assert any(state is not None for state in made) == in_lanes, (experts, slots)
            made.clear()


@pytest.mark.parametrize("policy", ACROSS_POLICIES)
@pytest.mark.parametrize("wide", [True, False])
def test_without_512_bit_vectors_lanes_past_eight_slots_give_way(policy, wide, monkeypatch):
    """On a CPU without AVX-512 a loop over sixteen lanes takes two instructions, and ARC's and LeCaR's lanes past 8
    slots ran slower than the engine (docs/benchmarks.md): there they serve 8 slots at most; with AVX-512, their
    ``WIDEST``. Past them the layer paths run (tests/test_layer_paths.py)."""
    monkeypatch.setattr(base, "WIDE_VECTORS", wide)
    patch, made = making(policy)
    with patch, paths_changed(policy, narrow=base.NARROW_LANES):
        for slots, in_lanes in ((base.NARROW_LANES, True), (base.NARROW_LANES + 1, wide)):
            simulate(synth_trace(2, 40, 2, 2, 30, seed=1), CacheConfig(policy=policy, capacity=slots,
                                                                          semantics="sequential"))
            assert any(state is not None for state in made) == in_lanes, slots
            made.clear()


@settings(max_examples=40, deadline=None)
@given(policy=st.sampled_from(ACROSS_POLICIES), seed=st.integers(0, 999), layers=st.sampled_from([1, 15, 16, 17, 33]),
       experts=st.sampled_from([2, 5, 9, 16, 40]), reset=st.booleans(), data=st.data())
def test_across_lanes_equal_the_reference_per_layer(policy, seed, layers, experts, reset, data):
    """ARC's and LeCaR's lanes (``moesim.sim.across``) on group sizes around sixteen, at every slot
    width up to each one's ``WIDEST`` (and the 40 experts), long enough for ARC's ghost lists and target p, LeCaR's
    histories and weights, to cycle."""
    k = min(3, experts)
    trace = synth_trace(layers, experts, k, 3, 60, seed=seed)
    slots = tuple(data.draw(st.lists(st.integers(1, min(experts, WIDEST[policy])), min_size=layers, max_size=layers)))
    got = simulate(trace, CacheConfig(policy=policy, capacity=slots, semantics="sequential", reset=reset))
    want = reference.hitrate(trace.experts, trace.seq_offsets, experts, policy, list(slots), True, True, reset)[0]
    assert got.per_layer_hits == want


@pytest.mark.parametrize("policy,capacity", [(policy, capacity) for policy in ACROSS_POLICIES
                                             for capacity in (7, 8, 9, 16, 17, 23, 24)] +
                         [("arc", capacity) for capacity in (25, 31, 32, 33, 40, 41, 56, 57, arc_across.WIDEST)])
def test_across_lanes_fill_every_slot_of_each_width(policy, capacity):
    """Each width's first and last slot in use (a capacity at and past each multiple of eight, up to each one's
    ``WIDEST``: LeCaR's 24, ARC's 64), on a trace that fills the cache and cycles ARC's ghosts and LeCaR's
    histories, against the reference."""
    experts = 40 if capacity <= 32 else 90
    trace = synth_trace(2, experts, 3, 2, 200, seed=capacity)
    patch, made = making(policy)
    with patch:
        got = simulate(trace, CacheConfig(policy=policy, capacity=capacity, semantics="sequential"))
    assert made and all(state is not None for state in made)  # the lanes ran it
    assert got.per_layer_hits == reference.hitrate(trace.experts, trace.seq_offsets, experts, policy, capacity, True,
                                                   True, False)[0]


def test_arc_lane_keys_that_would_overflow_are_refused():
    """A key is up to T + WIDTH in magnitude and must stay below 2^31 - 1; the passes serve up to 64
    slots."""
    make_across = get_policy("arc").fast_paths[0].make
    slots = np.array([8, 8], np.int64)
    for rows, fits in ((2 ** 31 - 1 - 8) // 4 - 1, True), ((2 ** 31 - 1 - 8) // 4 + 1, False):
        experts = np.lib.stride_tricks.as_strided(np.zeros(1, np.int16), (rows, 2, 2), (0, 0, 0))
        ctx = Context(experts, np.array([0, rows], np.int64), 8, slots, True, True, False)
        assert (make_across(ctx, np.zeros(16, np.int64), 8) is not None) == fits
    ctx = Context(np.zeros((4, 2, 2), np.int16), np.array([0, 4], np.int64), 64, slots, True, True, False)
    assert make_across(ctx, np.zeros(16, np.int64), 64) is not None
    assert make_across(ctx, np.zeros(16, np.int64), 72) is None  # past the slots its passes serve


def test_lecar_lane_clocks_that_would_overflow_are_refused():
    """A clock is up to rows * k and, with WIDTH added, must stay below 2^31 - 1; the passes serve up
    to 24 slots."""
    make_across = get_policy("lecar").fast_paths[0].make
    slots = np.array([8, 8], np.int64)
    for rows, fits in ((2 ** 31 - 1 - 8) // 2, True), ((2 ** 31 - 1 - 8) // 2 + 1, False):
        experts = np.lib.stride_tricks.as_strided(np.zeros(1, np.int16), (rows, 2, 2), (0, 0, 0))
        ctx = Context(experts, np.array([0, rows], np.int64), 8, slots, True, True, False, {"seed": 0})
        assert (make_across(ctx, np.zeros(16, np.int64), 8) is not None) == fits
    ctx = Context(np.zeros((4, 2, 2), np.int16), np.array([0, 4], np.int64), 64, slots, True, True, False, {"seed": 0})
    assert make_across(ctx, np.zeros(16, np.int64), 24) is not None
    assert make_across(ctx, np.zeros(16, np.int64), 32) is None


def test_keys_that_would_overflow_are_refused():
    experts = np.zeros((4, 2, 2), np.int16)
    ctx = Context(experts, np.array([0, 4], np.int64), 300, np.array([300, 300], np.int64), True, True, False)
    assert make_keyed(ctx, 8, 1 << 52) is not None  # 53 bits of key above 9 of slot
    assert make_keyed(ctx, 8, 1 << 53) is None


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 999), layers=st.sampled_from([1, 16, 17]), experts=st.sampled_from([3, 5, 9, 16]),
       data=st.data())
def test_lecar_lanes_end_in_the_reference_state(seed, layers, experts, data):
    """Not only the hits: each lane's residents (slot by slot, with their counts), both histories
    (ids oldest first) and w_LRU end as the reference's. A history's content moves the hits only
    when an id in it is asked for again, and its oldest id weighs a penalty near 1."""
    trace = synth_trace(layers, experts, min(3, experts), 1, 80, seed=seed)
    slots = data.draw(st.lists(st.integers(1, min(experts - 1, WIDEST["lecar"])), min_size=layers, max_size=layers))
    patch, made = making("lecar")
    with patch:
        simulate(trace, CacheConfig(policy="lecar", capacity=tuple(slots), semantics="sequential"))
    cache = reference.Cache("lecar", trace.experts, trace.seq_offsets, experts, slots, True, True, False, {})
    reference.play(cache, trace.experts, trace.seq_offsets, experts, True, False)
    groups = [state for state in made if state is not None][-(-layers // across.LANES):]
    for layer in range(layers):
        (block, (floats, _), _), lane = groups[layer // across.LANES], layer % across.LANES
        slots_of = block.reshape(-1, across.LANES)[lecar_across.FIELDS:, lane]  # 3 resident fields, 2 history
        width = slots_of.shape[0] // (lecar_across.LAST + 1 + 2 * (lecar_across.HKEY + 1))
        resident = slots_of[:(lecar_across.LAST + 1) * width].reshape(-1, width)
        history = slots_of[(lecar_across.LAST + 1) * width:].reshape(-1, 2 * width)
        ein, cnt = resident[lecar_across.EIN], resident[lecar_across.CNT]
        hexp, hkey = history[lecar_across.HEXP], history[lecar_across.HKEY]
        pol, lo, c = cache.policies[layer], cache.lo[layer], slots[layer]
        assert [-1 if o is None else o % experts for o in cache.slots[lo:lo + c]] == list(ein[:c])
        assert [pol.count[o] for o in cache.slots[lo:lo + c] if o is not None] == list(cnt[:c][ein[:c] >= 0])
        for h in range(2):
            ids = hexp[h * width:(h + 1) * width][np.argsort(hkey[h * width:(h + 1) * width])]
            assert [o % experts for o in pol.histories[h]] == list(ids[ids >= 0]), h
        assert floats[layer % across.LANES] == pytest.approx(pol.w, rel=1e-12)


def test_the_probe_reads_the_stack_and_the_block_sits_above_it():
    """``stack_address`` is an address in this thread's stack (the main thread's: ``[stack]`` in the memory
    map); ``packed`` starts the block, the counters first, within 64 bytes past ``ABOVE_STACK`` beyond it in
    the page, keeps every array's values, and gives no byte the low 12 bits of one from 512 bytes below that
    stack address (the loop's frame) to ``ABOVE_STACK`` above it (the arguments the call passes on the
    stack)."""
    ctx = Context(np.zeros((4, 2, 2), np.int16), np.array([0, 4], np.int64), 64, np.array([16, 16]), True, True, False)
    state = get_policy("lfu").fast_paths[0].make(ctx, lanes.LANES)
    state = state._replace(key=np.arange(state.key.size, dtype=np.int64).reshape(state.key.shape))
    scratch, hits = np.arange(3 * lanes.LANES, dtype=np.int64).reshape(3, lanes.LANES), np.zeros(8, np.int64)
    stack = lanes.stack_address(ctx.experts, ctx.seq_offsets, ctx.slots, False, state, scratch, hits)
    with open("/proc/self/maps") as maps:
        low, high = next([int(a, 16) for a in line.split()[0].split("-")] for line in maps if "[stack]" in line)
    assert low <= stack < high
    for probed in (stack, stack + 1000, stack + 4095):
        placed, moved = lanes.packed(state, scratch, probed)
        arrays = (*placed[:3], moved)
        assert moved.ctypes.data == min(a.ctypes.data for a in arrays) and moved.ctypes.data % 64 == 0
        assert 0 <= (moved.ctypes.data - probed - lanes.ABOVE_STACK) % 4096 < 64
        frame = {(probed + b) % 4096 for b in range(-512, lanes.ABOVE_STACK)}
        assert not any((a.ctypes.data + b) % 4096 in frame for a in arrays for b in range(a.nbytes))
        assert all(np.array_equal(a, b) for a, b in zip(arrays, (*state[:3], scratch)))
