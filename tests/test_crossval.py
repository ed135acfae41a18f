"""Constants learned from published points only by cross-validation (issue 67): a point's own source or machine is
never in its fit, and the intervals are quantiles of held-out ratios, in closed form."""

from dataclasses import replace

import numpy as np
import pytest

from moesim.experiments.crossval import (LEVELS, Point, better_than_none, calibrated_level, cross_validate,
                                        family_levels, fit, groups, held_out)
from moesim.sim.accuracy import quantile_band
from moesim.sim.engines import ENGINES
from moesim.tracegen.models import get_model


def point(name, source, machine, kind="e", base_s=0.01, per_unit=1e-6, constant=0.0, scale=1.0):
    """A point whose engine really has ``constant`` µs a layer, its seconds linear in it: its measured speed is the
    model's at that constant (times ``scale``)."""
    grid = (0.0, 1e5)
    return Point(name, source, machine, kind, scale / (base_s + per_unit * constant), grid,
                 tuple(base_s + per_unit * c for c in grid))


def test_points_that_share_a_source_or_a_machine_are_one_group():
    """a and b share a source, b and c a machine: a, b, c are left out together; d stands alone."""
    pts = [point("a", "s1", "m1"), point("b", "s1", "m2"), point("c", "s2", "m2"), point("d", "s3", "m3")]
    g = groups(pts)
    assert g[0] == g[1] == g[2] != g[3]


def test_a_fit_finds_a_planted_constant_exactly():
    """Points made with 700 µs a layer give back 700 (the log loss is zero there)."""
    pts = [point(str(i), f"s{i}", f"m{i}", base_s=0.01 * (i + 1), per_unit=32e-6, constant=700.0) for i in range(4)]
    assert fit(pts, (0.0, 1e5))["e"] == pytest.approx(700.0, rel=1e-6)


def test_a_held_out_point_never_sees_its_own_source():
    """A planted constant that only the held-out point's source carries cannot reach its prediction: the other
    groups all say 0, so it is predicted at 0 even though its own measurement says 5000; and a source planted with
    5000 in every group but one predicts that one at 5000."""
    pts = [point(f"p{i}", f"s{i}", f"m{i}", constant=0.0) for i in range(4)] + [point("x", "sx", "mx", constant=5e3)]
    out = held_out(pts, (0.0, 1e5))
    pred, constants = out[-1]
    assert constants["e"] == pytest.approx(0.0, abs=1e-3) and pred == pytest.approx(pts[-1].predicted(0.0), rel=1e-6)
    pts = [point(f"p{i}", f"s{i}", f"m{i}", constant=5e3) for i in range(4)] + [point("x", "sx", "mx", constant=0.0)]
    assert held_out(pts, (0.0, 1e5))[-1][1]["e"] == pytest.approx(5e3, rel=1e-4)
    # one source over every machine: nothing is learned (each point would be in its own fit)
    one = [point(f"p{i}", "s", f"m{i}", constant=5e3) for i in range(3)]
    assert all(c == {} and pred == p.predicted(0.0) for p, (pred, c) in zip(one, held_out(one, (0.0, 1e5))))


def test_which_constants_ship_is_chosen_again_without_the_held_out_group():
    """Kind a, measured in two groups, really has 2000 µs a layer; kind b, in three, none. On all the points a's
    constant beats none held out, so it ships and b's does not. Chosen inside each fold from the fold's training
    groups alone, a held-out group of a leaves one group of a, which cannot show held out that a's constant helps:
    that fold ships none, and the group is predicted at 0; given the choice made on all the points instead, it
    would be predicted at the other group's fitted 2000, exactly."""
    pts = [point("a1", "s1", "m1", "a", constant=2e3), point("a2", "s2", "m2", "a", constant=2e3)]
    pts += [point(f"b{i}", f"t{i}", f"n{i}", "b", base_s=0.02 * (i + 1)) for i in range(3)]
    bounds = (0.0, 1e5)
    assert better_than_none(pts, bounds) == {"a"}
    chosen_on_all = held_out(pts, bounds, {"a"})
    nested = held_out(pts, bounds, lambda training: better_than_none(training, bounds))
    for i in (0, 1):
        assert chosen_on_all[i][0] == pytest.approx(pts[i].measured, rel=1e-6)
        assert nested[i] == (pts[i].predicted(0.0), {})
    assert [c.predicted for c in cross_validate(pts, bounds, lambda t: better_than_none(t, bounds))[:2]] == \
        [p[0] for p in nested[:2]]


def test_a_pool_judges_and_stands_in_for_the_kinds_that_cannot_show_it_alone():
    """Kinds a (two groups) and b (one group) of pool py really take 2000 µs a layer; c, of py too (two groups), none.
    Held out, every fit of py's kinds beats none, so py ships; a ships on its own points, and c, whose own points show
    no gain, does not. b cannot show it alone (its group out, no b is left), so it ships as py does. Held out, b takes
    py's constant, fitted on the other kinds' points (a's and c's); c, measured elsewhere but not chosen, takes 0, not
    py's."""
    pts = [point("a1", "s1", "m1", "a", constant=2e3), point("a2", "s2", "m2", "a", constant=2e3),
           point("b1", "s3", "m3", "b", constant=2e3), point("c1", "s4", "m4", "c", base_s=0.02),
           point("c2", "s5", "m5", "c", base_s=0.03)]
    pts = [replace(p, pool="py") for p in pts]
    bounds = (0.0, 1e5)
    chosen = better_than_none(pts, bounds)
    assert chosen == {"py", "a", "b"}
    out = held_out(pts, bounds, chosen)
    pooled = fit([p for p in pts if p.kind != "b"], bounds, {"py"})["py"]
    assert 0 < pooled < 2e3 and out[2][0] == pytest.approx(pts[2].predicted(pooled), rel=1e-9)
    assert out[0][0] == pytest.approx(pts[0].measured, rel=1e-6)
    assert out[3][0] == pts[3].predicted(0.0) and out[3][1]["py"] > 0


def test_a_fit_kept_is_one_of_the_same_points_only():
    """The fits a cross-validation keeps (``fit_kind``, ``better_than_none``) answer only for the same points: a point
    measured otherwise is fitted anew (700 µs planted, then 1400 in one point: a different constant), the first
    answer comes back for the first points, a grid given as a list is taken as its tuple, and a whole
    cross-validation gives the same numbers with its fits kept as with none kept."""
    from moesim.experiments.crossval import _better_than_none, fit_kind

    pts = [point(str(i), f"s{i}", f"m{i}", base_s=0.01 * (i + 1), per_unit=32e-6, constant=700.0) for i in range(4)]
    first = fit(pts, (0.0, 1e5))["e"]
    moved = [point("0", "s0", "m0", base_s=0.01, per_unit=32e-6, constant=1400.0)] + pts[1:]
    assert fit(moved, (0.0, 1e5))["e"] > first * 1.1 and fit(pts, (0.0, 1e5))["e"] == first
    listed = Point("l", "s", "m", "e", 1.0, [0.0, 1e5], [0.01, 0.02])
    assert listed.grid == (0.0, 1e5) and listed == Point("l", "s", "m", "e", 1.0, (0.0, 1e5), (0.01, 0.02))
    more = pts + [point(f"b{i}", f"t{i}", f"n{i}", "b", base_s=0.02 * (i + 1)) for i in range(3)]

    def everything():
        return [(c.predicted, c.low, c.high, c.constants) for c in
                cross_validate(more, (0.0, 1e5), lambda t: better_than_none(t, (0.0, 1e5)))]
    fit_kind.cache_clear()
    _better_than_none.cache_clear()
    cold = everything()
    assert fit_kind.cache_info().hits > 0 and everything() == cold


def test_the_interval_is_the_quantiles_of_the_held_out_ratios():
    """80%: the 10th and 90th percentiles, by linear interpolation between order statistics: of 1..11, 2 and 10."""
    assert quantile_band(np.arange(1.0, 12.0)) == pytest.approx((2.0, 10.0))
    assert quantile_band([0.5, 2.0], 0.5) == pytest.approx((0.5 + 0.25 * 1.5, 0.5 + 0.75 * 1.5))
    lows, highs = quantile_band(np.arange(1.0, 12.0), np.array([0.8, 0.5]))  # several levels at once: each's ends
    assert list(lows) == pytest.approx([2.0, 3.5]) and list(highs) == pytest.approx([10.0, 8.5])


def test_a_point_s_interval_comes_from_the_other_groups_ratios_only():
    """Every point is off by its own factor; its interval is its prediction times the quantiles of the held-out
    ratios of the other groups, of every kind (with no constant to learn, those are the other points' factors), or of
    its own family where families are given."""
    scales = [0.5, 0.8, 1.0, 1.25, 2.0, 4.0]
    pts = [point(f"p{i}", f"s{i}", f"m{i}", kind="ab"[i % 2], scale=s) for i, s in enumerate(scales)]
    checked = cross_validate(pts, (0.0, 0.0))
    for i, c in enumerate(checked):
        others = [s for j, s in enumerate(scales) if j != i]
        low, high = quantile_band(others, calibrated_level([p for j, p in enumerate(pts) if j != i], others))
        assert c.predicted == pytest.approx(pts[i].predicted(0.0))
        assert (c.low, c.high) == pytest.approx((c.predicted * low, c.predicted * high))
        assert c.inside == (c.low <= pts[i].measured <= c.high)
    # a band per family: the other points of the point's own family only (here its kind: a, a, a or b, b, b), at the
    # level learned from them alone
    kind = lambda p: p.kind  # noqa: E731
    for i, c in enumerate(cross_validate(pts, (0.0, 0.0), family=kind)):
        mine = [j for j in range(len(pts)) if j != i and j % 2 == i % 2]
        level = calibrated_level([pts[j] for j in mine], [scales[j] for j in mine])
        assert family_levels([p for j, p in enumerate(pts) if j != i], [s for j, s in enumerate(scales) if j != i],
                             family=kind)[pts[i].kind] == level
        low, high = quantile_band([scales[j] for j in mine], level)
        assert (c.low, c.high) == pytest.approx((c.predicted * low, c.predicted * high))


def test_the_level_is_the_least_whose_intervals_hold_80_percent_of_groups_never_seen():
    """Ratios 1..11, each its own group, each interval from the ten others: at 80% (their 10th and 90th percentiles)
    1, 2, 10 and 11 fall outside (7 of 11 inside); 2 and 10 come inside once the 10th percentile's position among the
    others, (1 - level) / 2 * 9, is at most 0.5 (2 lies halfway between 1 and 3): level 8/9, 0.89 on the grid, and 9
    of 11 inside. Ratios no level can hold 80% of (one point in each group of two) take the widest."""
    ratios = np.arange(1.0, 12.0)
    pts = [point(f"p{i}", f"s{i}", f"m{i}") for i in range(11)]
    assert calibrated_level(pts, ratios) == 0.89 and LEVELS[0] == 0.8 and LEVELS[-1] == 0.99
    held = [lo <= r <= hi for i, r in enumerate(ratios) for lo, hi in (quantile_band(np.delete(ratios, i), 0.89),)]
    assert sum(held) == 9 and not held[0] and not held[-1]
    assert calibrated_level(pts[:5], ratios[:5]) == 0.99  # the ends are outside whatever the level: 3 of 5


def test_an_engine_s_framework_time_adds_once_per_layer_and_token():
    """The closed form the fit relies on: at batch 1, a run timed as its engine (``as_engine``) takes ``layer_us`` more
    on each MoE layer of each token than the placement's operations alone."""
    from moesim.experiments.plan import plan_trace
    from moesim.sim.config import Config
    from moesim.sim.des import simulate_des
    from moesim.sim import engines

    spec = get_model("mixtral-8x7b")
    trace, _ = plan_trace(spec, None, 1)
    config = Config.build(hardware="rtx4090", strategy="gpu-cache", capacity=4, dtype="q4_k", warmup=1,
                          kernel="per-expert")  # the engine's own kernel kind, which a run timed as it takes
    engine = ENGINES["Mixtral-offloading"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engines, "ENGINES", {**ENGINES, engine.name: replace(engine, layer_us=250.0)})
        plain, named = (simulate_des(trace, config, spec, as_engine=n) for n in (False, True))
    assert named.tpot_s == pytest.approx(plain.tpot_s + spec.num_layers * 250e-6, rel=1e-9)
