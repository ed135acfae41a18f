"""The discrete-event loop's lowering a field at a time (``moesim.sim.field_loads``)."""

import re
from collections import namedtuple

import numpy as np
import pytest
from numba import njit

from moesim.sim import copy_propagation, field_loads

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
    """What the lowering reads through the argument's slot instead of a slot of its own: every variable that holds
    a field of ``s``, read directly, unpacked or nested, each the field it names; not the merges numba's SSA form
    writes where two paths meet (``$phi...``, assigned on both; ``chosen`` then copies one), nor ``carried.1``, the
    tuple carried around the loop (``carried`` is the first, ``s.pair``), nor a copy of a field that is not a tuple
    (``count = <the unpacked s.count>``: LLVM's code came out in another order)."""
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

    assert {"values": path("values"), "carried": path("carried")} == {"values": ("s", (0, 0)), "carried": ("s", (1,))}
    # s.inner, s.pair, s.count, s.inner.values, .weights, .flag, .scale, s.pair[0], s.pair[1] (and pair[-1])
    assert {path(name) for name in aliases} == {("s", p) for p in ((0,), (1,), (2,), (0, 0), (0, 1), (0, 2), (0, 3),
                                                                  (1, 0), (1, 1))}
    assert not {name for name in aliases if name.startswith("$phi") or name.startswith("carried.")
                or name.split(".")[0] in ("chosen", "total", "count", "first", "second")}


def _entry_only(s, n):
    """The argument is read in its first block only: numba keeps it in no slot, so nothing can point into one."""
    a = s[0]
    total = 0.0
    for i in range(n):
        total += a[i]
    return total


def test_an_argument_read_in_one_block_only_is_no_alias_source():
    compiled = njit(_nrt=False, pipeline_class=field_loads.Pipeline)(_entry_only)
    state = (np.arange(4.0), np.ones(2))
    assert compiled(state, 4) == _entry_only(state, 4) == 6.0


def test_the_machine_code_is_numbas():
    """The same assembly as numba's lowering (the bound loops' other passes in both), but for the function's
    mangled name, which carries the pipeline's compilation and how many times the function was compiled before (the
    error text that quotes it is 297 bytes long or 298 where that count gains a digit between the two)."""
    def asm(pipeline):
        fn = njit(_nrt=False, pipeline_class=pipeline)(_walk)
        fn(_state(), 4, True)
        text = re.sub(r"_ZN\S*", "", fn.inspect_asm(fn.signatures[0]))
        return [line for line in text.splitlines() if "missing Environment" not in line]

    numbas, ours = asm(copy_propagation.Pipeline), asm(field_loads.Pipeline)
    assert len(numbas) > 300 and ours == numbas


def test_with_reference_counting_numba_lowers_it(monkeypatch):
    """A function that counts references keeps every slot and del of numba's lowering: no alias is looked for."""
    found = []
    monkeypatch.setattr(field_loads.FieldLower, "_find_aliases", lambda self: found.append(1) or {})
    assert njit(pipeline_class=field_loads.Pipeline)(_walk)(_state(), 4, True) == _walk(_state(), 4, True)
    assert found == []


def test_another_numba_lowers_the_loops_as_numba_does_with_one_warning():
    """The lowering overrides numba's internals: on the minor versions it was checked on it is used; on another,
    numba's own lowering (the same machine code, test_the_machine_code_is_numbas), and a warning names the pin."""
    assert field_loads.pipeline("0.68.1") is field_loads.Pipeline
    pinned = r"\(pip install 'numba>=0\.68,<0\.69'\)"
    with pytest.warns(RuntimeWarning, match=rf"^numba 0\.69\.0: moesim lowers .* {pinned}"):
        assert field_loads.pipeline("0.69.0") is copy_propagation.Pipeline

