"""The discrete-event loop's lowering a field at a time (``moesim.sim.field_loads``)."""

from collections import namedtuple

import numpy as np
import pytest
from numba import njit

from moesim.sim import field_loads

Inner = namedtuple("Inner", "values weights flag scale")
Outer = namedtuple("Outer", "inner pair count")


def _walk(s, n, pick):
    """Field reads of every kind the lowering treats: of an argument, through unpacked and nested fields, at
    negative indices, of a tuple assigned on two paths and of one carried around a loop; writes through them."""
    inner, pair, count, again = s.inner, s.pair, s.count, s.inner  # unpacked from a built tuple: the fields
    values = inner.values
    first, second = pair  # unpacked from an alias
    total = 0.0
    for i in range(n):  # read in other blocks than the one that assigned them
        if inner.flag:
            total += values[i] * inner.weights[i] * inner.scale
        first[i] += 1.0  # written through an alias: the argument's array
        total += pair[-1][i] + second[i]
    chosen = s.pair if pick else (s.pair[1], s.pair[0])  # assigned on two paths: a slot of its own
    carried = s.pair
    for _ in range(3):  # reassigned in a loop: each read sees the value of its iteration
        carried = (carried[1], carried[0])
        total += carried[0][0]
    return total + chosen[0][1] + count + again.weights[-1]


def _state():
    inner = Inner(np.arange(4.0), np.arange(4.0) + 2, True, 0.5)
    return Outer(inner, (np.zeros(4), np.ones(4) * 3), np.int64(7))


@pytest.mark.parametrize("pick", [True, False])
def test_a_field_at_a_time_gives_what_python_gives(pick):
    """The interpreter is the reference: the same result, and the same writes to the argument's arrays, from the
    function run by Python and compiled with the lowering (without reference counting, as the bound loops are)."""
    compiled = njit(_nrt=False, pipeline_class=field_loads.Pipeline)(_walk)
    expected_state, state = _state(), _state()
    expected = _walk(expected_state, 4, pick)
    assert compiled(state, 4, pick) == expected
    assert np.array_equal(state.pair[0], expected_state.pair[0]) and state.pair[0][0] == 1.0


def test_aliases_are_the_fields_of_arguments_assigned_once(monkeypatch):
    """What the lowering reads through the argument's slot instead of a slot of its own: the variables assigned
    once from its fields, directly, unpacked or nested, each the field it names; nothing assigned on two paths or
    around a loop (numba's SSA names the loop's ``carried.1``; ``carried`` is the first, ``s.pair``), and no copy of
    a field that is not a tuple (``count = <the unpacked s.count>``: LLVM's code came out in another order)."""
    found = []
    original = field_loads.FieldLower._find_aliases
    monkeypatch.setattr(field_loads.FieldLower, "_find_aliases",
                        lambda self: found.append(original(self)) or found[-1])
    njit(_nrt=False, pipeline_class=field_loads.Pipeline)(_walk)(_state(), 4, True)
    aliases = found[0]

    def path(name):  # the argument and the field indices an alias reads
        source, index = aliases[name]
        root, fields = path(source) if source in aliases else (source, ())
        return root, fields + (() if index is None else (index,))

    unpacked = {name: path(name) for name in aliases if name.startswith("$") and "unpack_sequence" in name}
    assert {"values": path("values"), "carried": path("carried")} == {"values": ("s", (0, 0)), "carried": ("s", (1,))}
    assert sorted(unpacked.values()) == [("s", (0,)), ("s", (0,)), ("s", (1,)), ("s", (1,)), ("s", (1, 0)),
                                         ("s", (1, 1)), ("s", (2,))]  # four fields unpacked, then s.pair unpacked
    assert all(path(name)[0] == "s" for name in aliases)
    assert not {name for name in aliases if name.split(".")[0] in ("chosen", "total", "count", "first", "second")
                or name.startswith("carried.")}


def test_with_reference_counting_numba_lowers_it(monkeypatch):
    found = []
    monkeypatch.setattr(field_loads.FieldLower, "_find_aliases", lambda self: found.append(1) or {})
    assert njit(pipeline_class=field_loads.Pipeline)(_walk)(_state(), 4, True) == _walk(_state(), 4, True)
    assert found == []
