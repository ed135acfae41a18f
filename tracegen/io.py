"""Reading and writing trace files: Parquet rows <-> dense arrays, validated both ways."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import polars as pl

from moesim.errors import MoesimError, first_line
from moesim.files import atomic_output
from moesim.tracegen.schema import COLUMNS, METADATA_KEY, NULLABLE, REQUIRED, TraceMeta
from moesim.tracegen.trace import Trace, trace_file

ORIGIN = "_origin"  # optional frame column: the input row or line each record came from
_TYPES = {"int8": pl.Int8(), "int16": pl.Int16(), "int32": pl.Int32(), "float32": pl.Float32()}
# each column's polars type (``COLUMNS``)
POLARS_TYPES = {c: pl.List(_TYPES[k[5:-1]]) if k.startswith("list[") else _TYPES[k] for c, k in COLUMNS.items()}
# what polars raises on a damaged file: its errors, and a panic of its Rust core (not an Exception)
READ_FAILURES = (Exception, pl.exceptions.PanicException)


def misspelt(keys, known) -> list[str]:
    """Of a file's field or column names ``keys``, those that name one a reader reads (``known``: a name -> whether
    it is one) in other letters or spacing ('Phase', ' layer'): read only as spelt, such a field would be taken as
    absent, so every reader refuses it (one of any other name it ignores)."""
    return [k for k in keys if isinstance(k, str) and not known(k) and known(k.strip().lower())]


def read_meta(path: str | Path) -> TraceMeta:
    """The metadata of a trace file, without reading its rows."""
    path = Path(path)
    if path.is_dir():
        raise MoesimError(f"{path}: a folder, not a trace file")
    if not path.is_file():
        raise MoesimError(f"{path}: no such file")
    try:
        kv = pl.read_parquet_metadata(path)
    except READ_FAILURES as exc:  # polars raises several types for a non-Parquet file
        raise MoesimError(f"{path}: not a Parquet file ({first_line(exc)})") from None
    if METADATA_KEY not in kv:
        raise MoesimError(f"{path}: not a moesim trace (no '{METADATA_KEY}' metadata); convert it with 'moesim trace import'")
    return TraceMeta.from_json(kv[METADATA_KEY], str(path))


def stored_columns(path: str | Path) -> list[str]:
    """The optional columns (weights, probs, spec, token) a trace file holds, without reading rows."""
    read_meta(path)
    return [c for c in NULLABLE if c in _schema(path)]


def load_trace(path: str | Path, *, probs: bool = False) -> Trace:
    """Load a trace file into dense arrays (``bundled``: the shipped one); `probs=True` also loads the full router
    distributions."""
    path = trace_file(path)
    if path is None:
        raise MoesimError("a trace file is named by a path, got None")
    meta = read_meta(path)
    schema = _schema(path)
    missing = [c for c in REQUIRED if c not in schema]
    if missing:
        raise MoesimError(f"{path}: no {', '.join(repr(c) for c in missing)} column; a trace has "
                          f"{', '.join(REQUIRED)}")
    for col, dtype in schema.items():
        problem = _type_problem(col, dtype) if col in POLARS_TYPES else None
        if problem:
            raise MoesimError(f"{path}: {problem}")
    wanted = [c for c in COLUMNS if c in schema and (probs or c != "probs")]
    try:
        trace = _load_in_order(path, meta, wanted)
        if trace is not None:
            return trace
        frame = pl.read_parquet(path, columns=wanted, glob=False)  # a file name is never a pattern
    except READ_FAILURES as exc:
        if isinstance(exc, MoesimError):
            raise
        raise MoesimError(f"{path}: unreadable Parquet ({first_line(exc)})") from None
    return trace_from_frame(frame, meta, str(path))


CHUNK_ROWS = 1 << 18  # Parquet rows read at a time (polars writes row groups of 512² rows)


def _load_in_order(path, meta: TraceMeta, wanted: list[str]) -> Trace | None:
    """A trace file in the order moesim writes (each (seq, step) as L consecutive rows, layers 0..L-1,
    (seq, step) rising), made dense a chunk of whole tokens at a time: of the scalar columns only each token's
    first row is kept, the list columns go into their dense arrays. None when the file is in another order or
    anything is off, so the general path reads it and names the problem."""
    big_l = meta.num_layers
    scan = pl.scan_parquet(path, glob=False)
    n_rows = scan.select(pl.len()).collect().item()
    if n_rows == 0 or n_rows % big_l:
        return None
    scalars = [c for c in wanted if not isinstance(POLARS_TYPES[c], pl.List)]
    list_cols = [c for c in wanted if isinstance(POLARS_TYPES[c], pl.List)]
    shapes = {c: _FILL[c](meta) for c in list_cols}
    dense = {c: np.full((n_rows, width), fill, dtype) for c, (width, fill, dtype) in shapes.items()}
    nulls = dict.fromkeys(list_cols, 0)
    heads = []
    rows = max(CHUNK_ROWS - CHUNK_ROWS % big_l, big_l)
    layers = np.arange(big_l)
    for start in range(0, n_rows, rows):
        chunk = scan.slice(start, rows).select(wanted).collect()
        if any(chunk[c].null_count() for c in REQUIRED if c in scalars):
            return None
        try:
            chunk = chunk.cast({c: POLARS_TYPES[c] for c in wanted}, strict=True)
        except pl.exceptions.PolarsError:
            return None
        n = chunk.height // big_l
        if not np.array_equal(chunk["layer"].to_numpy().reshape(n, big_l), np.broadcast_to(layers, (n, big_l))):
            return None
        if any((b != b[:, :1]).any() for b in (chunk[c].to_numpy().reshape(n, big_l) for c in ("seq", "step", "phase"))):
            return None  # one token's layers disagree
        heads.append(chunk.select(scalars).gather_every(big_l))
        for col in list_cols:
            width, fill, dtype = shapes[col]
            series = chunk[col]
            lengths = series.list.len()
            if (col == "experts" and series.null_count()) or ((lengths != width) & lengths.is_not_null()).any():
                return None
            flat = series.drop_nulls().explode()  # every list has its width: a null here is a null inside one
            if flat.null_count():
                return None
            dense[col][start:start + chunk.height] = _dense(series, width, fill, dtype, flat)
            nulls[col] += series.null_count()
        del chunk
    heads = pl.concat(heads)
    seq, step = heads["seq"].to_numpy(), heads["step"].to_numpy()
    if seq.shape[0] > 1 and not np.all((np.diff(seq) > 0) | ((np.diff(seq) == 0) & (np.diff(step) > 0))):
        return None
    # an optional column with no values is absent, as in the general path
    trace = _assemble(meta, heads, {c: a for c, a in dense.items() if nulls[c] < n_rows})
    trace.validate(str(path))
    return trace


def _schema(path: str | Path) -> dict:
    """A Parquet file's column types (its name taken literally, never as a glob)."""
    try:
        return dict(pl.scan_parquet(path, glob=False).collect_schema())
    except READ_FAILURES as exc:
        raise MoesimError(f"{path}: unreadable Parquet ({first_line(exc)})") from None


def write_trace(trace: Trace, path: str | Path) -> None:
    """Validate and write a trace; the file appears whole or not at all."""
    trace.validate(str(path))
    _atomic_write(frame_from_trace(trace), trace.meta, Path(path))


class TraceWriter:
    """Write a trace in chunks of whole sequences, so memory stays bounded by one chunk.

    Each chunk is validated and spilled to a part file in a hidden folder beside `path` (whose folder the caller
    has checked: ``check_output``, as ``import_trace`` and ``record_trace`` do);
    `close()` streams the parts into `path` (atomically) and removes them. Leaving the `with`
    block by an exception removes the parts and writes nothing.
    """

    def __init__(self, path: str | Path, meta: TraceMeta):
        self.path, self.meta = Path(path), meta
        self._parts = tempfile.TemporaryDirectory(prefix=f".{self.path.name}.parts.", dir=self.path.parent)
        self._count = 0
        self.sequences = 0  # written so far

    def add(self, trace: Trace) -> None:
        trace.validate(str(self.path))
        frame_from_trace(trace).write_parquet(Path(self._parts.name) / f"{self._count:06d}.parquet")
        self._count += 1
        self.sequences += trace.num_sequences

    def close(self) -> None:
        if not self._count:
            raise MoesimError(f"{self.path}: nothing recorded, no file written")
        with atomic_output(self.path) as tmp:
            parts = sorted(Path(self._parts.name).iterdir())  # listed, not globbed: the folder's name is OUT's
            pl.scan_parquet(parts, glob=False).sink_parquet(
                tmp, metadata={METADATA_KEY: self.meta.to_json()}, statistics=True)
        self._parts.cleanup()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc) -> None:
        self._parts.cleanup()


def trace_from_frame(frame: pl.DataFrame, meta: TraceMeta, where: str, label: str = "row",
                     names: dict[str, str] | None = None) -> Trace:
    """Check a frame of trace rows against the schema and the metadata, and make dense arrays.

    Rows of different sequences may interleave (as in a serving log); within a sequence the
    steps must not go back. Every (seq, step) needs each layer 0..L-1 exactly once. Errors name
    the first bad input row (or the `_origin` value, e.g. a line number, when the frame has one),
    and a list column by its input's name in `names` (an importer's log fields) where it has one.
    """
    names = names or {}
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise MoesimError(f"{where}: missing column '{missing[0]}' (a trace needs {', '.join(REQUIRED)})")
    if frame.height == 0:
        raise MoesimError(f"{where}: no rows (a trace needs at least one token)")
    frame = _cast(frame, where, label)
    big_l, k = meta.num_layers, meta.top_k

    def first(bad: pl.Expr, what) -> None:
        """Raise naming the first row where ``bad`` holds: its ``_origin``, else its place in the input."""
        mask = frame.select(bad.fill_null(False)).to_series()
        if mask.any():
            index = int(mask.arg_true()[0])
            row = frame.row(index, named=True)
            raise MoesimError(f"{where}: {label} {row.get(ORIGIN, index)}: {what(row)}")

    for col in REQUIRED:
        first(pl.col(col).is_null(), lambda r, col=col: f"'{col}' is null")
    first(~pl.col("layer").is_between(0, big_l - 1),
          lambda r: f"layer {r['layer']} out of range 0..{big_l - 1}")
    first(pl.col("experts").list.len() != k,
          lambda r: f"{len(r['experts'])} experts, the trace's top_k is {k}")
    for col, width in (("weights", k), ("spec", k), ("probs", meta.num_experts)):
        if col in frame.columns:
            first(pl.col(col).is_not_null() & (pl.col(col).list.len() != width),
                  lambda r, col=col, width=width: f"'{names.get(col, col)}' has {len(r[col])} values, expected {width}")

    if not _in_order(frame):  # a serving log interleaves sequences; a trace file never does
        if ORIGIN not in frame.columns:
            frame = frame.with_row_index(ORIGIN).with_columns(pl.col(ORIGIN).cast(pl.Int64))
        frame = frame.sort("seq", maintain_order=True)
        first((pl.col("seq") == pl.col("seq").shift(1)) & (pl.col("step") < pl.col("step").shift(1)),
              lambda r: f"seq {r['seq']}: step {r['step']} comes after a later step (steps must rise)")
        frame = frame.sort(["seq", "step", "layer"], maintain_order=True)
    same = [pl.col(c) == pl.col(c).shift(1) for c in ("seq", "step", "layer")]
    first(same[0] & same[1] & same[2], lambda r: f"seq {r['seq']} step {r['step']}: layer {r['layer']} appears twice")
    counts = frame.with_row_index("_row").group_by(["seq", "step"], maintain_order=True).agg(
        pl.len().alias("n"), pl.col(ORIGIN if ORIGIN in frame.columns else "_row").first().alias("at"))
    bad = counts.filter(pl.col("n") != big_l).head(1)
    if bad.height:
        r = bad.row(0, named=True)
        raise MoesimError(f"{where}: {label} {r['at']}: seq {r['seq']} step {r['step']} has {r['n']} of {big_l} layers")
    first(same[0] & same[1] & (pl.col("phase") != pl.col("phase").shift(1)),
          lambda r: f"seq {r['seq']} step {r['step']}: layers disagree on the phase")

    n = frame.height // big_l
    lists = {"experts": _dense(frame["experts"], k, 0, np.int16)}
    frame = frame.drop("experts")  # its list buffers go before the other columns are made dense
    for col in ("weights", "probs", "spec"):
        if col in frame.columns and frame[col].null_count() < frame.height:
            lists[col] = _dense(frame[col], *_FILL[col](meta))
    trace = _assemble(meta, frame.gather_every(big_l), lists)
    trace.validate(where, frame[ORIGIN].to_numpy().reshape(n, big_l) if ORIGIN in frame.columns else None, label,
                   names)
    return trace


# each list column's width, fill value and dtype when made dense
_FILL = {"experts": lambda m: (m.top_k, 0, np.int16), "weights": lambda m: (m.top_k, np.nan, np.float32),
         "probs": lambda m: (m.num_experts, np.nan, np.float32), "spec": lambda m: (m.top_k, -1, np.int16)}


def _assemble(meta: TraceMeta, heads: pl.DataFrame, lists: dict) -> Trace:
    """A trace from the first row of every token (``heads``: seq, step, phase, token) and its list columns
    made dense ([rows, width] each; an optional one left out when the file holds no values of it)."""
    seq = heads["seq"].to_numpy()
    n, big_l = seq.shape[0], meta.num_layers
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    dense = {c: (a.reshape(n, big_l, a.shape[1]) if c in lists else None)
             for c, a in ((c, lists.get(c)) for c in ("experts", "weights", "probs", "spec"))}
    tokens = heads["token"] if "token" in heads.columns else None
    return Trace(meta=meta, seq_ids=seq[starts].astype(np.int32), seq_offsets=np.r_[starts, n].astype(np.int64),
                 steps=heads["step"].to_numpy().astype(np.int32), phase=heads["phase"].to_numpy().astype(np.int8),
                 tokens=(tokens.fill_null(-1).to_numpy().astype(np.int32)
                         if tokens is not None and tokens.null_count() < n else None), **dense)


def _in_order(frame: pl.DataFrame) -> bool:
    """Whether the rows are already in (seq, step, layer) order, as every trace file moesim writes is."""
    if frame.height < 2:
        return True
    seq, step, layer = (np.diff(frame[c].to_numpy()) for c in ("seq", "step", "layer"))  # int32/16: no overflow
    return bool(np.all((seq > 0) | ((seq == 0) & ((step > 0) | ((step == 0) & (layer > 0))))))


def frame_from_trace(trace: Trace) -> pl.DataFrame:
    """The Parquet rows of a trace, in (seq, step, layer) order."""
    n, big_l, k = trace.experts.shape
    cols = {
        "seq": pl.Series(np.repeat(np.repeat(trace.seq_ids, np.diff(trace.seq_offsets)), big_l)),
        "step": pl.Series(np.repeat(trace.steps, big_l)),
        "phase": pl.Series(np.repeat(trace.phase, big_l)),
        "layer": pl.Series(np.tile(np.arange(big_l, dtype=np.int16), n)),
        "experts": _lists(trace.experts.reshape(n * big_l, k), None),
    }
    if trace.weights is not None:
        cols["weights"] = _lists(trace.weights.reshape(n * big_l, -1), np.isnan(trace.weights).all(axis=2).ravel())
    if trace.probs is not None:
        cols["probs"] = _lists(trace.probs.reshape(n * big_l, -1), np.isnan(trace.probs).all(axis=2).ravel())
    if trace.spec is not None:
        cols["spec"] = _lists(trace.spec.reshape(n * big_l, -1), (trace.spec < 0).all(axis=2).ravel())
    if trace.tokens is not None:
        tok = np.repeat(trace.tokens, big_l)
        cols["token"] = pl.Series(tok).set(pl.Series(tok < 0), None)
    return pl.DataFrame(cols).cast({c: POLARS_TYPES[c] for c in cols})


def write_frame(frame: pl.DataFrame, meta: TraceMeta, path: str | Path, where: str, label: str = "row") -> Trace:
    """Validate a frame of rows (any order, see trace_from_frame) and write it as a trace file."""
    trace = trace_from_frame(frame, meta, where, label)
    _atomic_write(frame_from_trace(trace), meta, Path(path))
    return trace


def _atomic_write(frame: pl.DataFrame, meta: TraceMeta, path: Path) -> None:
    with atomic_output(path) as tmp:
        frame.write_parquet(tmp, metadata={METADATA_KEY: meta.to_json()}, statistics=True)


def _type_problem(col: str, dtype: pl.DataType, values_checked: bool = False) -> str | None:
    """Why a column of ``dtype`` cannot hold the trace's ``col`` (None: it can). With ``values_checked`` text, and
    floats where integers belong, pass, for ``_cast`` to check each value (a frame's; a file's are refused)."""
    want = POLARS_TYPES[col]
    listed = want.is_nested()
    target = want.inner if listed else want
    what = {(False, True): "an integer", (False, False): "a number", (True, True): "a list of integers",
            (True, False): "a list of numbers"}[listed, target.is_integer()]
    inner = dtype.inner if isinstance(dtype, (pl.List, pl.Array)) else None
    if dtype == pl.Null or (listed and inner == pl.Null):
        return None  # no values: the row checks name what is missing
    value = inner if listed else dtype
    ok = value is not None and (value.is_integer() or (value.is_numeric() and not target.is_integer())
                                or (values_checked and (value.is_float() or value == pl.String)))
    return None if ok else f"column '{col}' is {dtype}, a trace's is {what}"


def _cast(frame: pl.DataFrame, where: str, label: str) -> pl.DataFrame:
    """Cast known columns to the schema's types; a column of another kind is refused, a value that does not fit
    (a fraction where an integer belongs among them) is named by row."""
    present = {c: t for c, t in POLARS_TYPES.items() if c in frame.columns}
    for col in present:
        problem = _type_problem(col, frame[col].dtype, values_checked=True)
        if problem:
            raise MoesimError(f"{where}: {problem}")
    fractions = {c: _fractions(frame[c]) for c, t in present.items()
                 if (t.inner if t.is_nested() else t).is_integer() and _floats(frame[c].dtype)}
    if not any(f.any() for f in fractions.values()):
        try:
            return frame.cast(present, strict=True)
        except pl.exceptions.PolarsError:
            pass
    for col, dtype in present.items():
        fits = frame[col].cast(dtype, strict=False)
        bad = fits.is_null() & frame[col].is_not_null()
        if dtype.is_nested():
            bad = bad | (fits.list.eval(pl.element().is_null()).list.any() &
                         ~frame[col].list.eval(pl.element().is_null()).list.any())
        if col in fractions:
            bad = bad | fractions[col]
        if bad.any():
            index = int(bad.arg_true()[0])
            row = frame.row(index, named=True)
            raise MoesimError(f"{where}: {label} {row.get(ORIGIN, index)}: '{col}' value {row[col]!r} is not "
                              f"{dtype}") from None
    try:
        return frame.cast(present, strict=True)
    except pl.exceptions.PolarsError as exc:
        raise MoesimError(f"{where}: a column does not fit the trace's types ({first_line(exc)})") from None


def _floats(dtype: pl.DataType) -> bool:
    """Whether a column (or its lists) holds floats."""
    return (dtype.inner if isinstance(dtype, (pl.List, pl.Array)) else dtype).is_float()


def _fractions(series: pl.Series) -> pl.Series:
    """Per row, whether a float column (or list) holds a finite value that is not whole (a cast would truncate it)."""
    if isinstance(series.dtype, (pl.List, pl.Array)):
        fraction = (pl.element() != pl.element().floor()) & pl.element().is_finite()
        return series.cast(pl.List(series.dtype.inner)).list.eval(fraction).list.any().fill_null(False)
    return ((series != series.floor()) & series.is_finite()).fill_null(False)


def _dense(series: pl.Series, width: int, fill, dtype, flat: pl.Series | None = None) -> np.ndarray:
    """A list column of fixed width as a [rows, width] array; null rows are filled with `fill`. ``flat``: its
    non-null lists' values, exploded already."""
    flat = series.drop_nulls().explode() if flat is None else flat
    if series.null_count() == 0:  # the values buffer as it is, without a filled copy beside it
        return np.ascontiguousarray(flat.to_numpy(), dtype=dtype).reshape(-1, width)
    out = np.full((series.len(), width), fill, dtype=dtype)
    present = series.is_not_null().to_numpy()
    if present.any():
        out[present] = flat.to_numpy().astype(dtype).reshape(-1, width)
    return out


def _lists(values: np.ndarray, null_rows: np.ndarray | None) -> pl.Series:
    series = pl.Series(values)
    series = series.cast(pl.List(series.dtype.inner))
    if null_rows is not None and null_rows.any():
        series = series.set(pl.Series(null_rows), None)
    return series
