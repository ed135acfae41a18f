"""`moesim plot`: every kind draws from sweep results or a trace — what is drawn is checked (titles, axis
labels, one line per policy, the heatmap's cells, ink on the canvas), not only that a file appeared;
wrong inputs are one-line errors."""

import numpy as np
import polars as pl
import pytest
from matplotlib.image import AxesImage

from figures import overlapping_texts
import moesim
from moesim.errors import MoesimError
from moesim.experiments.sweep import load_spec, run_sweep
from moesim.tracegen.trace import bundled_trace_path

# its module-scoped fixtures are built once: its tests run on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_plot")

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plots")
    for kind, extra in (("hitrate", 'scope = ["per-layer", "global"]\n'), ("des", '[fixed]\nhardware = "h100"\n')):
        spec = folder / f"{kind}.toml"
        capacities = "[2, 4, 6]" if kind == "hitrate" else "[4, 6]"
        spec.write_text(f'traces = ["bundled"]\nkind = "{kind}"\n[axes]\npolicy = ["belady", "lru", "lfu"]\n'
                        f"capacity = {capacities}\n{extra}")
        run_sweep(load_spec(spec), folder / f"{kind}.parquet")
    return folder


POLICIES = {"belady (optimum, no bypass)", "lfu", "lru"}  # as the legends name the sweeps' policies


def ink(fig) -> tuple[float, int]:
    """The share of the canvas that is not background, and how many colours it holds."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # the figure was closed after it was saved: draw it again
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())[..., :3].reshape(-1, 3)
    return float((pixels.min(axis=1) < 250).mean()), len(np.unique(pixels, axis=0))


def panels(fig):
    """The axes that hold data (not a colour bar)."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


@pytest.mark.parametrize("kind, source", [("hitrate-vs-capacity", "hitrate"), ("tpot-vs-capacity", "des"),
                                          ("speedup-heatmap", "des"), ("speedup-heatmap", "hitrate"),
                                          ("per-layer-hitrate", "hitrate")])
def test_result_plots(cli, drawn, results, kind, source):
    out = results / f"{kind}-{source}.png"
    code, stdout, err = cli("plot", results / f"{source}.parquet", "--kind", kind, "--out", out)
    assert code == 0, err
    assert out.read_bytes()[:8] == PNG
    (fig,) = drawn
    title = fig._suptitle.get_text()
    assert f"{source}.parquet" in title, title
    if source == "des":  # what a reader needs to trust a time: the model and the machine
        assert "mixtral-8x7b" in title and "on h100" in title, title
    else:  # a hit-rate sweep's rows name no model: the trace's metadata does
        assert "mixtral-8x7b (32 layers, 8 experts, top-2)" in title, title
    axes = panels(fig)
    assert len(axes) == (2 if source == "hitrate" else 1)  # the hit-rate sweep has two scopes: a panel each
    assert all(ax.get_xlabel() for ax in axes)
    if kind == "speedup-heatmap":
        capacities = 3 if source == "hitrate" else 2
        for ax in axes:
            (image,) = [c for c in ax.get_children() if isinstance(c, AxesImage)]
            assert image.get_array().shape == (3, capacities)
            assert [t.get_text() for t in ax.get_yticklabels()] == ["belady", "lfu", "lru"]
    else:
        assert axes[0].get_ylabel()
        for ax in axes:  # a line drawn under another is named so ("lru (= lfu)": the pool's LRU and LFU agree)
            assert len(ax.get_lines()) == 3 and {line.get_label().split(" (=")[0] for line in ax.get_lines()} == POLICIES
            assert all(np.isfinite(np.asarray(line.get_ydata(), float)).all() for line in ax.get_lines())
        assert {t.get_text().split(" (=")[0] for t in axes[-1].get_legend().get_texts()} == POLICIES
        for ax in axes:  # told apart by marker too, where colours are close
            assert len({line.get_marker() for line in ax.get_lines()}) == 3
    assert overlapping_texts(fig) == []
    share, colours = ink(fig)
    assert share > 0.02 and colours > 10, (share, colours)


@pytest.mark.parametrize("kind", ["activation-heatmap", "eviction-timeline"])
def test_trace_plots(cli, drawn, tmp_path, kind):
    out = tmp_path / f"{kind}.svg"
    code, _, err = cli("plot", bundled_trace_path(), "--kind", kind, "--out", out, "--sequence", "1")
    assert code == 0, err
    assert out.read_text().lstrip().startswith("<?xml")
    (fig,) = drawn
    assert "mixtral-8x7b" in fig._suptitle.get_text()
    axes = panels(fig)
    assert axes and "token" in axes[-1].get_xlabel()
    assert any(isinstance(c, AxesImage) for ax in axes for c in ax.get_children())
    assert overlapping_texts(fig) == []
    share, colours = ink(fig)
    assert share > 0.02 and colours > 10, (share, colours)
    if kind == "eviction-timeline":  # the key is the figure's, above the panels: it covers no cell
        (key,) = fig.legends
        assert [t.get_text() for t in key.get_texts()] == ["routed", "eviction"]
        box = key.get_window_extent(fig.canvas.get_renderer())
        assert not any(box.overlaps(ax.get_window_extent()) for ax in axes)


def test_eviction_log_matches_the_misses():
    from moesim import hitrate
    from moesim.tracegen.io import load_trace

    trace = load_trace(bundled_trace_path())
    r = hitrate(trace, "lru", 4, log_evictions=trace.accesses)
    # every miss past the first four loads of a layer evicts one expert of that layer
    assert len(r.evictions) == r.misses - 4 * trace.meta.num_layers
    assert (r.evictions[:, 0] >= 0).all() and (r.evictions[:, 1] < 32 * 8).all()


def test_plot_errors(cli, results, tmp_path):
    for args, message in (
        ([results / "hitrate.parquet", "--kind", "tpot-vs-capacity"], "lacks column(s) tpot_s"),
        ([results / "hitrate.parquet", "--kind", "pie"], "unknown plot kind"),
        ([results / "des.parquet", "--kind", "speedup-heatmap", "--baseline", "arc"],
         "baseline policy 'arc' is not in the results (belady, lfu, lru); choose one of them with --baseline"),
        ([results / "hitrate.parquet", "--kind", "per-layer-hitrate", "--capacity", "5"], "no rows at capacity 5"),
        ([tmp_path / "none.parquet", "--kind", "hitrate-vs-capacity"], "no such results file"),
        ([bundled_trace_path(), "--kind", "eviction-timeline", "--layer", "40"], "out of range"),
        # it suggested --semantics sequential, which plot does not take
        ([bundled_trace_path(), "--kind", "eviction-timeline", "--capacity", "1"],
         "--capacity 1 is below top_k 2: a step's k experts are resident at once; give --capacity 2 or more"),
        # an option the kind does not read would change nothing
        ([results / "hitrate.parquet", "--kind", "hitrate-vs-capacity", "--capacity", "4"],
         "--capacity is read by per-layer-hitrate, eviction-timeline only; --kind hitrate-vs-capacity does not use it"),
        ([bundled_trace_path(), "--kind", "activation-heatmap", "--layer", "3"], "--layer is read by eviction-timeline"),
        ([results / "hitrate.parquet", "--kind", "per-layer-hitrate", "--sequence", "0"], "--sequence is read by"),
        ([bundled_trace_path(), "--kind", "eviction-timeline", "--baseline", "fifo"], "--baseline is read by"),
    ):
        code, _, err = cli("plot", *args, "--out", tmp_path / "x.png")
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, (args, err)
    code, _, err = cli("plot", results / "hitrate.parquet", "--kind", "hitrate-vs-capacity", "--out", tmp_path / "x.gif")
    assert code == 1 and "unknown figure format" in err and not (tmp_path / "x.gif").exists()
    with pytest.raises(MoesimError, match="^capacity is read by per-layer-hitrate only; kind=.hitrate-vs-capacity. does not use it"):
        moesim.plot(results / "hitrate.parquet", "hitrate-vs-capacity", tmp_path / "x.png", capacity=4)
    with pytest.raises(MoesimError, match="^unknown plot kind 'nope' for results"):  # the kind before its options
        moesim.plot(results / "hitrate.parquet", "nope", tmp_path / "x.png", capacity=4)
    assert not (tmp_path / "x.png").exists()
    assert pl.read_parquet(results / "hitrate.parquet").height == 18


def test_a_line_drawn_under_another_says_so_in_the_legend():
    from moesim.plots.legible import coinciding

    series = [("hybrid", [1, 2], [30.0, 40.0]), ("cpu-miss", [1, 2], [30.0, 40.0]), ("gpu-cache", [1, 2], [30.0, 41.0]),
              ("lru", [1, 2, 3], [30.0, 40.0, 50.0])]
    assert coinciding(series) == ["hybrid", "cpu-miss (= hybrid)", "gpu-cache", "lru"]


def test_capacity_figures_refuse_results_without_a_capacity_axis(cli, tmp_path):
    """A serve sweep with capacity auto has no cache-size axis: one line naming what to draw, not one averaged
    point."""
    frame = pl.DataFrame({"kind": ["serve"] * 2, "policy": ["lru"] * 2, "capacity": ["auto"] * 2,
                          "hit_rate": [0.5, 0.6], "error": [None, None]})
    frame.write_parquet(tmp_path / "serve.parquet")
    code, _, err = cli("plot", tmp_path / "serve.parquet", "--kind", "hitrate-vs-capacity", "--out", tmp_path / "x.png")
    assert code == 1 and "a serve sweep's results; its figures are latency-vs-throughput" in err
    frame.with_columns(pl.lit("des").alias("kind")).write_parquet(tmp_path / "des.parquet")
    code, _, err = cli("plot", tmp_path / "des.parquet", "--kind", "hitrate-vs-capacity", "--out", tmp_path / "x.png")
    assert code == 1 and "the rows' capacity is auto" in err and not (tmp_path / "x.png").exists()


def test_a_policy_behind_an_admission_is_a_line_of_its_own(cli, drawn, tmp_path):
    """Results that sweep ``admission`` draw LRU alone and LRU behind the γ admission as two lines at their own hit
    rates (not one averaged over both), the composition dash-dotted in LRU's colour."""
    frame = pl.DataFrame({"policy": ["lru"] * 4, "admission": ["all", "all", "gamma", "gamma"],
                          "capacity": [2, 4, 2, 4], "hit_rate": [0.3, 0.6, 0.35, 0.62], "error": [None] * 4})
    frame.write_parquet(tmp_path / "r.parquet")
    code, _, err = cli("plot", tmp_path / "r.parquet", "--kind", "hitrate-vs-capacity", "--out", tmp_path / "r.png")
    assert code == 0, err
    (fig,) = drawn
    (ax,) = panels(fig)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert sorted(lines) == ["lru", "lru+gamma"]
    assert list(lines["lru"].get_ydata()) == [0.3, 0.6] and list(lines["lru+gamma"].get_ydata()) == [0.35, 0.62]
    assert lines["lru+gamma"].get_color() == lines["lru"].get_color() and lines["lru+gamma"].get_linestyle() == "-."
    assert not any("mean of" in text for text in [ax.get_title(), *(t.get_text() for t in fig.texts)])
