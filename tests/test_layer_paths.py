"""The paths that run a layer at a time past the lanes, ARC's lists (``moesim.policies.arc_lists``) and LeCaR's
keyed slots (``moesim.policies.lecar_keyed``, a victim found only on an eviction), against the plain-Python
reference and the engine at every capacity up to every expert, and where each serves."""


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference
from fast_paths import watched
from moesim.policies import arc_across, base, get_policy, lecar_across, lecar_keyed
from moesim.policies.base import Context
from moesim.policies.keyed_slots import slot_bits
from moesim.policies.lecar import penalty_tables
from moesim.sim.config import CacheConfig
from moesim.sim.hitrate import simulate
from moesim.tracegen.synth import synth_trace


POLICIES = ("arc", "lecar")
WIDEST = {"arc": arc_across.WIDEST, "lecar": lecar_across.WIDEST}  # their lanes' widest with 512-bit vectors


def recorded(policy: str, made: list, lanes: bool = False):
    """The policy with its layer path recorded (each run's hits added to ``made``), for the duration of a ``with``;
    its only fast path, or after its lanes if ``lanes``."""
    return watched(policy, made, index=1, alone=not lanes)


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(POLICIES), seed=st.integers(0, 999), layers=st.sampled_from([1, 3, 8]),
       experts=st.sampled_from([2, 5, 9, 40, 130]), reset=st.booleans(), data=st.data())
def test_layer_paths_equal_the_reference(policy, seed, layers, experts, reset, data):
    """Slot counts drawn per layer from 1 to every expert, on traces long enough for ARC's ghosts and target p,
    LeCaR's histories and weights, to cycle; LeCaR's reference runs whole traces (each layer draws from its own
    stream)."""
    trace = synth_trace(layers, experts, min(3, experts), 3, 60, seed=seed)
    slots = tuple(data.draw(st.lists(st.integers(1, experts), min_size=layers, max_size=layers)))
    made = []
    with recorded(policy, made):
        got = simulate(trace, CacheConfig(policy=policy, capacity=slots, semantics="sequential", reset=reset))
    assert made and made[-1] is not None
    want = reference.hitrate(trace.experts, trace.seq_offsets, experts, policy, list(slots), True, True, reset)[0]
    assert got.per_layer_hits == want


@pytest.mark.parametrize("seed", [0, 12345])
@pytest.mark.parametrize("capacity", [3, 40, 100, 160])
def test_keyed_lecar_equals_the_engine_at_every_seed(seed, capacity):
    """The seed's stream per layer, restarted at each reset; up to every expert resident."""
    trace = synth_trace(4, 160, 6, 4, 150, seed=seed)
    for reset in (False, True):
        cache = CacheConfig(policy="lecar", capacity=capacity, semantics="sequential", reset=reset,
                            params={"seed": seed})
        made = []
        with recorded("lecar", made):
            keyed = simulate(trace, cache)
        assert made and made[-1] is not None
        assert keyed.per_layer_hits == simulate(trace, cache, log_evictions=1).per_layer_hits


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("reset", [False, True])
def test_layer_paths_on_the_bundled_trace(policy, reset, mixtral):
    for c in range(1, 9):
        cache = CacheConfig(policy=policy, capacity=c, semantics="sequential", reset=reset)
        made = []
        with recorded(policy, made):
            got = simulate(mixtral, cache)
        assert made and made[-1] is not None
        assert got.per_layer_hits == simulate(mixtral, cache, log_evictions=1).per_layer_hits, c


def test_lecar_keys_that_would_overflow_take_the_engine():
    """A LeCaR key packs (count, clock, slot): two clocks up to a layer's accesses + 1 and the slot's bits must fit
    62 bits: 28 bits a clock (up to 2^28 - 1) beside 6 for slots 0..39 (padded to 40), not beside 7 for 0..71; a
    trace of 2^28 accesses a layer is past them, and its path gives way."""
    assert slot_bits(np.array([33, 40])) == (40, 6) and slot_bits(np.array([72])) == (72, 7)
    assert lecar_keyed.key_bits(2 ** 28 - 2, 6) == (6, 34)
    assert lecar_keyed.key_bits(2 ** 28 - 1, 6) is None
    assert lecar_keyed.key_bits(2 ** 28 - 2, 7) is None
    experts = np.lib.stride_tricks.as_strided(np.zeros(1, np.int16), (2 ** 27, 2, 2), (0, 0, 0))
    ctx = Context(experts, np.array([0, 2 ** 27], np.int64), 64, np.array([40, 40]), True, True, False, {"seed": 0})
    assert lecar_keyed.keyed_hits(ctx, penalty_tables(ctx.slots)) is None


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("wide", [True, False])
def test_past_their_lanes_the_layer_paths_run(policy, wide, monkeypatch):
    """Up to the lanes' widest (ARC 64 slots, LeCaR 24, with 512-bit vectors; 8 without) and, wider than eight,
    their share of a layer's experts (ARC 3/4, LeCaR 1/2), the lanes run; past them the layer path, not the
    engine."""
    monkeypatch.setattr(base, "WIDE_VECTORS", wide)
    widest = WIDEST[policy] if wide else base.NARROW_LANES
    fullest = get_policy(policy).fast_paths[0].fullest
    for experts, capacity, layered in ((160, widest, False), (160, widest + 1, True), (160, 150, True),
                                       (40, int(fullest * 40) + 1, True)):
        made = []
        with recorded(policy, made, lanes=True):
            simulate(synth_trace(2, experts, 2, 2, 30, seed=1),
                     CacheConfig(policy=policy, capacity=capacity, semantics="sequential"))
        assert bool(made) == layered, (experts, capacity)
