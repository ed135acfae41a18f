"""The in-memory trace: dense numpy arrays the simulator and the policies run on."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError
from moesim.tracegen.schema import DECODE, PREFILL, TraceMeta


@dataclass
class Trace:
    """A routing trace as dense arrays; N is the number of (sequence, step) rows.

    experts  int16   [N, L, k]  selected experts in router rank order
    seq_ids  int32   [S]        sequence ids, ascending
    seq_offsets int64 [S+1]     rows of sequence i are seq_offsets[i]:seq_offsets[i+1]
    steps    int32   [N]        token position inside its sequence
    phase    int8    [N]        0 prefill, 1 decode
    weights  float32 [N, L, k]  gate weights (NaN where a row had none) or None
    probs    float32 [N, L, E]  full router distribution (NaN where none) or None
    spec     int16   [N, L, k]  predicted experts for layer+1 (-1 where none) or None
    tokens   int32   [N]        token ids (-1 where none) or None
    """

    meta: TraceMeta
    experts: np.ndarray
    seq_ids: np.ndarray
    seq_offsets: np.ndarray
    steps: np.ndarray
    phase: np.ndarray
    weights: np.ndarray | None = None
    probs: np.ndarray | None = None
    spec: np.ndarray | None = None
    tokens: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return int(self.experts.shape[0])

    @property
    def num_sequences(self) -> int:
        return int(self.seq_ids.shape[0])

    @property
    def accesses(self) -> int:
        """Expert requests in the trace: rows x layers x k."""
        return int(self.experts.size)

    @property
    def decode_steps(self) -> int:
        return int(np.count_nonzero(self.phase == DECODE))

    @property
    def prefill_steps(self) -> int:
        return int(np.count_nonzero(self.phase == PREFILL))

    def row_sequence(self) -> np.ndarray:
        """Index (0..S-1) of the sequence each row belongs to."""
        return np.repeat(np.arange(self.num_sequences), np.diff(self.seq_offsets))

    def select(self, sequences) -> "Trace":
        """The trace restricted to the given sequence indices (0 .. num_sequences - 1, each once), in that order."""
        off, n = self.seq_offsets, self.num_sequences
        given = np.asarray(sequences)
        if given.ndim != 1 or given.size == 0 or given.dtype.kind not in "iu":
            raise MoesimError(f"select takes a list of sequence indices (whole numbers 0..{n - 1}), got {sequences!r}")
        sequences = given.astype(np.int64)
        bad = sequences[(sequences < 0) | (sequences >= n)]
        if bad.size:
            raise MoesimError(f"select: sequence index {bad[0]} is not one of the trace's {n} (0..{n - 1})")
        if np.unique(sequences).size < sequences.size:
            raise MoesimError("select: a sequence index is listed twice (a trace holds each sequence once)")
        rows = np.concatenate([np.arange(off[s], off[s + 1]) for s in sequences])
        lengths = off[sequences + 1] - off[sequences]
        pick = {f.name: getattr(self, f.name)[rows] for f in dataclasses.fields(self)
                if f.name not in ("meta", "seq_ids", "seq_offsets") and getattr(self, f.name) is not None
                and len(getattr(self, f.name)) == self.num_rows}
        return dataclasses.replace(self, seq_ids=self.seq_ids[sequences],
                                   seq_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(off.dtype), **pick)

    def validate(self, where: str = "trace", origin: np.ndarray | None = None, label: str = "row",
                 names: dict[str, str] | None = None) -> None:
        """Raise MoesimError naming the first bad row; `origin[n, l]` maps a cell to an input row/line, `names` a
        value column to its input's name where that differs."""
        names = names or {}
        m = self.meta
        n, big_l, k = self.num_rows, m.num_layers, m.top_k

        def at(row: int, layer: int | None = None) -> str:
            seq = int(self.seq_ids[np.searchsorted(self.seq_offsets, row, side="right") - 1])
            cell = f"seq {seq}, step {int(self.steps[row])}" + ("" if layer is None else f", layer {layer}")
            if origin is None:
                return f"{where}: {label} {row * big_l + (layer or 0)} ({cell})"
            return f"{where}: {label} {int(origin[row, layer or 0])} ({cell})"

        if self.experts.ndim != 3 or self.experts.shape[1:] != (big_l, k):
            raise MoesimError(f"{where}: experts have shape {self.experts.shape}, metadata says (N, {big_l}, {k})")
        for name in ("steps", "phase"):
            if getattr(self, name).shape != (n,):
                raise MoesimError(f"{where}: {name} has shape {getattr(self, name).shape}, expected ({n},)")
        offs = self.seq_offsets
        if offs.shape != (self.num_sequences + 1,) or offs[0] != 0 or offs[-1] != n or np.any(np.diff(offs) < 1):
            raise MoesimError(f"{where}: sequence offsets must rise strictly from 0 to {n}")
        if np.any(np.diff(self.seq_ids.astype(np.int64)) <= 0):
            raise MoesimError(f"{where}: sequence ids must be unique and ascending")
        if self.experts.size and (self.experts.min() < 0 or self.experts.max() >= m.num_experts):
            _first_bad(~((self.experts >= 0) & (self.experts < m.num_experts)), lambda r, l, j: (
                f"{at(r, l)}: expert {int(self.experts[r, l, j])} out of range 0..{m.num_experts - 1}"))
        twice = np.zeros(self.experts.shape[:2], np.bool_)  # pairs of ranks, not a sorted copy of the array
        for j in range(1, k):
            for i in range(j):
                twice |= self.experts[:, :, i] == self.experts[:, :, j]
        _first_bad(twice, lambda r, l: (
            f"{at(r, l)}: expert {int(_repeated(self.experts[r, l]))} selected twice"))
        seq_of_row = self.row_sequence()
        within = seq_of_row[1:] == seq_of_row[:-1]
        _first_bad(within & (np.diff(self.steps.astype(np.int64)) <= 0), lambda r: (
            f"{at(r + 1)}: step {int(self.steps[r + 1])} does not follow step {int(self.steps[r])} "
            "(steps must rise within a sequence)"))
        _first_bad((self.phase != PREFILL) & (self.phase != DECODE), lambda r: (
            f"{at(r)}: phase {int(self.phase[r])} is neither 0 (prefill) nor 1 (decode)"))
        _first_bad(within & (self.phase[1:] < self.phase[:-1]), lambda r: (
            f"{at(r + 1)}: a prefill step follows a decode step"))
        for name, width in (("weights", k), ("spec", k), ("probs", m.num_experts)):
            arr = getattr(self, name)
            if arr is not None and arr.shape != (n, big_l, width):
                raise MoesimError(f"{where}: {name} has shape {arr.shape}, expected ({n}, {big_l}, {width})")
        # NaN: the row had none, so a cell's values are all NaN or none is. Gate weights are >= 0 (some families
        # scale them past 1), router probabilities lie in [0, 1]
        for name, high, what in (("weights", np.inf, "a gate weight >= 0"), ("probs", 1.0, "a probability in [0, 1]")):
            arr = getattr(self, name)
            if arr is None or not arr.size:
                continue
            lo, hi = np.fmin.reduce(arr, axis=None), np.fmax.reduce(arr, axis=None)  # NaN-skipping extremes
            if not (lo >= 0 and hi <= high and np.isfinite(hi)):  # the masks only when some value is off
                _first_bad(~(np.isnan(arr) | ((arr >= 0) & (arr <= high) & np.isfinite(arr))),
                           lambda r, l, j, arr=arr, name=name, what=what: (
                               f"{at(r, l)}: {names.get(name, name)} value {float(arr[r, l, j])!r} is not {what}"))
            # every value now NaN or finite: a cell's sum is NaN if one is, its NaN-skipping maximum if all are
            _first_bad(np.isnan(np.add.reduce(arr, axis=2)) & ~np.isnan(np.fmax.reduce(arr, axis=2)),
                       lambda r, l, arr=arr, name=name: (
                           f"{at(r, l)}: {names.get(name, name)} NaN in {int(np.isnan(arr[r, l]).sum())} of its "
                           f"{arr.shape[2]} values (a row has all its values or none)"))
        if self.spec is not None:
            _first_bad(~((self.spec >= -1) & (self.spec < m.num_experts)), lambda r, l, j: (
                f"{at(r, l)}: spec expert {int(self.spec[r, l, j])} out of range 0..{m.num_experts - 1}"))
        if self.tokens is not None and self.tokens.shape != (n,):
            raise MoesimError(f"{where}: tokens has shape {self.tokens.shape}, expected ({n},)")


def _repeated(ranked: np.ndarray) -> int:
    """The first expert a row names twice."""
    values, counts = np.unique(ranked, return_counts=True)
    return int(values[counts > 1][0])


def concat_traces(parts: list[Trace]) -> Trace:
    """Traces of the same model and disjoint, ascending sequence ids, as one trace."""
    def cat(name: str):
        arrays = [getattr(p, name) for p in parts]
        return None if arrays[0] is None else np.concatenate(arrays)

    starts = np.cumsum([0] + [p.num_rows for p in parts[:-1]])
    return Trace(meta=parts[0].meta, experts=cat("experts"), seq_ids=cat("seq_ids"),
                 seq_offsets=np.r_[np.concatenate([p.seq_offsets[:-1] + s for p, s in zip(parts, starts)]),
                                   starts[-1] + parts[-1].num_rows].astype(np.int64),
                 steps=cat("steps"), phase=cat("phase"), weights=cat("weights"), probs=cat("probs"),
                 spec=cat("spec"), tokens=cat("tokens"))


def _first_bad(mask: np.ndarray, describe) -> None:
    """Raise with describe(*index) for the first True cell of mask, in row-major order."""
    if mask.any():
        raise MoesimError(describe(*(int(i) for i in np.unravel_index(np.argmax(mask), mask.shape))))


BUNDLED = "bundled"  # the name that stands for the shipped trace, wherever a trace file is asked for


def trace_file(path: str | Path | None) -> Path | None:
    """The file a trace argument names: ``bundled`` is the shipped trace (a file of that name: ``./bundled``);
    none given, None."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise MoesimError(f"a trace file is named by a path, got {type(path).__name__} {path!r}")
    if not os.fspath(path).strip():  # Path("") is ".", which said "a folder"
        raise MoesimError("a trace file is named by a path, got an empty one")
    return bundled_trace_path() if str(path) == BUNDLED else Path(path)


def bundled_trace_path() -> Path:
    """The real Mixtral-8x7B GSM8K routing trace shipped with moesim (its source: docs/commands.md, "The bundled
    real trace")."""
    return Path(__file__).parent / "data" / "mixtral-8x7b-gsm8k.parquet"
