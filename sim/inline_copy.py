"""Numba's inliner made linear in the size of what it inlines: most of a bound loop's compile time went there.

Every ``inline="always"`` call site makes numba copy the callee's IR twice (``InlineWorker.inline_ir``),
block by block, each block with a deepcopy of its own. The blocks of one function share one variable scope,
so each block's copy drags along a fresh copy of the whole scope — every variable of the function: copying a
function costs blocks x variables, and the helpers of the discrete-event loop, inlined into each other, are
hundreds of each (numba issues #8989 and #9204 describe the copies; numba 0.68 still makes them).

``install`` gives the inliner a ``deepcopy`` that copies the blocks of one function one after another with
one memo, so they share one copy of the scope, as the blocks they copy share one scope. A block met again
(the same function copied a second time) or a block of another scope starts a new memo, so no two copies
share anything. The compiled code is the same; the loop's compile time drops by about a quarter
(docs/architecture.md, "A first run: what it compiles").
"""

from __future__ import annotations

import copy

from numba.core import inline_closurecall, ir


class _BlockCopier:
    """Stands in for the ``copy`` module inside numba's inliner (it calls nothing else of it)."""

    def __init__(self):
        self.memo: dict = {}
        self.seen: set[int] = set()

    def deepcopy(self, x, memo=None):
        if memo is not None or not isinstance(x, ir.Block):
            return copy.deepcopy(x, memo)
        if id(x) in self.seen or id(x.scope) not in self.memo:  # a new function's copy begins
            self.memo, self.seen = {}, set()
        self.seen.add(id(x))
        return copy.deepcopy(x, self.memo)

    def __getattr__(self, name):
        return getattr(copy, name)


def install() -> None:
    """Give numba's inliner the shared-memo copy, once; a numba whose inliner no longer copies through the
    ``copy`` module is left as it is."""
    if getattr(inline_closurecall, "copy", None) is copy:
        inline_closurecall.copy = _BlockCopier()
