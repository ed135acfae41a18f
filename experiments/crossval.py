"""Constants learned from published measurements, by cross-validation only, and the intervals their held-out errors
give.

A published point is a decode speed someone measured (tokens/s at batch 1) on a machine moesim describes from its
spec sheet. moesim's prediction for it, with an engine constant ``c`` that the spec sheets cannot give (an engine's
framework time per MoE layer, ``EngineSpec.layer_us``), is one over the seconds a token takes, simulated at each
constant of a grid (``grid``, ``seconds``) and interpolated between them: a layer's time adds to the token's where
nothing overlaps it (``tests/test_crossval.py``), but a prefetcher's copies may hide part of it, so each point is
simulated, not extrapolated.

- **Fit** (``fit``): for each kind of point (an engine), the ``c`` in ``bounds`` that minimises the squared log
  errors over its points; for each pool of kinds (``Point.pool``: engines whose framework time has one cause, as
  the Python engines' interpreter), the ``c`` over all of the pool's points, which a kind of the pool with no point
  of its own takes; any other kind keeps 0.
- **Held out** (``held_out``): the points fall into groups that share a source or a machine (``groups``: a
  thread that several machines were measured in, a machine several threads measured, are one group). Each group is
  predicted with constants fitted on every other group (scikit-learn's ``LeaveOneGroupOut``), so no point's own
  source or machine is in its fit; its error is the figure quoted.
- **Which constants ship** (``better_than_none``): a kind's constants ship where, fitted without each point's group,
  they predict its points better (median |error|) than none. A kind measured in one group only cannot show that
  alone: it ships its own fit where its pool's points, each held out with its kind's fit (or the pool's, standing in),
  are predicted better than with none, and its held-out figure is then of the pool's stand-in. Given as a rule (``kinds`` a function of the
  training points), the choice is made again inside every fold from that fold's training groups alone, so the
  held-out error of what ships is held out from the choice too.
- **Interval** (``moesim.sim.accuracy.quantile_band``): the 80% interval of a prediction is the prediction times the
  10th and 90th percentiles of ``measured / predicted`` over held-out predictions of other groups, of every engine (one
  engine's alone held fewer of the points: too few of its own are left once its group is out). For a held-out point
  those ratios come from a second cross-validation inside its training groups, so the interval never sees the point
  either, and its **coverage** (the share of held-out points inside their interval) is measured, not assumed."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.optimize import minimize_scalar
from sklearn.model_selection import LeaveOneGroupOut

from moesim.sim.accuracy import COVERAGE, quantile_band



@dataclass(frozen=True)
class Point:
    """A published measurement as the fit sees it."""

    name: str
    source: str         # where it was published (points of one source are left out together)
    machine: str        # the physical machine (likewise)
    kind: str           # whose constant it takes (its engine; its pool's where no point of its kind is fitted)
    measured: float     # tokens/s
    grid: tuple         # constants the point was simulated at, rising, 0 among them (nothing learned)
    seconds: tuple      # moesim's seconds a token at each
    side: str = ""      # where its engine computes the experts not on the GPU (``moesim.sim.accuracy.side``)
    pool: str = ""      # kinds judged together, whose pooled fit a kind of them with no point takes ("": none)

    def __post_init__(self):  # tuples, as the fits keep them (``fit_kind``)
        object.__setattr__(self, "grid", tuple(float(g) for g in self.grid))
        object.__setattr__(self, "seconds", tuple(float(x) for x in self.seconds))

    def predicted(self, constant: float) -> float:
        """tokens/s with the constant at ``constant`` (the seconds interpolated between the grid's)."""
        return 1.0 / float(np.interp(constant, self.grid, self.seconds))

    def constant(self, constants: dict, present: set) -> float:
        """The constant it takes of ``constants`` (``fit``'s, on points of the kinds ``present``): its kind's; where
        its kind has no point there, its pool's; else 0."""
        return constants.get(self.kind, 0.0 if self.kind in present else constants.get(self.pool, 0.0))


def groups(points: list[Point]) -> np.ndarray:
    """Each point's group: points that share a source or a machine, directly or through others, are one group."""
    parent = list(range(len(points)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict = {}
    for i, p in enumerate(points):
        for key in (("source", p.source), ("machine", p.machine)):
            j = first.setdefault(key, i)
            parent[root(i)] = root(j)
    return np.array([root(i) for i in range(len(points))])


def fit(points: list[Point], bounds: tuple[float, float], kinds=None) -> dict[str, float]:
    """Per kind and per pool that ``kinds`` names (None: every one), the constant in ``bounds`` with the least squared
    log error over its points (a pool's: every point of the pool)."""
    names = dict.fromkeys(name for p in points for name in (p.kind, p.pool)
                          if name and (kinds is None or name in kinds))
    return {name: fit_kind(tuple(p for p in points if name in (p.kind, p.pool)), tuple(bounds)) for name in names}


@functools.lru_cache(maxsize=1 << 14)
def fit_kind(mine: tuple[Point, ...], bounds: tuple[float, float]) -> float:
    """The constant in ``bounds`` with the least squared log error over ``mine``, the points of one kind or one pool
    (kept: the folds of a cross-validation fit the same points again wherever the groups they leave out hold none of
    them)."""
    measured = np.log([p.measured for p in mine])
    grid, seconds = np.asarray(mine[0].grid, np.float64), np.array([p.seconds for p in mine], np.float64)
    if any(p.grid != mine[0].grid for p in mine):
        raise ValueError(f"points of {', '.join(sorted({p.kind for p in mine}))} simulated at different constants")

    def loss(c):
        # every point's seconds at c at once, as ``Point.predicted`` interpolates them (held at the grid's ends)
        c = min(max(c, grid[0]), grid[-1])
        j = min(int(np.searchsorted(grid, c, side="right")) - 1, len(grid) - 2)
        at = seconds[:, j] + (seconds[:, j + 1] - seconds[:, j]) / (grid[j + 1] - grid[j]) * (c - grid[j])
        return float(np.sum((-np.log(at) - measured) ** 2))

    return float(minimize_scalar(loss, bounds=bounds, method="bounded",
                                 options={"xatol": 1e-9 * max(1.0, abs(bounds[1]))}).x)


def chosen(kinds, points: list[Point]):
    """The kinds and pools whose constants are fitted on ``points``: ``kinds`` itself (None: every one), or where it
    is a rule, what it chooses from those points alone."""
    return kinds(points) if callable(kinds) else kinds


def better_than_none(points: list[Point], bounds: tuple[float, float], among=None) -> set:
    """The kinds (of ``among``; None: any) whose constants, fitted without each point's group, predict their points
    better held out (a smaller median |error|) than none, and the pools that do so for theirs. A kind measured in
    one group only cannot show it alone: it is chosen where its pool is (a kind of no pool, never)."""
    return set(_better_than_none(tuple(points), tuple(bounds), None if among is None else frozenset(among)))


@functools.lru_cache(maxsize=1 << 10)
def _better_than_none(points: tuple[Point, ...], bounds: tuple[float, float], among: frozenset | None) -> frozenset:
    """``better_than_none``, kept: the intervals' inner cross-validations ask it of each training set twice."""
    judged = [i for i, p in enumerate(points) if among is None or p.kind in among]
    fitted = held_out(list(points), bounds, {name for i in judged for name in (points[i].kind, points[i].pool)})

    def better(of: list[int]) -> bool:
        def error(predicted):
            return float(np.median([abs(predicted(i) / points[i].measured - 1) for i in of]))
        return error(lambda i: fitted[i][0]) < error(lambda i: points[i].predicted(0.0))

    pools = {pool for pool in {points[i].pool for i in judged} - {""}
             if better([i for i in judged if points[i].pool == pool])}
    out = set(pools)
    for kind in dict.fromkeys(points[i].kind for i in judged):
        own = [i for i in judged if points[i].kind == kind]
        if any(kind in fitted[i][1] for i in own):  # another group measured it: its own points judge it
            out |= {kind} if better(own) else set()
        elif points[own[0]].pool in pools:
            out.add(kind)
    return frozenset(out)


def held_out(points: list[Point], bounds: tuple[float, float], kinds=None) -> list[tuple[float, dict]]:
    """Each point's prediction with constants (of ``kinds``: a set of kinds and pools, None for every one, or a rule
    that chooses them from the training points, ``chosen``) fitted on the other groups only, and those constants."""
    out: list = [None] * len(points)
    if not points:
        return out
    labels = groups(points)
    if len(set(labels)) == 1:  # one group: nothing to learn from
        return [(p.predicted(0.0), {}) for p in points]
    for train, test in LeaveOneGroupOut().split(np.zeros(len(points)), groups=labels):
        training = [points[i] for i in train]
        constants, present = fit(training, bounds, chosen(kinds, training)), {p.kind for p in training}
        for i in test:
            out[i] = (points[i].predicted(points[i].constant(constants, present)), constants)
    return out


def ratios(points: list[Point], predictions) -> list[float]:
    """``measured / predicted`` of each held-out prediction."""
    return [p.measured / pred for p, (pred, _) in zip(points, predictions)]


@dataclass(frozen=True)
class Checked:
    """A point predicted with its group left out: the prediction, its interval, and the constants it used."""

    point: Point
    predicted: float
    low: float
    high: float
    constants: dict

    @property
    def error(self) -> float:
        return self.predicted / self.point.measured - 1

    @property
    def inside(self) -> bool:
        return self.low <= self.point.measured <= self.high


LEVELS = tuple(np.round(np.arange(COVERAGE, 0.995, 0.01), 2))  # the quantile levels an interval may be built at


def calibrated_level(points: list[Point], spread, coverage: float = COVERAGE, labels=None) -> float:
    """The level (``LEVELS``, from ``coverage`` up) of the intervals built from ``spread`` (each point's held-out
    ``measured / predicted``) that hold ``coverage`` of the points when each group's interval is built from the
    other groups' ratios alone: the smallest that does, else the widest. Intervals built at ``coverage`` itself hold
    less than it of a group never seen (a group's points err alike), so the level is learned as a constant is: from
    groups other than those it is judged on. A family of points (a side) is given its own: pass its points alone, with
    their ``labels`` among all the points (``groups``: a point's group is its links to every point, any family's)."""
    labels = groups(points) if labels is None else np.asarray(labels)
    spread = np.asarray(spread, np.float64)
    # held[i, k]: point i inside its interval at LEVELS[k], built from the other groups' ratios
    held = np.array([[low <= spread[i] <= high for low, high in zip(*quantile_band(spread[rest], np.array(LEVELS)))]
                     for i in range(len(points)) for rest in (labels != labels[i],) if rest.any()]
                    ).reshape(-1, len(LEVELS))
    enough = np.flatnonzero(held.mean(axis=0) >= coverage) if len(held) else []
    return LEVELS[enough[0]] if len(enough) else LEVELS[-1]


def family_levels(points: list[Point], spread, coverage: float = COVERAGE,
                  family: Callable | None = None) -> dict:
    """Each family's ``calibrated_level``, from its own points (one family, None, where ``family`` is None): each
    family's intervals then hold ``coverage`` of its own unseen groups, not only of all of them together."""
    spread, labels = np.asarray(spread, np.float64), groups(points)
    kinds = [family(p) if family is not None else None for p in points]
    return {k: calibrated_level([p for p, f in zip(points, kinds) if f == k], spread[mine], coverage, labels[mine])
            for k in dict.fromkeys(kinds) for mine in (np.array([f == k for f in kinds]),)}


def cross_validate(points: list[Point], bounds: tuple[float, float], kinds: set | Callable | None = None,
                   coverage: float = COVERAGE, family: Callable | None = None) -> list[Checked]:
    """Every point predicted with its group left out of the fit of the constants (of ``kinds``: ``held_out``), its
    interval from the held-out ratios of a cross-validation within the other groups: of every point there, or with
    ``family`` (a point's family: ``moesim.sim.accuracy.side``), of the points of its own family, at the level
    ``calibrated_level`` learns from those groups (of its family: ``family_levels``)."""
    labels = groups(points)
    outer = held_out(points, bounds, kinds)
    out: list = [None] * len(points)
    for g in dict.fromkeys(labels.tolist()):
        test = np.flatnonzero(labels == g)
        train = [points[i] for i in np.flatnonzero(labels != g)]
        spread = ratios(train, held_out(train, bounds, kinds))
        levels = family_levels(train, spread, coverage, family)
        for i in test:
            pred, constants = outer[i]
            mine = family(points[i]) if family is not None else None
            low, high = quantile_band([r for p, r in zip(train, spread) if family is None or family(p) == mine],
                                      levels.get(mine, LEVELS[-1]))
            out[i] = Checked(points[i], pred, pred * low, pred * high, constants)
    return out
