"""Importers: routing logs of serving engines and plain tables -> trace files.

Every importer streams its input in batches of lines, parses each batch with polars, and
names the line of the first malformed record. Tokens that lack some layer's record are
dropped whole, and counted (stderr and the trace metadata): nothing is guessed. SGLang's
responses hold one whole request per line and are read a line at a time (import_sglang.py).
Every error names the log (and its line where one line is at fault).

Fields and columns, in every format alike: one the importer does not read is ignored (a serving
log's records carry more than routing: a request id, a timestamp, a note); one that is a read
name in other letters or spacing ('Layer', ' phase', 'E1') is refused, as ``read_arrivals``
refuses 'Seq', for it would otherwise be read as absent ('Phase' left every row decoding).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from moesim.errors import MoesimError, first_line
from moesim.files import check_output
from moesim.tracegen.models import get_model
from moesim.tracegen.import_sglang import import_sglang
from moesim.tracegen.io import ORIGIN, TraceWriter, misspelt, trace_from_frame
from moesim.tracegen.schema import DECODE, FORMATS, TraceMeta

BATCH_LINES = 1 << 20

_VLLM_SCHEMA = {
    "dataset": pl.String, "problem_id": pl.String, "layer": pl.Int64,
    "experts": pl.List(pl.Int64), "gating_probs": pl.List(pl.Float64),
    "token_idx": pl.Int64, "token_pos": pl.Int64, "phase": pl.Int64,
}
_VLLM_NAMES = {"weights": "gating_probs"}  # the trace's columns the log names otherwise, for its messages


def import_trace(src: str | Path, fmt: str, out: str | Path, model: str | None = None,
                 batch_lines: int = BATCH_LINES) -> tuple["ImportSummary", int]:
    """Convert `src` in format `fmt` to a trace file at `out`; returns what was written and the tokens
    dropped. Memory is bounded by a batch of lines and a bucket of sequences, not by the log's size:
    parsed batches are spilled to Parquet parts by sequence bucket, then each bucket is checked and
    written in turn (``TraceWriter``)."""
    src = Path(src)
    check_output(out, "trace", inputs=(src,), suffixes=(".parquet",))  # before the parts are spilled beside it
    spec = get_model(model) if model else None
    if fmt not in FORMATS:
        raise MoesimError(f"unknown format '{fmt}' (choose from {', '.join(FORMATS)})")
    if src.is_dir():
        raise MoesimError(f"{src}: a folder, not a {fmt} log")
    if not src.is_file():
        raise MoesimError(f"{src}: no such file")
    if fmt == "sglang":
        trace = import_sglang(src, Path(out), spec)
        return ImportSummary(trace.meta, trace.num_rows, trace.num_sequences), 0
    parse = _parse_vllm if fmt == "vllm-jsonl" else _parse_csv
    with tempfile.TemporaryDirectory(prefix=f".{Path(out).name}.import.", dir=Path(out).parent) as tmp:
        buckets, keys, seen = _spill(src, parse, _batches(src, batch_lines, skip_header=fmt == "csv"), Path(tmp))
        extra = {"source": f"{fmt}:{src.name}", "sequence_keys": keys}
        meta = spec.trace_meta(**extra) if spec else _inferred_meta(src, seen, extra)
        num_layers = meta.num_layers
        dropped, kept = 0, 0
        with TraceWriter(out, meta) as writer:
            for files in buckets:  # whole sequences, in ascending ids: one bucket in memory at a time
                records, lost = _drop_incomplete(pl.concat([pl.read_parquet(f, glob=False) for f in files],
                                                           how="diagonal_relaxed"), num_layers)
                dropped += lost
                if records.height:
                    records = records.sort(["seq", "step", "layer"], maintain_order=True)  # logs need not be in order
                    writer.add(trace_from_frame(records, meta, str(src), label="line",
                                                names=_VLLM_NAMES if fmt == "vllm-jsonl" else None))
                    kept += records.height
            if not kept:
                raise MoesimError(f"{src}: no token has a record for every one of its {num_layers} layers")
            writer.meta = meta.replace(dropped_tokens=dropped)
            writer.close()
    return ImportSummary(writer.meta, kept // num_layers, writer.sequences), dropped


@dataclass(frozen=True)
class ImportSummary:
    """What an import wrote (the trace itself stays on disk: ``load_trace(out)``)."""

    meta: TraceMeta
    num_rows: int
    num_sequences: int

    @property
    def accesses(self) -> int:
        return self.num_rows * self.meta.num_layers * self.meta.top_k


LINES_PER_BUCKET = 1 << 19


def _spill(src: Path, parse, batches, folder: Path) -> tuple[list[list[Path]], list[str], dict]:
    """Parse the log a batch of lines at a time into Parquet parts, numbering sequences in order of first
    appearance. A sequence's bucket is the window of ``LINES_PER_BUCKET`` lines it first appears in, so a
    bucket holds the sequences that start close together (whole, however long the log) and buckets come
    in ascending sequence ids. Returns each bucket's parts, the sequence keys, and the extremes of the layers,
    expert ids and widths seen, each with the first line that holds it (``_extremes``)."""
    ids: dict[str, int] = {}
    bucket_of: dict[str, int] = {}
    parts: dict[int, list[Path]] = {}
    seen: dict[str, tuple[int, int]] = {}
    for i, (lines, text) in enumerate(batches):
        frame = parse(src, lines, text)
        for key, line in frame.group_by("key", maintain_order=True).agg(pl.col(ORIGIN).first()).iter_rows():
            if key not in ids:
                ids[key], bucket_of[key] = len(ids), line // LINES_PER_BUCKET
        frame = frame.with_columns(pl.col("key").replace_strict(ids, return_dtype=pl.Int32).alias("seq"),
                                   pl.col("key").replace_strict(bucket_of, return_dtype=pl.Int64).alias("bucket"))
        frame = frame.drop("key")
        _extremes(frame, seen)
        for (bucket,), part in frame.group_by("bucket", maintain_order=True):
            path = folder / f"{bucket:08d}-{i:08d}.parquet"
            part.drop("bucket").write_parquet(path)
            parts.setdefault(bucket, []).append(path)
    if not parts:
        raise MoesimError(f"{src}: no records")
    return [parts[b] for b in sorted(parts)], list(ids), seen


# what a log's dimensions are inferred from (without --model): each record's layer, expert ids and their count, as
# (its least, its most)
_MEASURES = {"layer": (pl.col("layer"),) * 2, "expert": (pl.col("experts").list.min(), pl.col("experts").list.max()),
             "width": (pl.col("experts").list.len(),) * 2}
_MOST = 2 ** 15 - 1  # layers, experts and top-k a trace holds at most (int16 arrays; ``TraceMeta``)


def _extremes(frame: pl.DataFrame, seen: dict[str, tuple[int, int]]) -> None:
    """Fold a batch's largest and smallest layer, expert id and width into ``seen`` (name -> (value, line)), each
    with the first line that holds it (batches come in line order: an earlier batch's line is kept on a tie)."""
    for what, ends in _MEASURES.items():
        for name, expr in zip(("min", "max"), ends):
            values = frame.select(expr.alias("v"), ORIGIN).drop_nulls("v")
            if not values.height:
                continue
            at = values["v"].arg_max() if name == "max" else values["v"].arg_min()
            value, line = int(values["v"][at]), int(values[ORIGIN][at])
            old = seen.get(f"{name}_{what}")
            if old is None or (value > old[0] if name == "max" else value < old[0]):
                seen[f"{name}_{what}"] = (value, line)


def _inferred_meta(src: Path, seen: dict[str, tuple[int, int]], extra: dict) -> TraceMeta:
    """The metadata of a log imported without --model: L, E and k are its largest layer + 1, largest expert id + 1
    and its records' number of experts. A value no trace can hold is named by the log and its line."""
    if "max_expert" not in seen:  # no record lists an expert
        raise MoesimError(f"{src}:{seen['min_width'][1]}: 'experts' lists no expert")
    for what in ("layer", "expert"):  # the largest counted from 0, at most _MOST - 1 (a record's other values are
        (low, low_at), (top, top_at) = seen[f"min_{what}"], seen[f"max_{what}"]  # checked against it after)
        if top < 0 or top >= _MOST:
            value, at = (low, low_at) if top < 0 else (top, top_at)
            raise MoesimError(f"{src}:{at}: {what} {value} out of range 0..{_MOST - 1} ({what}s count from 0)")
    top_expert, ((width, wide_at), (low_width, narrow_at)) = seen["max_expert"][0], (seen["max_width"],
                                                                                    seen["min_width"])
    if low_width != width:  # which is the odd one out, the log alone cannot tell
        raise MoesimError(f"{src}:{wide_at}: {width} experts, line {narrow_at} has {low_width} (every record lists "
                          "its token's top-k experts; --model names k)")
    if width > top_expert + 1:
        raise MoesimError(f"{src}:{wide_at}: {width} experts, more than the {top_expert + 1} expert ids "
                          f"0..{top_expert} the log names (--model names the model's)")
    try:
        return TraceMeta(num_layers=seen["max_layer"][0] + 1, num_experts=top_expert + 1, top_k=width, **extra)
    except MoesimError as exc:  # the checks above leave none: the file is named whatever it is
        raise MoesimError(f"{src}: {exc}") from None


def _batches(src: Path, size: int, skip_header: bool) -> Iterator[tuple[np.ndarray, bytes]]:
    """Batches of non-blank lines as (1-based line numbers, text); a CSV header rides on each. A UTF-8 byte-order
    mark at the start (a spreadsheet's or an editor's export) is skipped."""
    header = b""
    with open(src, "rb") as fh:
        if skip_header:
            header = fh.readline().removeprefix(codecs.BOM_UTF8)
            if not header.strip():
                raise MoesimError(f"{src}:1: empty header line")
        numbers, chunk = [], []
        for number, line in enumerate(fh, start=2 if skip_header else 1):
            if number == 1:
                line = line.removeprefix(codecs.BOM_UTF8)
            if line.strip():
                numbers.append(number)
                chunk.append(line if line.endswith(b"\n") else line + b"\n")
            if len(chunk) == size:
                yield np.asarray(numbers, dtype=np.int64), header + b"".join(chunk)
                numbers, chunk = [], []
        if chunk:
            yield np.asarray(numbers, dtype=np.int64), header + b"".join(chunk)


def _parse_vllm(src: Path, lines: np.ndarray, text: bytes) -> pl.DataFrame:
    """vLLM routing JSONL: {dataset, problem_id, layer, experts, gating_probs, token_idx|token_pos[, phase]}.

    `phase` (0 prefill, 1 decode) is optional; records without it are decode steps. A record's other fields are
    ignored; one of these names in other letters or spacing ('Layer', 'token_Idx') is refused (``_misspelt``).
    """
    try:
        raw = pl.read_ndjson(io.BytesIO(text), schema=_VLLM_SCHEMA)
    except pl.exceptions.PolarsError as exc:
        _locate(src, lines, text, _check_vllm_line, first_line(exc))
    _misspelt(src, lines, text)
    holes = [pl.col(c).list.eval(pl.element().is_null()).list.any() for c in ("experts", "gating_probs")]
    if raw.select(pl.any_horizontal(holes).fill_null(False).any()).item():  # polars reads [1, null]
        _locate(src, lines, text, _check_vllm_line, "a list holds null")
    raw = raw.with_columns(pl.Series(ORIGIN, lines))
    _require(src, raw, {"problem_id": "problem_id", "layer": "layer", "experts": "experts"})
    _fit(src, raw, pl.Int32, {"token_idx": pl.col("token_idx"),  # token_pos is read where token_idx is absent
                              "token_pos": pl.when(pl.col("token_idx").is_null()).then("token_pos")})
    raw = raw.with_columns(pl.coalesce("token_idx", "token_pos").alias("step"))
    _require(src, raw, {"step": "token_idx or token_pos"})
    return raw.select(
        pl.concat_str(pl.col("dataset").fill_null(""), pl.lit("/"), "problem_id").alias("key"),
        "step", "layer", "experts", pl.col("gating_probs").alias("weights"),
        pl.col("phase").fill_null(DECODE), ORIGIN,
    )


_NOT_LOWER = r'"[a-z_]*[A-Z\s][^"\n]*"\s*:'  # a JSON key with a capital or a space in it


def _misspelt(src: Path, lines: np.ndarray, text: bytes) -> None:
    """Refuse a record whose field is one of ``_VLLM_SCHEMA``'s in other letters or spacing (``misspelt``): it would
    be read as absent (a 'Phase' leaves the token decoding). Only a batch with a key that has a capital or a space in
    it (a search of the batch, by polars) has its records' keys read (polars' schema of the whole batch: a nested
    object's keys are not fields), and only one misspelt is then looked for, to name its first line."""
    decoded = text.decode(errors="replace")
    if not pl.Series([decoded]).str.contains(_NOT_LOWER).item():
        return
    try:
        keys = pl.scan_ndjson(io.BytesIO(text), infer_schema_length=None).collect_schema().names()
    except pl.exceptions.PolarsError:  # an ignored field of several types: each such line's own keys
        keys = {k for hit in re.finditer(_NOT_LOWER, decoded) for k in _line_keys(decoded, hit.start())}
    for key in misspelt(keys, _VLLM_SCHEMA.__contains__)[:1]:
        problem = (f"field {key!r} is read as {key.strip().lower()!r} only when spelt so (a vllm-jsonl record's "
                   f"fields: {', '.join(_VLLM_SCHEMA)}; others are ignored)")
        for hit in re.finditer(re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:", decoded):
            if key in _line_keys(decoded, hit.start()):
                raise MoesimError(f"{src}:{lines[decoded.count(chr(10), 0, hit.start())]}: {problem}")
        raise MoesimError(f"{src}: {problem}")  # (written otherwise than JSON writes it: escaped)


def _line_keys(text: str, at: int) -> list:
    """The top-level keys of the JSON record on the line of ``text`` that holds position ``at`` (the batch was read:
    each line parses)."""
    end = text.find("\n", at)
    record = json.loads(text[text.rfind("\n", 0, at) + 1:None if end < 0 else end])
    return list(record) if isinstance(record, dict) else []


def _no_constant(name: str):
    """Python's JSON reader takes NaN and Infinity; JSON, and polars' reader, do not."""
    raise ValueError(f"{name} is not JSON (a number is finite)")


def _check_vllm_line(line: str) -> str | None:
    try:
        rec = json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg})"
    except ValueError as exc:
        return str(exc)
    if not isinstance(rec, dict):
        return "not a JSON object"
    for name in ("layer", "token_idx", "token_pos", "phase"):
        if name in rec and not _is_int(rec[name]):
            return f"'{name}' is {json.dumps(rec[name])}, not an integer"
    if "experts" in rec and not (isinstance(rec["experts"], list) and all(map(_is_int, rec["experts"]))):
        return f"'experts' is {json.dumps(rec['experts'])}, not a list of integers"
    if "gating_probs" in rec and rec["gating_probs"] is not None and not (
            isinstance(rec["gating_probs"], list) and all(map(_is_number, rec["gating_probs"]))):
        return f"'gating_probs' is {json.dumps(rec['gating_probs'])}, not a list of numbers"
    return None


_CSV_COLUMNS = ("seq", "step", "layer", "phase")
_EXPERT_COLUMN = re.compile(r"e\d+")


def _csv_column(name: str) -> bool:
    """Whether a table's column of this name is read."""
    return name in _CSV_COLUMNS or bool(_EXPERT_COLUMN.fullmatch(name))


def _parse_csv(src: Path, lines: np.ndarray, text: bytes) -> pl.DataFrame:
    """Plain table: seq,step,layer,e0..e{k-1}; optional phase (0 prefill, 1 decode; default 1). A column of another
    name is ignored (a log's request id); one of these names in other letters or spacing ('Phase', ' layer', 'E0'),
    or with no name at all (an expert column's lost, a trailing comma), is refused, not read as absent ('Phase' left
    every row decoding)."""
    header = next(csv.reader([text.split(b"\n", 1)[0].decode(errors="replace").rstrip("\r\n")]))
    bad = [h for h in header if not h.strip()] + misspelt(header, _csv_column)
    if bad:
        raise MoesimError(f"{src}:1: unknown column(s) {', '.join(map(repr, bad))}: a table's own columns (seq, step, "
                          "layer, phase, e0..ek-1) are read only when spelt so, a column of any other name is ignored")
    twice = sorted({h for h in header if _csv_column(h) and header.count(h) > 1})
    if twice:
        raise MoesimError(f"{src}:1: column(s) {', '.join(map(repr, twice))} appear more than once")
    experts = sorted((h for h in header if _EXPERT_COLUMN.fullmatch(h)), key=lambda h: int(h[1:]))
    if not {"seq", "step", "layer"} <= set(header) or not experts:
        raise MoesimError(f"{src}:1: header must name seq,step,layer,e0..ek-1 (got {','.join(header)})")
    if [int(h[1:]) for h in experts] != list(range(len(experts))):
        raise MoesimError(f"{src}:1: expert columns must be e0..e{len(experts) - 1}, one each, got {', '.join(experts)}")
    read = [h for h in header if h in _CSV_COLUMNS or h in experts]
    try:
        raw = pl.read_csv(io.BytesIO(text), columns=read, schema_overrides={h: pl.Int64 for h in read},
                          has_header=True, infer_schema=False)
    except pl.exceptions.PolarsError as exc:
        at = [header.index(h) for h in read]
        _locate(src, lines, text.split(b"\n", 1)[1], lambda line: _check_csv_line(line, len(header), at),
                first_line(exc))
    _ragged(src, lines, text, len(header))
    raw = raw.with_columns(pl.Series(ORIGIN, lines))
    _require(src, raw, {h: h for h in read})
    _fit(src, raw, pl.Int16, {h: pl.col(h) for h in experts})  # the trace's 'experts', by the table's names
    return raw.select(
        pl.col("seq").cast(pl.String).alias("key"), "step", "layer",
        pl.concat_list(experts).alias("experts"),
        (pl.col("phase") if "phase" in header else pl.lit(DECODE)).cast(pl.Int8).alias("phase"), ORIGIN,
    )


def _ragged(src: Path, lines: np.ndarray, text: bytes, width: int) -> None:
    """Refuse a line of fewer fields than the header (polars reads the missing ones as empty, even a column
    it does not read): its commas outside quotes are counted, every line at once."""
    rows = pl.Series(text.decode(errors="replace").split("\n")[1:len(lines) + 1])
    fields = rows.str.replace_all('"[^"]*"', "").str.count_matches(",") + 1
    bad = (fields != width).arg_true()
    if bad.len():
        raise MoesimError(f"{src}:{lines[bad[0]]}: {fields[bad[0]]} fields, the header has {width}")


def _check_csv_line(line: str, width: int, read: list[int]) -> str | None:
    """Why a table's line is malformed: its number of fields, or a field read (at the indexes ``read``) that is not
    an integer."""
    fields = next(csv.reader([line]))
    if len(fields) != width:
        return f"{len(fields)} fields, the header has {width}"
    bad = [fields[i] for i in read if not fields[i].strip().lstrip("-").isdigit()]
    return f"'{bad[0]}' is not an integer" if bad else None


def _locate(src: Path, lines: np.ndarray, text: bytes, check: Callable[[str], str | None], why: str):
    """Re-read a batch polars refused (``why``), line by line, to name the first bad line."""
    for number, line in zip(lines, text.decode(errors="replace").splitlines()):
        problem = check(line)
        if problem:
            raise MoesimError(f"{src}:{number}: {problem}") from None
    raise MoesimError(f"{src}: lines {lines[0]}-{lines[-1]}: {why}") from None


def _require(src: Path, raw: pl.DataFrame, fields: dict[str, str]) -> None:
    for col, name in fields.items():
        hit = raw.filter(pl.col(col).is_null()).head(1)
        if hit.height:
            raise MoesimError(f"{src}:{hit[ORIGIN][0]}: missing field '{name}'")


def _fit(src: Path, raw: pl.DataFrame, dtype: pl.DataType, fields: dict[str, pl.Expr]) -> None:
    """Refuse, naming the field as the log does, a value the trace's column type cannot hold (null: not read)."""
    for name, value in fields.items():
        hit = raw.filter(value.is_not_null() & value.cast(dtype, strict=False).is_null()).head(1)
        if hit.height:
            raise MoesimError(f"{src}: line {hit[ORIGIN][0]}: '{name}' value {hit.select(value).item()} is not {dtype}")


def _drop_incomplete(records: pl.DataFrame, num_layers: int) -> tuple[pl.DataFrame, int]:
    """Drop tokens that have fewer than num_layers records, each layer valid and present once.

    Tokens with duplicate or out-of-range layers are kept, so validation reports them as errors.
    """
    per_token = records.group_by(["seq", "step"]).agg(
        ((pl.len() < num_layers) & (pl.len() == pl.col("layer").n_unique())
         & pl.col("layer").is_between(0, num_layers - 1).all()).alias("incomplete"))
    incomplete = per_token.filter("incomplete").select("seq", "step")
    kept = records.join(incomplete, on=["seq", "step"], how="anti", maintain_order="left")
    return kept, incomplete.height


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
