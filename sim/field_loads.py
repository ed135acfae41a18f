"""The discrete-event loop's state lowered a field at a time: a read of ``s.inputs.times`` loads one array.

Numba keeps a variable used in more than one block in a stack slot, and lowers ``s.inputs`` by loading the
whole tuple from ``s``'s slot, then taking the field out of the loaded value. The discrete-event loop's state
(``moesim.sim.des_state.State``: six named tuples, about sixty arrays, some 400 machine words) is read that way
at every one of its thousands of field reads, and each inlined helper unpacks it again (``inp, cache = s.inputs,
s.cache``) into slots of its own, a store of the whole sub-tuple each. LLVM then splits every such load and store
into its fields (SROA) and deletes what is not read: its function passes took 2.9 s of the LRU+static loop's
9.4 s compile. ``FieldLower`` lowers, in a function compiled without reference counting (the bound loops,
``_nrt=False``):

- a field read (``getattr`` of a named tuple, ``static_getitem`` of a tuple at a constant index) of a variable
  that has a slot as a load of that field alone, through a pointer to it in the slot;
- a variable assigned once as a field of an argument assigned once (``inp = s.inputs``), or of such a variable,
  or as an item of a tuple built of such variables and unpacked (``inp, cache, tally, progress = s.inputs,
  s.cache, s.tally, s.progress``: Python builds a tuple to unpack four names), as no variable of its own: its
  reads go through a pointer into the argument's slot, which is written once, at the function's entry, and so
  holds the same value wherever the variable is read;
- the end of a variable's life (numba's ``del``) as nothing: it stores zeros over the slot, which only reference
  counting needs.

The machine code of the three discrete-event loops compared (LRU+static whole, Belady..γ lean, γ-admit..LeCaR
whole) is the same instruction for instruction as with numba's lowering (only a constant's serial number
differs), and the LRU+static loop compiles in about 1.4 s less (docs/architecture.md, "A field at a time").
``Pipeline`` is ``moesim.sim.copy_propagation``'s with this lowering; ``moesim.sim.run`` binds the discrete-event
loop with it. The hit-rate loops keep numba's lowering: their states are a few arrays, and lowered this way six
of 27 of them and their placements came out in another instruction order. For the same reason a copy of a field
that is not a tuple (``count = <s.count unpacked>``; numba's copy of a tuple ``moesim.sim.copy_propagation``
removes) keeps a slot of its own: read through the argument's, the γ-admit..LeCaR loop came out in another order.
Numba's debug builds (``debug=True``) keep every variable in a slot of its own, as a debugger expects.

It overrides numba's ``Lower`` internals (``_alloca_var``, ``_singly_assigned_vars``, ``_blk_local_varmap``):
``tests/test_field_loads.py`` checks the results against Python's and the machine code against numba's lowering, on
the numba versions ``TESTED`` (pyproject.toml pins them); under another, ``pipeline`` gives numba's own lowering.
"""

from __future__ import annotations

import collections
import warnings

import numba

from numba.core import cgutils, ir, lowering, types
from numba.core.compiler_machinery import register_pass
from numba.core.datamodel.models import TupleModel, UniTupleModel
from numba.core.typed_passes import NativeLowering

from moesim.sim import copy_propagation

_FIELD_READS = ("getattr", "static_getitem")


class FieldLower(lowering.Lower):
    """Numba's lowering with tuple fields read from their variables' slots (module docstring); a function with
    reference counting, a generator or a debug build is lowered as numba does."""

    _on, _aliases = False, {}  # until ``pre_lower``

    def pre_lower(self):
        super().pre_lower()
        self._on = not (self.context.enable_nrt or self.func_ir.is_generator or self._disable_sroa_like_opt)
        self._aliases = self._find_aliases() if self._on else {}

    def _find_aliases(self) -> dict:
        """variable -> (the variable whose slot holds it, its field index there, or None for the whole slot)."""
        assigns = [stmt for block in self.blocks.values() for stmt in block.find_insts(ir.Assign)]
        # after numba's SSA pass only its merges at a join (``$phi...``) are assigned more than once, and those
        # copy a variable, which no rule below takes; the count is checked all the same, as what an alias rests on
        defined = collections.Counter(stmt.target.name for stmt in assigns)
        fixed = {stmt.target.name for stmt in assigns if isinstance(stmt.value, ir.Arg)
                 and defined[stmt.target.name] == 1 and stmt.target.name not in self._singly_assigned_vars}
        built: dict = {}  # a tuple built of variables (or that tuple unpacked): its items' names
        aliases: dict = {}
        changed = True
        while changed:  # the IR's blocks are in no particular order: until nothing more is found
            changed = False
            for stmt in assigns:
                name, value = stmt.target.name, stmt.value
                if defined[name] != 1 or name in aliases or name in built or not isinstance(value, ir.Expr):
                    continue
                if value.op == "build_tuple":
                    built[name] = [item.name for item in value.items]
                    changed = True
                    continue
                if value.op not in (*_FIELD_READS, "exhaust_iter"):
                    continue
                source = value.value.name
                if value.op == "exhaust_iter":  # unpacking a tuple: the same tuple
                    found = (source, None) if source in fixed else None
                    if source in built:
                        built[name] = built[source]
                        changed = True
                else:
                    index = self._field_index(source, value)
                    found = None
                    if index is not None and source in built:
                        item = built[source][index]
                        found = (item, None) if item in fixed else None
                    elif index is not None and source in fixed:
                        found = (source, index)
                if found is not None and self.typeof(name) == (self.typeof(found[0]) if found[1] is None else
                                                               self.typeof(found[0])[found[1]]):
                    aliases[name] = found
                    fixed.add(name)
                    changed = True
        return aliases

    def _field_index(self, name: str, expr: ir.Expr) -> int | None:
        """The field ``expr`` reads of the tuple variable ``name``, or None if it is no constant field read."""
        kind = self.typeof(name)
        if not isinstance(kind, types.BaseTuple) or \
                not isinstance(self.context.data_model_manager[kind], (TupleModel, UniTupleModel)):
            return None
        if expr.op == "getattr" and isinstance(kind, (types.NamedTuple, types.NamedUniTuple)) and \
                expr.attr in kind.fields:
            return kind.fields.index(expr.attr)
        if expr.op == "static_getitem" and isinstance(expr.index, int) and -len(kind) <= expr.index < len(kind):
            return expr.index % len(kind)
        return None

    def _alloca_var(self, name, fetype):
        if name not in self._aliases:
            super()._alloca_var(name, fetype)

    def getvar(self, name):
        if name in self._aliases:
            source, index = self._aliases[name]
            slot = self.getvar(source)
            return slot if index is None else cgutils.gep_inbounds(self.builder, slot, 0, index)
        return super().getvar(name)

    def loadvar(self, name):
        if name in self._aliases:
            return self.builder.load(self.getvar(name))
        return super().loadvar(name)

    def lower_inst(self, inst):
        if isinstance(inst, ir.Assign) and inst.target.name in self._aliases:
            return None  # read where it is used
        if isinstance(inst, ir.Del) and self._on:
            if inst.value not in self._blk_local_varmap:  # numba's bookkeeping of a del before the store, kept
                self._singly_assigned_vars.discard(inst.value)
            return None
        return super().lower_inst(inst)

    def lower_expr(self, resty, expr):
        if self._on and expr.op in _FIELD_READS and expr.value.name not in self._blk_local_varmap:
            index = self._field_index(expr.value.name, expr)
            if index is not None:
                kind = self.typeof(expr.value.name)[index]
                field = self.builder.load(cgutils.gep_inbounds(self.builder, self.getvar(expr.value.name), 0, index))
                return self.context.cast(self.builder, field, kind, resty)
        return super().lower_expr(resty, expr)


@register_pass(mutates_CFG=True, analysis_only=False)
class FieldLowering(NativeLowering):
    """Numba's native lowering pass with ``FieldLower``."""

    _name = "moesim_field_lowering"

    @property
    def lowering_class(self):
        return FieldLower


class Pipeline(copy_propagation.Pipeline):
    """The bound loops' pipeline (``moesim.sim.copy_propagation``) lowering a field at a time."""

    lowering = FieldLowering


TESTED = ("0.68",)  # numba's minor versions whose ``Lower`` internals ``FieldLower`` overrides as checked


def pipeline(version: str = numba.__version__):
    """``Pipeline`` under a numba ``TESTED``; under another, numba's own lowering (``copy_propagation.Pipeline``: the
    same machine code, compiled more slowly), with a warning that says so, as the internals may have changed."""
    if ".".join(version.split(".")[:2]) in TESTED:
        return Pipeline
    warnings.warn(f"numba {version}: moesim lowers its discrete-event loops a field at a time on numba "
                  f"{', '.join(TESTED)} only (pip install 'numba>={TESTED[-1]},<{_next(TESTED[-1])}'); they compile "
                  "with numba's own lowering here, to the same machine code, more slowly", RuntimeWarning, stacklevel=2)
    return copy_propagation.Pipeline


def _next(minor: str) -> str:
    major, number = minor.split(".")
    return f"{major}.{int(number) + 1}"

