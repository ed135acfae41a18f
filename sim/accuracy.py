"""How far a prediction from a spec sheet may be off: the spread of measured / predicted over published decode
speeds of real engines (``benchmarks/published_points.toml``; ``python benchmarks/published_offload.py --cv``,
2026-12-07: 87 points in 26 independent groups; docs/fidelity.md; ``tests/test_shipped_constants.py`` checks these
are what it derives).

A tokens/s predicted for a machine described by its spec sheet comes with an 80% interval: the prediction times the
10th and 90th percentiles of those ratios, each predicted without its point's group (no point sharing its source or
machine in anything it was made from, nor in the choice of which engines' learned times ship). A prediction that
includes an engine's learned framework time (a plan's row, ``sim run --engine NAME``, where one was learned for the
engine) takes ``FRAMEWORK_BAND``: the spread of the whole procedure, choice included, whose folds shipped no time
for an engine only one other group measured; one without (the placement's operations: ``sim run``; an engine with
none learned), ``OPERATIONS_BAND``. Built the same way for each
published point from the other groups only, such intervals held ``FRAMEWORK_HELD`` and ``OPERATIONS_HELD`` of the
points. A machine that carries measured rates (``moesim calibrate``'s: a ``[compute]`` table, a CPU's unpack rates)
gets its own band where its validation measured one (``band_low``, ``band_high`` and ``band_held`` of its [cpu]:
``moesim validate --engine llama.cpp --out``, over llama.cpp decodes calibration did not run), else none: the
published spread is a spec sheet's, not a measurement's.

Of every two published points of one model on one machine that moesim predicts apart, each held out, those it
orders wrong it predicted at most ``TIE_RATIO`` times apart: two plan rows closer than that are not told apart by
the evidence (``tied``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

COVERAGE = 0.8  # an interval holds this share of measurements: its ends are the (1 ± COVERAGE) / 2 quantiles
FRAMEWORK_BAND, FRAMEWORK_HELD = (0.30, 1.38), 0.76
OPERATIONS_BAND, OPERATIONS_HELD = (0.29, 1.30), 0.67
TIE_RATIO = 1.70


def tied(a: float, b: float) -> bool:
    """Whether tokens/s ``a`` and ``b`` are closer than the published pairs tell apart (``TIE_RATIO``)."""
    return max(a, b) < TIE_RATIO * min(a, b)


def quantile_band(ratios, coverage: float = COVERAGE) -> tuple[float, float]:
    """The factors (low, high) a prediction is multiplied by for its interval: the (1 − coverage) / 2 and (1 +
    coverage) / 2 quantiles of ``measured / predicted`` over held-out predictions (linear interpolation between
    order statistics)."""
    ratios = np.asarray(ratios, np.float64)
    if ratios.size == 0:
        return (float("nan"), float("nan"))
    return (float(np.quantile(ratios, (1 - coverage) / 2)), float(np.quantile(ratios, (1 + coverage) / 2)))


def measured(hw) -> bool:
    """Whether the machine ``hw`` carries measured rates (a calibration's)."""
    return hw.compute is not None or (hw.cpu is not None and bool(hw.cpu.unpack_gbps))


def band(hw, framework: bool) -> tuple[float, float, float] | None:
    """The band of a prediction for ``hw`` (``framework``: an engine's learned framework time is in it) and the share
    such intervals held: the machine's own where it is measured and its validation gave one, else none there; the
    published points' on a spec sheet's machine."""
    if measured(hw):
        cpu = hw.cpu
        return None if cpu is None or not cpu.band_high else (cpu.band_low, cpu.band_high, cpu.band_held)
    return (*FRAMEWORK_BAND, FRAMEWORK_HELD) if framework else (*OPERATIONS_BAND, OPERATIONS_HELD)


def interval(tokens_per_s: float, hw, framework: bool) -> tuple[float | None, float | None]:
    """The 80% interval of ``tokens_per_s`` predicted for ``hw`` (``band``): (None, None) where it has none."""
    factors = band(hw, framework)
    if factors is None or tokens_per_s != tokens_per_s:
        return None, None
    return tokens_per_s * factors[0], tokens_per_s * factors[1]


def interval_words(hw, framework: bool) -> str:
    """Where a run's 80% interval comes from and how often such intervals held, as a footnote says it."""
    low, high, held = band(hw, framework)
    if measured(hw):
        return (f"(80% interval): this machine's own, x{low:.2f} to x{high:.2f}: measured / predicted over llama.cpp "
                f"decodes its calibration did not run (moesim validate --engine llama.cpp), 10th to 90th percentile; "
                f"each left out, such intervals held {held:.0%} of them")
    return (f"(80% interval): measured / predicted over published points of real engines, 10th to 90th percentile; "
            f"each built without its point's source or machine, such intervals held {held:.0%} of them "
            "(docs/fidelity.md)")


class Estimate(NamedTuple):
    """A predicted figure (``mid``) with its 80% interval (``low``, ``high``; None where none is given: a calibrated
    machine's)."""

    mid: float
    low: float | None = None
    high: float | None = None
