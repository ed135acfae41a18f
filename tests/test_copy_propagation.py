"""The pass that removes the copies of tuple variables before lowering (``moesim.sim.copy_propagation``)."""

import numpy as np
from numba import njit, types
from numba.core import ir

from moesim.sim.copy_propagation import Pipeline


def _tuple_copies(dispatcher) -> list[str]:
    """The assignments ``x = y`` of a tuple variable left in the typed IR numba lowered."""
    cres = next(iter(dispatcher.overloads.values()))
    annotation = cres.type_annotation
    return [stmt.target.name for block in annotation.blocks.values() for stmt in block.body
            if isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Var)
            and isinstance(annotation.typemap[stmt.target.name], types.BaseTuple)]


def _sums(state, n, flip):
    inner = state  # a copy read in another block
    total = 0.0
    for i in range(n):
        alias = inner  # a copy of a copy, inside the loop
        total += alias[0][i] * alias[1][i]
    other = state if not flip else (state[1], state[0])  # assigned twice: not a copy to propagate
    carried = state
    for _ in range(n):
        before = carried  # assigned once, a copy of one assigned on two paths (before the loop and in it): kept
        carried = (before[1], before[0])
    return total, other[0][0], before[0][0]


def test_tuple_copies_are_removed_and_the_results_kept():
    plain, propagated = njit(_sums), njit(pipeline_class=Pipeline)(_sums)
    state = (np.arange(5.0), np.arange(5.0) + 1)
    for flip in (False, True):
        assert propagated(state, 5, flip) == plain(state, 5, flip) == (40.0, 1.0 if flip else 0.0, 0.0)
    before, left = _tuple_copies(plain), _tuple_copies(propagated)
    named = lambda names, var: [n for n in names if n.split(".")[0] == var]  # noqa: E731 (SSA versions: other.1)
    assert named(before, "inner") and named(before, "alias") and not named(left, "inner") and not named(left, "alias")
    assert named(left, "other") == named(before, "other") != []  # assigned on two paths: kept
    assert named(left, "before") == named(before, "before") != []
    assert set(left) < set(before)
