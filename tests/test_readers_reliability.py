"""Trace and arrivals files whose columns have the wrong type, or an unknown name, as a new user met them: one line
naming the file, the column, its type and the expected one, never a traceback and never truncated numbers."""

import json

import polars as pl
import pytest

import moesim
from moesim.errors import MoesimError
from moesim.tracegen.io import frame_from_trace, write_frame
from moesim.tracegen.schema import METADATA_KEY


@pytest.fixture
def trace_file(tmp_path):
    """A valid small trace file (2 layers, 4 experts, top-2, 2 sequences of 8 tokens)."""
    path = tmp_path / "s.parquet"
    moesim.write_trace(moesim.synth_trace(2, 4, 2, sequences=2, tokens=8, seed=0), path)
    return path


def rewrite(path, edit, name="bad.parquet"):
    """``path``'s rows changed by ``edit``, written beside it with the same ``moesim`` metadata."""
    meta = pl.read_parquet_metadata(path)[METADATA_KEY]
    out = path.with_name(name)
    edit(pl.read_parquet(path)).write_parquet(out, metadata={METADATA_KEY: meta})
    return out


def refused(cli, *args) -> str:
    code, out, err = cli(*args)
    assert code == 1 and not out and err.count("\n") == 1 and err.startswith("moesim: error: "), (code, out, err)
    return err.removeprefix("moesim: error: ").rstrip("\n")


BAD_TRACE_COLUMNS = [
    (lambda f: f.with_columns(pl.col("experts").list.first()), "column 'experts' is Int16, a trace's is a list of "
                                                               "integers"),
    (lambda f: f.with_columns(pl.struct(a=pl.col("experts").list.first()).alias("experts")),
     "column 'experts' is Struct({'a': Int16}), a trace's is a list of integers"),
    (lambda f: f.with_columns(pl.lit(0.5).alias("weights")), "column 'weights' is Float64, a trace's is a list of "
                                                             "numbers"),
    # fractions where integers belong were truncated: [2.7, 0.7] read as experts [2, 0]
    (lambda f: f.with_columns(pl.col("experts").cast(pl.List(pl.Float64)) + pl.lit(0.7)),
     "column 'experts' is List(Float64), a trace's is a list of integers"),
    (lambda f: f.with_columns(pl.col("layer").cast(pl.Float64) + 0.5), "column 'layer' is Float64, a trace's is an "
                                                                       "integer"),
    (lambda f: f.with_columns(pl.col("seq").cast(pl.Float64) + 0.5), "column 'seq' is Float64, a trace's is an "
                                                                     "integer"),
    (lambda f: f.with_columns(pl.col("step").cast(pl.Float64)), "column 'step' is Float64, a trace's is an integer"),
    (lambda f: f.with_columns(pl.col("experts").cast(pl.List(pl.Float32)).alias("spec")),
     "column 'spec' is List(Float32), a trace's is a list of integers"),
    (lambda f: f.with_columns(pl.lit("7").alias("token")), "column 'token' is String, a trace's is an integer"),
    (lambda f: f.with_columns(pl.col("phase").cast(pl.Boolean)), "column 'phase' is Boolean, a trace's is an "
                                                                 "integer"),
]


@pytest.mark.parametrize("edit, message", BAD_TRACE_COLUMNS)
def test_a_trace_column_of_the_wrong_type_is_one_line(cli, trace_file, edit, message):
    bad = rewrite(trace_file, edit)
    assert refused(cli, "trace", "info", bad) == f"{bad}: {message}"
    assert refused(cli, "sim", "hitrate", bad, "--capacity", "2") == f"{bad}: {message}"
    with pytest.raises(MoesimError) as err:
        moesim.load_trace(bad)
    assert str(err.value) == f"{bad}: {message}"


@pytest.mark.parametrize("edit", [
    lambda f: f.with_columns(pl.col("layer").cast(pl.Int64), pl.col("phase").cast(pl.UInt8)),  # wider integers
    lambda f: f.with_columns(pl.col("experts").cast(pl.Array(pl.Int16, 2))),  # fixed-size lists
    lambda f: f.with_columns(pl.col("experts").cast(pl.List(pl.Float64)).alias("weights")),  # float64 weights
    lambda f: f.with_columns(pl.col("experts").cast(pl.List(pl.Int32)).alias("weights")),  # whole weights
    lambda f: f.with_columns(pl.lit(None).alias("token")),  # a column of nulls only: absent
])
def test_other_integer_and_number_types_still_load(trace_file, edit):
    good = moesim.load_trace(trace_file)
    loaded = moesim.load_trace(rewrite(trace_file, edit))
    assert (loaded.experts == good.experts).all() and (loaded.steps == good.steps).all()
    assert loaded.tokens is None


def test_a_frame_takes_whole_floats_and_names_a_fraction_by_row(tmp_path):
    """``write_frame`` (rows built in Python) reads floats where integers belong when each is whole; a fraction is
    named by its row, and nothing is written."""
    trace = moesim.synth_trace(2, 4, 2, sequences=2, tokens=3, seed=0)
    frame = frame_from_trace(trace)
    out = tmp_path / "t.parquet"
    whole = frame.with_columns(pl.col("experts").cast(pl.List(pl.Float64)), pl.col("seq", "step").cast(pl.Float64))
    assert (write_frame(whole, trace.meta, out, "input").experts == trace.experts).all()
    out.unlink()
    cases = [
        (frame.with_columns(pl.when(pl.int_range(pl.len()) == 3).then(pl.lit([2.7, 0.7]))
                            .otherwise(pl.col("experts").cast(pl.List(pl.Float64))).alias("experts")),
         "input: row 3: 'experts' value [2.7, 0.7] is not List(Int16)"),
        (frame.with_columns(pl.col("layer") + pl.when(pl.int_range(pl.len()) == 4).then(0.5).otherwise(0.0)),
         "input: row 4: 'layer' value 0.5 is not Int16"),
        (frame.with_columns(pl.col("experts").list.first()),
         "input: column 'experts' is Int16, a trace's is a list of integers"),
    ]
    for bad, message in cases:
        with pytest.raises(MoesimError) as err:
            write_frame(bad, trace.meta, out, "input")
        assert str(err.value) == message
        assert list(tmp_path.iterdir()) == []


SERVE = ("sim", "serve", "bundled", "--dtype", "q4_k", "--arrivals")
SEQ = "column 'Seq' is read as 'seq' only when spelt so (an arrivals file's columns: arrival_s and seq)"


@pytest.mark.parametrize("frame, message", [
    (pl.DataFrame({"arrival_s": [[0.0, 1.0], [2.0]]}), "column 'arrival_s' is List(Float64), an arrivals file's is "
                                                       "a number (seconds)"),
    (pl.DataFrame({"arrival_s": [0.0, 1.0], "seq": [True, False]}), "column 'seq' is Boolean, an arrivals file's is "
                                                                    "an integer (a trace sequence)"),
    (pl.DataFrame({"arrival_s": [0.0, 1.0]}).with_columns(pl.struct("arrival_s")),
     "column 'arrival_s' is Struct({'arrival_s': Float64}), an arrivals file's is a number (seconds)"),
    # a misspelt seq served sequence i to request i, whatever the file said
    (pl.DataFrame({"arrival_s": [0.0, 1.0], "Seq": [1, 1]}), SEQ),
])
def test_an_arrivals_parquet_with_a_bad_column_is_one_line(cli, tmp_path, frame, message):
    path = tmp_path / "arrivals.parquet"
    frame.write_parquet(path)
    assert refused(cli, *SERVE, path) == f"{path}: {message}"
    with pytest.raises(MoesimError) as err:
        moesim.serve(moesim.load_trace("bundled"), arrivals=str(path), dtype="q4_k")
    assert str(err.value) == f"{path}: {message}"


def test_an_arrivals_csv_with_a_misspelt_column_is_one_line(cli, tmp_path):
    path = tmp_path / "arrivals.csv"
    path.write_text("arrival_s,Seq\n0,1\n1,1\n")
    assert refused(cli, *SERVE, path) == f"{path}: {SEQ}"
    from moesim.sim.scheduler import read_arrivals

    with pytest.raises(MoesimError) as err:
        read_arrivals(str(path), 2)
    assert str(err.value) == f"{path}: {SEQ}"


def test_a_served_streams_request_rows_replay_as_arrivals(cli, tmp_path):
    """The rows `sim serve --out` writes (arrival_s, seq and a dozen columns more) are an arrivals file: the other
    columns, as a production log's, are not read."""
    rows = tmp_path / "requests.parquet"
    assert cli("sim", "serve", "bundled", "--dtype", "q4_k", "--rate", "1", "--out", rows)[0] == 0
    code, out, err = cli(*SERVE, rows, "--json")
    assert code == 0, err
    replayed = pl.read_parquet(rows)
    assert json.loads(out)["summary"]["requests"] == replayed.height


def test_arrivals_of_known_columns_still_serve(cli, tmp_path):
    from moesim.sim.scheduler import read_arrivals

    csv, text, parquet = tmp_path / "a.csv", tmp_path / "t.parquet", tmp_path / "a.parquet"
    csv.write_text("seq,arrival_s\n1,0.5\n1,0\n")
    pl.DataFrame({"arrival_s": ["0", "1.5"]}).write_parquet(text)  # text is read value by value
    pl.DataFrame({"arrival_s": [0, 2], "seq": [1.0, 0.0]}).write_parquet(parquet)  # whole floats for seq
    arrival, seq = read_arrivals(str(csv), 2)
    assert arrival.tolist() == [0.5, 0.0] and seq.tolist() == [1, 1]
    assert read_arrivals(str(text), 2)[0].tolist() == [0.0, 1.5]
    assert read_arrivals(str(parquet), 2)[1].tolist() == [1, 0]
    code, out, err = cli(*SERVE, csv)
    assert code == 0 and "TTFT" in out and not err, err
