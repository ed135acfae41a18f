"""The copies of the loop's state that inlining leaves, removed before numba lowers the loop to LLVM.

Inlining a helper ``f(s, ...)`` binds its arguments by assignment, ``s.3 = s``, and every helper of the
discrete-event loop takes the state (``moesim.sim.des_state.State``: six named tuples, about sixty arrays) and
unpacks its tuples (``inp = s.inputs``, then ``inp.2 = inp`` where it passes them on). Numba lowers each such copy
of a tuple variable to a load and a store of the whole tuple (the state is about 400 machine words), and LLVM
then splits every one into its fields: most of the loop's LLVM code was these copies, and adding 40 arrays to
``Inputs`` raised its lowering from 7.7 s to 14.3 s. A copy ``x = y`` of a tuple, where ``x`` and ``y`` are each
assigned once in the function, is the same value wherever ``x`` is read: ``CopyPropagate`` reads ``y`` there
instead and drops the copy. The discrete-event loop's lowering falls from 7.7 s to 5.2 s (docs/architecture.md,
"A first run: what it compiles").

``Pipeline`` is numba's nopython pipeline with that pass in place of its typed rewrites, before lowering;
``engine.bind`` compiles the bound loops with it. The typed rewrites (``NopythonRewrites``: array expressions
fused into one loop, getitems on string literals) find nothing to rewrite in a bound loop, which runs without
reference counting and so allocates no array and holds no string; their pass marks every variable's last use
first, and left out it saves the discrete-event loop 1.5 s of its 11 s (the same machine code, instruction for
instruction: docs/architecture.md, "A first run: what it compiles").
"""

from __future__ import annotations

import collections

from numba.core import ir, ir_utils, types
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.typed_passes import NativeLowering, NopythonRewrites


@register_pass(mutates_CFG=False, analysis_only=False)
class CopyPropagate(FunctionPass):
    """Each read of a tuple variable assigned once, as a copy of a variable assigned once, reads the original."""

    _name = "moesim_copy_propagate"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        blocks = state.func_ir.blocks
        defined = collections.Counter()
        copies = {}
        for block in blocks.values():
            for stmt in block.body:
                if isinstance(stmt, ir.Assign):
                    defined[stmt.target.name] += 1
                    kind = state.typemap[stmt.target.name]
                    if isinstance(stmt.value, ir.Var) and isinstance(kind, types.BaseTuple) and \
                            state.typemap[stmt.value.name] == kind:
                        copies[stmt.target.name] = stmt.value
        copies = {x: y for x, y in copies.items() if defined[x] == 1 and defined[y.name] == 1}
        if not copies:
            return False
        for x, y in copies.items():  # a copy of a copy reads the first original
            while y.name in copies:
                y = copies[y.name]
            copies[x] = y
        for block in blocks.values():
            block.body = [stmt for stmt in block.body
                          if not (isinstance(stmt, ir.Assign) and stmt.target.name in copies)]
        ir_utils.replace_vars(blocks, copies)
        state.func_ir._definitions = ir_utils.build_definitions(blocks)
        return True


class Pipeline(CompilerBase):
    """Numba's nopython pipeline, tuple copies propagated where its typed rewrites were (module docstring), and
    lowered by ``lowering`` (a subclass may name another)."""

    lowering = NativeLowering

    def define_pipelines(self):
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.add_pass_after(CopyPropagate, NopythonRewrites)
        pm.passes = [(self.lowering, entry[1]) if entry[0] is NativeLowering else entry
                     for entry in pm.passes if entry[0] is not NopythonRewrites]
        pm.finalize()
        return [pm]
