"""How far a prediction from a spec sheet may be off: the spread of measured / predicted over published decode
speeds of real engines (``benchmarks/published_points.toml``; ``python benchmarks/published_offload.py --cv``,
2026-12-07: 106 points in 33 independent groups; docs/fidelity.md; ``tests/test_shipped_constants.py`` checks these
are what it derives).

A tokens/s predicted for a machine described by its spec sheet comes with an 80% interval: the prediction times two
quantiles of those ratios over the points of its ``side`` (where the engine computes the experts not on the GPU: on
the host CPU, or on the GPU after copying each to a GPU cache), each predicted without its point's group (no point sharing its source
or machine in anything it was made from, nor in the choice of which engines' learned times ship). The quantiles are
the (1 ± level) / 2 ones, at the level that a cross-validation over the groups of its side finds to hold 80% of that
side's points never seen (``moesim.experiments.crossval.family_levels``: the 10th and 90th percentiles of the seen
groups hold less of an unseen one, and the GPU side's few groups need the widest). A prediction timed as its engine (a plan's row, ``sim run --engine NAME``: with the framework time that
ships for it, where one does) takes ``FRAMEWORK_BANDS``: the spread of the whole procedure, choice of what ships
included; the placement's operations alone (``sim run``), ``OPERATIONS_BANDS``: the spread with no time learned for
any engine. Each
carries the share of its side's points such intervals held, each built from the other groups only (level included).
A machine that carries measured rates (``moesim calibrate``'s: a ``[compute]`` table, a CPU's unpack rates) gets its
own band where its validation measured one (``band_low``, ``band_high`` and ``band_held`` of its [cpu]: ``moesim
validate --engine llama.cpp --out``, over llama.cpp decodes calibration did not run), else none: the published
spread is a spec sheet's, not a measurement's.

A TTFT timed as its engine is moesim's prompt time grown by ``PROMPT_GROWTH`` (x 2.82: the published prompts were
processed slower than the placement's operations alone at the median), one fraction for every engine's prefill, learned
like the framework times: each published prompt predicted with it fitted without its group, and shipped because held
out it predicts them better than none (``EngineSpec.prompt_growth``; docs/fidelity.md, "TTFT"). A TTFT predicted from
a spec sheet comes with an 80% interval: its seconds over two quantiles of measured / predicted prompt tokens/s over
those points, each predicted without its group, at the level learned as above: ``PREFILL_BAND`` where it is timed
as its engine (grown), ``PREFILL_OPERATIONS_BAND`` where it is the placement's operations alone (``sim run``); one
band for both sides (one such point is of the GPU side).

Of every two published points of one model on one machine that moesim predicts apart, each held out, those it
orders wrong it predicted at most ``TIE_RATIO`` times apart: two plan rows closer than that are not told apart by
the evidence (``tied``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

COVERAGE = 0.8  # an interval holds this share of measurements: its ends are quantiles of the held-out ratios
SIDES = ("CPU", "GPU")
# side -> (low, high, share of the published points of that side such intervals held, each built without its group)
FRAMEWORK_BANDS = {"CPU": (0.66, 1.34, 0.80), "GPU": (0.54, 2.15, 0.76)}
OPERATIONS_BANDS = {"CPU": (0.40, 1.33, 0.81), "GPU": (0.17, 1.40, 0.76)}
TIE_RATIO = 1.49
PROMPT_GROWTH = 2.30  # a prompt's time as its engine runs it: moesim's x (1 + this)
# measured / predicted prompt tokens/s, as its engine (grown) and as the operations alone: (low, high, share of the
# points such intervals held, each without its group)
PREFILL_BAND = (0.26, 4.08, 0.85)
PREFILL_OPERATIONS_BAND = (0.08, 1.17, 0.79)


def side(strategy) -> str:
    """Where a run's engine computes the experts that are not on the GPU: on the host CPU (``"CPU"``: llama.cpp's
    ``--n-cpu-moe``, kTransformers, Fiddler; their time is the CPU's and its DRAM's; every expert on the GPU counts
    here too, as the llama.cpp runs that measured it), or on the GPU after copying each to a GPU cache (``"GPU"``:
    Mixtral-offloading, MoE-Infinity; the link's time). Each side's predictions err their own way, so each has its
    own band."""
    return "CPU" if strategy.cpu else "GPU"


def tied(a: float, b: float) -> bool:
    """Whether tokens/s ``a`` and ``b`` are closer than the published pairs tell apart (``TIE_RATIO``)."""
    return max(a, b) < TIE_RATIO * min(a, b)


def quantile_band(ratios, coverage: float = COVERAGE) -> tuple[float, float]:
    """The factors (low, high) a prediction is multiplied by for its interval: the (1 − coverage) / 2 and (1 +
    coverage) / 2 quantiles of ``measured / predicted`` over held-out predictions (linear interpolation between
    order statistics); of several coverages at once, an array of each end."""
    ratios = np.asarray(ratios, np.float64)
    if ratios.size == 0:
        return (float("nan"), float("nan"))
    low, high = np.quantile(ratios, (1 - np.asarray(coverage)) / 2), np.quantile(ratios, (1 + np.asarray(coverage)) / 2)
    return (low, high) if np.ndim(coverage) else (float(low), float(high))  # an array of coverages: arrays of ends


def measured(hw) -> bool:
    """Whether the machine ``hw`` carries measured rates (a calibration's)."""
    return hw.compute is not None or (hw.cpu is not None and bool(hw.cpu.unpack_gbps))


def band(hw, as_engine: bool, on: str) -> tuple[float, float, float] | None:
    """The band of a prediction for ``hw`` (``as_engine``: timed as its engine, with the framework time that ships for
    it where one does; ``on``: the run's ``side``) and the share such intervals held: the machine's own where it is
    measured and its validation gave one, else none there; the published points' of that side on a spec sheet's
    machine."""
    if measured(hw):
        cpu = hw.cpu
        return None if cpu is None or not cpu.band_high else (cpu.band_low, cpu.band_high, cpu.band_held)
    return (FRAMEWORK_BANDS if as_engine else OPERATIONS_BANDS)[on]


def interval(tokens_per_s: float, hw, as_engine: bool, on: str) -> tuple[float | None, float | None]:
    """The 80% interval of ``tokens_per_s`` predicted for ``hw`` (``band``): (None, None) where it has none."""
    factors = band(hw, as_engine, on)
    if factors is None or tokens_per_s != tokens_per_s:
        return None, None
    return tokens_per_s * factors[0], tokens_per_s * factors[1]


def prefill_band(grown: bool) -> tuple[float, float, float]:
    """The band of a TTFT whose prompt time was ``grown`` as its engine's (``PROMPT_GROWTH``), or of the operations
    alone."""
    return PREFILL_BAND if grown else PREFILL_OPERATIONS_BAND


def ttft_interval(ttft_s: float | None, hw, grown: bool) -> tuple[float | None, float | None]:
    """The 80% interval of a TTFT (seconds) predicted for ``hw``: its seconds over the ends of ``prefill_band``
    (prompts processed faster than predicted shorten it); (None, None) without a TTFT, or on a machine that carries
    measured rates (its prefill is not what the published spread describes)."""
    if ttft_s is None or ttft_s != ttft_s or measured(hw):
        return None, None
    low, high, _ = prefill_band(grown)
    return ttft_s / high, ttft_s / low


def ttft_words(growth: float) -> str:
    """Where a TTFT's 80% interval comes from, as a footnote says it, for a prompt time grown by ``growth``."""
    low, high, held = prefill_band(growth > 0)
    grown = f"timed as its engine (moesim's prompt time x{1 + growth:.2f}); " if growth > 0 else \
        "the placement's operations alone; "
    return (f"TTFT (80% interval): {grown}x{1 / high:.2f} to x{1 / low:.2g}: published prompt tokens/s over "
            f"moesim's, x{low:.2f} to x{high:.2f}, which held {held:.0%} of those points, each built without its "
            "source or machine")


def interval_words(hw, kinds) -> str:
    """Where the 80% intervals of runs of ``kinds`` (pairs of whether the run is timed as its engine, ``as_engine``, and
    its side) come from and how often such intervals held, as a footnote says it."""
    if measured(hw):
        low, high, held = band(hw, False, SIDES[0])
        return (f"(80% interval): this machine's own, x{low:.2f} to x{high:.2f}: measured / predicted over llama.cpp "
                f"decodes its calibration did not run (moesim validate --engine llama.cpp), 10th to 90th percentile; "
                f"each left out, such intervals held {held:.0%} of them")
    each = [(as_engine, on, band(hw, as_engine, on)) for as_engine in (False, True) for on in SIDES
            if (as_engine, on) in kinds]
    return ("(80% interval): measured / predicted over published points of real engines on the run's side (CPU: the "
            "experts not on the GPU computed on the host CPU; GPU: each copied to a GPU cache first): " + "; ".join(
                f"{on} side{'' if as_engine else ', operations alone'} x{low:.2f} to x{high:.2f}, which held "
                f"{held:.0%} of its points" for as_engine, on, (low, high, held) in each)
            + "; each interval built without its point's source or machine (docs/fidelity.md)")


class Estimate(NamedTuple):
    """A predicted figure (``mid``) with its 80% interval (``low``, ``high``; None where none is given: a calibrated
    machine's)."""

    mid: float
    low: float | None = None
    high: float | None = None
