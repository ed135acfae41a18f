"""The constants learned from published points ship as the cross-validation derives them: each engine's framework
time per MoE layer (``moesim.sim.engines``), the 80% bands with the share of points their held-out intervals
held, for each side, and the ratio below which two settings on one machine are not told apart
(``moesim.sim.accuracy``). A change to the simulator, a machine file or a point that moves them fails here until
``python benchmarks/published_offload.py --cv`` is rerun and its figures written where they ship."""

import importlib.util
from pathlib import Path

import pytest

from moesim.sim import accuracy
from moesim.sim.engines import ENGINES

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("test_shipped_constants")  # one worker simulates the points once


@pytest.fixture(scope="module")
def derived():
    spec = importlib.util.spec_from_file_location("published_offload", ROOT / "benchmarks" / "published_offload.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench.derive(bench.run(bench.load_points(), bench.LAYER_US_GRID))


def test_each_learned_framework_time_is_the_one_derived(derived):
    """The engines that ship a framework time (on any GPU, or on one maker's) are those whose fitted time predicts
    their points better held out, each at its fit on all its points (to the µs); HybriMoE, built on kTransformers,
    takes kTransformers'."""
    shipped = {name: round(us) for name, us in derived.shipped.items()}
    assert shipped == {e.name: e.layer_us for e in ENGINES.values() if e.layer_us and e.name != "HybriMoE"} | {
        f"{e.name} on {maker} GPUs": us for e in ENGINES.values() for maker, us in e.gpu_layer_us}
    assert ENGINES["HybriMoE"].layer_us == ENGINES["kTransformers"].layer_us


def test_each_band_is_the_one_derived(derived):
    """Each side's band: its ends, the quantiles of measured / predicted at the level learned held out (to two
    places), and the share its held-out intervals held (to the percent)."""
    for bands, shipped in ((derived.framework, accuracy.FRAMEWORK_BANDS), (derived.operations, accuracy.OPERATIONS_BANDS)):
        assert {s: tuple(round(x, 2) for x in band) for s, band in bands.items()} == shipped


def test_the_prompt_growth_and_the_prefill_bands_are_the_ones_derived(derived):
    """A TTFT as its engine runs it: the prompts' growth, fitted on every point whose source gives its prompt
    processing (to two places), ships because held out it beats none; each band of a TTFT (grown, and the operations
    alone) is the quantiles of measured / predicted prompt tokens/s over those points, each predicted without its
    group (to two places), and the share its held-out intervals held (to the percent); every such point is one of
    the counted decode points, and the engines take that growth where they are named."""
    assert round(derived.prompt_growth, 2) == accuracy.PROMPT_GROWTH
    assert all(e.prompt_growth == accuracy.PROMPT_GROWTH for e in ENGINES.values())
    assert tuple(round(x, 2) for x in derived.prefill_band) == accuracy.PREFILL_BAND
    assert tuple(round(x, 2) for x in derived.prefill_operations_band) == accuracy.PREFILL_OPERATIONS_BAND
    assert {c.point.name for c in derived.prefill} <= {c.point.name for c in derived.checked}
    assert len(derived.prefill) == len(derived.prefill_operations) == 73


def test_the_tie_ratio_is_the_one_derived(derived):
    """Of the pairs of one model on one machine predicted apart, the widest apart it orders wrong (to two places) is
    what a plan quotes as the ratio below which rows are not told apart."""
    assert round(derived.tie, 2) == accuracy.TIE_RATIO
    assert len(derived.pairs) == 66 and sum((m > 1) == (p > 1) for _, m, p in derived.pairs) == 56
