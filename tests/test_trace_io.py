"""Trace schema: writer validation, loader, round trips."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.tracegen.io import frame_from_trace, load_trace, read_meta, write_frame, write_trace
from moesim.tracegen.schema import TraceMeta
from moesim.tracegen.synth import Locality, synth_trace


def assert_same(a, b):
    assert a.meta == b.meta
    for name in ("experts", "seq_ids", "seq_offsets", "steps", "phase", "weights", "probs", "spec", "tokens"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype, name
            np.testing.assert_array_equal(x, y, err_msg=name)


def test_synth_write_load_round_trip(tmp_path):
    trace = synth_trace(6, 16, 4, 3, 40, seed=5, prompt_tokens=7)
    write_trace(trace, tmp_path / "t.parquet")
    assert_same(trace, load_trace(tmp_path / "t.parquet"))


def test_round_trip_with_every_optional_column_and_nulls(tmp_path):
    trace = synth_trace(3, 8, 2, 2, 5, seed=1)
    n, layers, k = trace.experts.shape
    rng = np.random.default_rng(0)
    trace.weights = rng.random((n, layers, k), dtype=np.float32)
    trace.weights[1, 2] = np.nan  # one row without weights
    trace.probs = rng.random((n, layers, 8), dtype=np.float32)
    trace.spec = trace.experts.copy()
    trace.spec[:, -1] = -1  # the last layer has no next layer to predict
    trace.tokens = np.arange(n, dtype=np.int32)
    trace.tokens[3] = -1
    write_trace(trace, tmp_path / "t.parquet")
    frame = pl.read_parquet(tmp_path / "t.parquet")
    assert frame["spec"].null_count() == n and frame["weights"].null_count() == 1
    assert frame["token"].null_count() == layers
    assert_same(trace, load_trace(tmp_path / "t.parquet", probs=True))
    assert load_trace(tmp_path / "t.parquet").probs is None  # heavy column only on request


@settings(max_examples=25, deadline=None)
@given(layers=st.integers(1, 5), experts=st.integers(2, 12), data=st.data())
def test_round_trip_property(tmp_path_factory, layers, experts, data):
    k = data.draw(st.integers(1, experts))
    seqs = data.draw(st.integers(1, 3))
    tokens = data.draw(st.integers(1, 6))
    prompt = data.draw(st.integers(0, 3))
    seed = data.draw(st.integers(0, 2**31))
    loc = Locality(reuse=data.draw(st.floats(0, 1)), cross_layer=data.draw(st.floats(0, 1)))
    trace = synth_trace(layers, experts, k, seqs, tokens, seed, loc, prompt_tokens=prompt)
    path = tmp_path_factory.mktemp("rt") / "t.parquet"
    write_trace(trace, path)
    assert_same(trace, load_trace(path))


def _frame(trace):
    return frame_from_trace(trace)


@pytest.fixture
def small():
    return synth_trace(4, 8, 2, 2, 3, seed=0)


def test_writer_accepts_shuffled_rows_of_interleaved_sequences(tmp_path, small):
    frame = _frame(small).sample(fraction=1.0, shuffle=True, seed=3)
    frame = frame.sort(["step", "seq", "layer"])  # a batch log: sequences interleave, steps rise
    assert_same(small, write_frame(frame, small.meta, tmp_path / "t.parquet", "input"))


@pytest.mark.parametrize("edit, message", [
    (lambda f: f.with_columns(pl.when(pl.int_range(pl.len()) == 5).then(pl.lit([9, 1], pl.List(pl.Int16)))
                              .otherwise(pl.col("experts")).alias("experts")),
     "row 5 (seq 0, step 1, layer 1): expert 9 out of range 0..7"),
    (lambda f: f.with_columns(pl.when(pl.int_range(pl.len()) == 6).then(pl.lit([3, 3], pl.List(pl.Int16)))
                              .otherwise(pl.col("experts")).alias("experts")),
     "row 6 (seq 0, step 1, layer 2): expert 3 selected twice"),
    (lambda f: f.filter(pl.int_range(pl.len()) != 7), "seq 0 step 1 has 3 of 4 layers"),
    (lambda f: f.with_columns(pl.when(pl.int_range(pl.len()) == 2).then(pl.lit([1, 2, 3], pl.List(pl.Int16)))
                              .otherwise(pl.col("experts")).alias("experts")),
     "row 2: 3 experts, the trace's top_k is 2"),
    (lambda f: f.with_columns(pl.when(pl.int_range(pl.len()) == 3).then(7).otherwise(pl.col("layer")).alias("layer")),
     "row 3: layer 7 out of range 0..3"),
    (lambda f: f.with_columns(pl.when(pl.int_range(pl.len()).is_between(4, 7)).then(5).otherwise(pl.col("step")).alias("step")),
     "row 8: seq 0: step 2 comes after a later step"),
    (lambda f: f.with_columns(pl.when(pl.int_range(pl.len()) < 4).then(1).otherwise(0).cast(pl.Int8).alias("phase")),
     "a prefill step follows a decode step"),
    (lambda f: f.drop("experts"), "missing column 'experts'"),
    (lambda f: f.with_columns(pl.lit("x").alias("layer")), "row 0: 'layer' value 'x' is not Int16"),
])
def test_writer_refuses_bad_rows_naming_the_first(tmp_path, small, edit, message):
    out = tmp_path / "t.parquet"
    with pytest.raises(MoesimError) as err:
        write_frame(edit(_frame(small)), small.meta, out, "input")
    assert message in str(err.value)
    assert not out.exists() and list(tmp_path.iterdir()) == []  # nothing half-written


def test_array_writer_validates_too(tmp_path, small):
    small.experts[2, 1, 0] = 8
    with pytest.raises(MoesimError, match=r"row 9 \(seq 0, step 2, layer 1\): expert 8 out of range"):
        write_trace(small, tmp_path / "t.parquet")
    assert list(tmp_path.iterdir()) == []


def test_loader_refuses_files_that_are_not_traces(tmp_path):
    plain = tmp_path / "plain.parquet"
    pl.DataFrame({"a": [1]}).write_parquet(plain)
    with pytest.raises(MoesimError, match="plain.parquet: not a moesim trace"):
        load_trace(plain)
    text = tmp_path / "x.parquet"
    text.write_text("hello")
    with pytest.raises(MoesimError, match="x.parquet: not a Parquet file"):
        load_trace(text)
    with pytest.raises(MoesimError, match="missing.parquet: no such file"):
        read_meta(tmp_path / "missing.parquet")


def test_metadata_must_be_consistent():
    with pytest.raises(MoesimError, match="top_k 9 exceeds num_experts 8"):
        TraceMeta(num_layers=2, num_experts=8, top_k=9)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10 ** 6), prompt=st.integers(0, 3), optional=st.sets(st.sampled_from(
    ["weights", "probs", "spec", "tokens", "null_rows"])))
def test_the_in_order_loader_equals_the_general_one(tmp_path_factory, seed, prompt, optional):
    """A file moesim wrote is read a chunk at a time; the result equals reading it whole."""
    import dataclasses

    from moesim.tracegen import io as trace_io
    from moesim.tracegen.io import trace_from_frame

    rng = np.random.default_rng(seed)
    trace = synth_trace(3, 6, 2, 2, 5, seed=seed, prompt_tokens=prompt)
    shape = trace.experts.shape
    extra = {"weights": rng.random(shape).astype(np.float32), "probs": rng.random((*shape[:2], 6)).astype(np.float32),
             "spec": trace.experts[:, ::-1].copy(), "tokens": rng.integers(0, 100, shape[0]).astype(np.int32)}
    if "null_rows" in optional:
        extra["weights"][1] = np.nan
        extra["spec"][2] = -1
        extra["tokens"][0] = -1
    trace = dataclasses.replace(trace, **{k: v for k, v in extra.items() if k in optional})
    path = tmp_path_factory.mktemp("io") / "t.parquet"
    write_trace(trace, path)
    general = trace_from_frame(pl.read_parquet(path), read_meta(path), str(path))
    old, trace_io.CHUNK_ROWS = trace_io.CHUNK_ROWS, 7  # chunks of 6 rows (two whole tokens of 3 layers)
    try:
        fast = trace_io._load_in_order(path, read_meta(path), list(pl.read_parquet_schema(path)))
    finally:
        trace_io.CHUNK_ROWS = old
    assert fast is not None
    assert_same(fast, general)
    assert_same(fast, trace)


LOAD_PEAK = """
import resource, sys
from moesim.tracegen.io import load_trace
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
trace = load_trace(sys.argv[1])
print(trace.experts.nbytes, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
"""


def test_loading_costs_at_most_three_times_the_dense_array(tmp_path):
    """40M accesses (80 MB dense) load within 3x their dense array above the reader's fixed cost (its peak on a
    one-token trace): every column is read a chunk of whole tokens at a time (docs/benchmarks.md: 1.96x measured)."""
    import subprocess
    import sys

    def peak(path):
        dense, above = map(int, subprocess.run([sys.executable, "-c", LOAD_PEAK, str(path)], check=True,
                                               capture_output=True, text=True).stdout.split())
        return dense, above

    write_trace(synth_trace(16, 64, 8, 1, 1, seed=1), tmp_path / "one.parquet")
    write_trace(synth_trace(16, 64, 8, 40, 7813, seed=1), tmp_path / "big.parquet")
    _, fixed = peak(tmp_path / "one.parquet")
    dense, above = peak(tmp_path / "big.parquet")
    assert dense == 40 * 7813 * 16 * 8 * 2
    assert above - fixed <= 3 * dense, (above, fixed, dense)
