"""Every result kind is a table (``moesim.frames``): ``.to_polars()`` and ``.to_pandas()`` hold the result's own
values, a row per run (a curve's capacities, a plan's placements, a sweep's configurations, an allocation's layers),
Jupyter shows it as HTML, a figure's path shows inline, and ``moesim.plot`` takes a pandas frame of results."""

from __future__ import annotations

import sys

import numpy as np
import polars as pl
import pytest

import moesim
from moesim.frames import Drawn, Table

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def trace():
    return moesim.load_trace(moesim.bundled_trace())


def both(result) -> tuple[pl.DataFrame, object]:
    """The result's two frames, which must agree column for column."""
    frame, other = result.to_polars(), result.to_pandas()
    assert list(other.columns) == frame.columns and len(other) == frame.height
    for column in frame.columns:
        assert [None if v is None or v != v else v for v in frame[column].to_list()] == \
            [None if v is None or v != v else v for v in (list(x) if isinstance(x, np.ndarray) else x
                                                          for x in other[column].tolist())]
    assert "<table" in result._repr_html_()
    return frame, other


def test_a_curve_is_a_list_and_a_table_a_row_per_capacity(trace):
    curve = moesim.mrc(trace, "lru", capacities=[2, 4, 8])
    assert isinstance(curve, list) and isinstance(curve, Table) and len(curve) == 3
    frame, _ = both(curve)
    assert frame["capacity"].to_list() == [2, 4, 8]
    assert frame["hit_rate"].to_list() == [r.hit_rate for r in curve] == [r.hits / r.accesses for r in curve]


def test_one_run_is_one_row_of_its_metrics_and_settings(trace):
    run = moesim.simulate(trace, capacity=4, policy="lru", dtype="q4_k", hardware="rtx4090")
    frame, _ = both(run)
    assert frame.height == 1
    row = frame.row(0, named=True)
    assert (row["tpot_s"], row["hit_rate"], row["policy"], row["hardware"]) == (run.tpot_s, run.hit_rate, "lru",
                                                                                   "rtx4090")
    hit = moesim.hitrate(trace, "lru", 4)
    assert both(hit)[0].row(0, named=True)["hits"] == hit.hits


def test_a_served_stream_is_its_summary(trace):
    served = moesim.serve(trace, capacity=4, policy="lru", dtype="q4_k", requests=4, rate=1.0)
    frame, _ = both(served)
    assert frame.height == 1 and frame.row(0, named=True)["requests"] == served.summary["requests"]


def test_a_plan_is_a_row_per_ranked_placement():
    plan = moesim.plan("mixtral-8x7b", "rtx4090")
    frame, _ = both(plan)
    assert frame["rank"].to_list() == [r.rank for r in plan.rows]
    assert frame["tokens_per_s"].to_list() == [r.as_dict()["tokens_per_s"] for r in plan.rows]


def test_an_allocation_is_a_row_per_layer(trace):
    split = moesim.best_split(trace, 96, "lru")
    frame, _ = both(split)
    assert frame["layer"].to_list() == list(range(trace.meta.num_layers)) and frame["slots"].sum() == sum(split.slots)


def test_a_sweep_is_its_results_file(tmp_path, trace):
    moesim.write_trace(trace, tmp_path / "t.parquet")
    (tmp_path / "s.toml").write_text('traces = ["t.parquet"]\nkind = "hitrate"\n[axes]\ncapacity = [2, 4]\n'
                                     '[fixed]\npolicy = "lru"\n')
    summary = moesim.sweep(tmp_path / "s.toml", tmp_path / "r.parquet")
    frame, _ = both(summary)
    assert frame.equals(pl.read_parquet(tmp_path / "r.parquet")) and frame.height == 2


def test_validate_rows_are_a_table(trace):
    rows = moesim.validate(trace, backend="virtual", policies=["lru", "belady"], capacities=[4], dtype="q4_k")
    frame, _ = both(rows)
    assert frame["policy"].to_list() == ["lru", "belady"] and frame["error_pct"].to_list() == [0.0, 0.0]


def test_a_figure_path_shows_inline_and_plot_takes_a_pandas_frame(tmp_path):
    results = pd.DataFrame({"kind": ["hitrate"] * 2, "policy": ["lru"] * 2, "capacity": [2, 4],
                            "per_layer_hit_rate": [[0.5, 0.6], [0.7, 0.8]]})
    path = moesim.plot(results, "per-layer-hitrate", tmp_path / "x.png", capacity=4)
    assert isinstance(path, Drawn) and path == tmp_path / "x.png"
    assert path._repr_png_() == (tmp_path / "x.png").read_bytes() and path._repr_png_()[:4] == b"\x89PNG"
    assert Drawn(tmp_path / "absent.png")._repr_png_() is None


def test_to_pandas_without_pandas_is_one_line(trace, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(moesim.MoesimError, match=r"^to_pandas needs pandas: pip install pandas \(or use "
                                                 r"\.to_polars\(\)\)$"):
        moesim.hitrate(trace, "lru", 4).to_pandas()
