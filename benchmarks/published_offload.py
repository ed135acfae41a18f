"""Published decode speeds of real MoE engines against what moesim predicts for the same machine and placement.

Each point of ``published_points.toml`` is a measurement someone published with its machine named: llama.cpp and
ik_llama.cpp (experts on the CPU, or everything on the CPU), kTransformers (routed experts on the CPU),
Mixtral-offloading and MoE-Infinity (an expert cache on the GPU). The machine is described from its spec sheet
(``machines/*.toml``, every number's source beside it; SOURCES.md), the model is a preset whose weights take the
bits the source states (a GGUF's file size, or the format's), and moesim simulates the engine's placement and
threads on a trace of the model: the bundled real Mixtral-8x7B trace, a synthetic one for the others (whole layers
on the CPU do not care which experts a token picks), at batch 1 after a warm-up sequence. No constant of moesim's
is fitted to these numbers: each point's DRAM fraction is the median of the published reads measured on other CPUs
(``cpu_rates.dram_eff_without``), and the points a default was taken from are shown and left out of the summary
(``counted = false``, with the reason). Beside each point: the DRAM fraction used and the share of the predicted
time that is the CPU threads' barriers (the prediction again with them free), the least supported constant.
docs/fidelity.md discusses the result.

    python benchmarks/published_offload.py [--plot docs/figures/published_points.png] [--json out.json]

``--cv`` predicts every point with the engines' framework time fitted without its group (points sharing a source or
a machine), where the other groups alone show it beats none, gives it an 80% interval from the other groups'
held-out errors, and says which learned constants ship (``moesim.experiments.crossval``; ``--plot`` then draws those,
with their intervals).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tomllib
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from moesim import simulate
from moesim.sim import engines
from moesim.experiments.crossval import Point, better_than_none, cross_validate, family_levels, fit, groups
from moesim.experiments.plan import plan_trace
from moesim.sim.accuracy import quantile_band, side
from moesim.sim.engines import ENGINES
from moesim.sim.cpu_rates import DRAM_EFF, dram_eff_without
from moesim.sim.hardware import load_hardware
from moesim.sim.strategies import STRATEGIES
from moesim.tracegen.model_spec import FORMATS
from moesim.tracegen.models import get_model
from moesim.tracegen.synth import Locality, synth_trace

HERE = Path(__file__).parent
SETTINGS = ("cpu_layers", "capacity", "policy", "prefetch", "kernel", "dram_capacity", "split_mode", "numa",
            "context")


KEPT = ("mxfp4",)  # expert formats a GGUF keeps whatever it quantizes the rest to (gpt-oss's release format)


def model_for(point: dict):
    """The model preset with its weights stored as the point says: a file's size spread over every weight (where
    its experts are in a format a GGUF keeps, ``KEPT``, they take that format's bits and the other weights the rest
    of the file), or the experts' stated bits (None: the format's own, passed as dtype)."""
    spec = get_model(point["model"])
    experts = spec.num_layers * spec.num_experts * spec.expert_params
    if "file_gib" in point:
        file_bits = point["file_gib"] * 2 ** 30 * 8
        kept = point["format"] in KEPT
        bits = FORMATS[point["format"]].bits if kept else file_bits / (spec.non_expert_params + experts)
        other_bits = (file_bits - experts * bits) / spec.non_expert_params if kept else bits
        if other_bits <= 0:
            raise SystemExit(f"{point['id']}: its file of {point['file_gib']} GiB cannot hold the experts alone")
        return replace(spec, stored_expert_bytes=spec.expert_params * bits / 8, expert_format=point["format"],
                       stored_other_bytes=spec.non_expert_params * other_bits / 8,
                       other_format=point.get("other", point["format"]))
    if "expert_bits" in point:
        return replace(spec, stored_expert_bytes=spec.expert_params * point["expert_bits"] / 8,
                       expert_format=point["format"])
    return spec


def machine_for(point: dict):
    """The point's hardware file, its threads as the point ran them (or as its engine fixes them: Fiddler's 16) and
    its DRAM fraction held out (the files leave ``dram_eff`` at the default, the median of every published read)."""
    hw = load_hardware(HERE / "machines" / f"{point['machine']}.toml")
    if point["engine"] in ENGINES:
        hw = ENGINES[point["engine"]].machine(hw)
    if hw.cpu is None:
        return hw
    if hw.cpu.dram_eff != DRAM_EFF:
        raise SystemExit(f"machines/{point['machine']}.toml sets dram_eff: the check takes it held out")
    threads = min(point.get("threads", hw.cpu.threads), hw.cpu.cores * hw.cpu.sockets)  # past the cores: SMT, which
    # the model does not count (a thread a core at most)
    return replace(hw, cpu=replace(hw.cpu, threads=threads, dram_eff=dram_eff_without(hw.cpu.name)))


def predict(point: dict, grid: tuple = ()) -> dict:
    """moesim's tokens/s for one point, with the memory it needs, the DRAM fraction it took, the share of its
    time the CPU's thread barriers take, the engine it was timed as and, for each framework time of ``grid`` (µs a
    layer), a token's seconds timed as that engine with it."""
    spec = model_for(point)
    hw = machine_for(point)
    trace, _ = plan_trace(spec, None, 1)
    stored = "file_gib" in point or "expert_bits" in point
    settings = {k: point[k] for k in SETTINGS if k in point}
    if "vram_gb" in point:  # the source capped the GPU's memory
        settings["vram"] = point["vram_gb"]
    settings.update(model=spec, strategy=point["strategy"], warmup=1, dtype=None if stored else point["format"],
                    other_dtype=point.get("other", None if "file_gib" in point else point["format"]))
    r = simulate(trace, hardware=hw, engine=timed_as(point), **settings)
    out = {"predicted": r.tokens_per_s, "tpot_s": r.tpot_s, "vram_gb": r.vram_gb, "ram_gb": r.ram_gb,
           "hardware": hw.describe(), "dram_eff": hw.cpu.dram_eff if hw.cpu else None, "barrier_share": 0.0,
           "timed_as": r.timed_as, "kind": kind_of(point["engine"], hw)}
    if grid:  # a token's seconds timed as its engine with each framework time of the grid (a prefetcher may hide some)
        out["seconds"] = [framework_tpot(trace, settings, hw, r.timed_as, us) if r.timed_as in ENGINES else r.tpot_s
                          for us in grid]
    if hw.cpu is not None:
        free = replace(hw, cpu=replace(hw.cpu, barrier_base_us=0.0, barrier_thread_us=0.0))
        out["barrier_share"] = 1 - simulate(trace, hardware=free, engine=timed_as(point), **settings).tpot_s / r.tpot_s
    if "prompt_tokens" in point:
        out["prefill_s"] = prefill_s(point, spec, hw, settings)
    return out


def prefill_s(point: dict, spec, hw, settings: dict) -> float:
    """moesim's seconds to process the point's prompt (its TTFT) as its run placed the model: on a synthetic trace of
    two sequences (the bundled one records prompts of its own), each given ``prompt_tokens``."""
    trace = synth_trace(spec.num_layers, spec.num_experts, spec.top_k, 2, 4, 0, Locality(), 0, spec.name,
                        spec.trace_meta())
    settings = {**{k: v for k, v in settings.items() if k != "context"}, "warmup": 0}  # the prompt from an empty cache
    return simulate(trace, hardware=hw, engine=timed_as(point), prompt=point["prompt_tokens"], **settings).ttft_s


# ik_llama.cpp's graph of a CPU layer's routed experts when the published runs were made (every one before its PR
# #858, 2025-10-24, which fused the router weights' product into the sum: the 3 nodes of moesim's module): with fused
# MoE (-fmoe), moe_up_gate, down, mul, multi_add; without, up, gate, fused_mul_unary, down, mul, multi_add (its
# multi_add sums the k experts in one node since PR #112, 2024-10-31)
IK_NODES = {True: 4, False: 6}


@contextmanager
def engine_as(name: str, **changes):
    """The engine ``name`` with ``changes`` while the block runs (``moesim.sim.engines.ENGINES``, as every run reads it);
    none where ``changes`` is empty."""
    saved = engines.ENGINES
    if changes:
        engines.ENGINES = {**saved, name: replace(saved[name], **changes)}
    try:
        yield
    finally:
        engines.ENGINES = saved


def as_run(point: dict):
    """The engines as the point's run had them: an ik_llama.cpp point's graph of the routed experts as its build and
    flags made it (``fused_moe``, ``IK_NODES``), with no framework time and its prompts not grown (what the
    cross-validation learns); the others as they are."""
    if point["engine"] != "ik_llama.cpp":
        return engine_as(point["engine"])
    if "fused_moe" not in point:
        raise SystemExit(f"point {point['id']}: an ik_llama.cpp point says whether its run fused MoE (fused_moe)")
    return engine_as("ik_llama.cpp", cpu_ops=(IK_NODES[point["fused_moe"]], 0), layer_us=0.0, gpu_layer_us=(),
                     prompt_growth=0.0)


def timed_as(point: dict) -> str:
    """The engine a point is timed as: ik_llama.cpp's as ik_llama.cpp (``as_run``: its graph at the time); any other
    as the first engine that runs its placement (``auto``: no framework time, as every point's ``predicted``)."""
    return "ik_llama.cpp" if point["engine"] == "ik_llama.cpp" else "auto"


def kind_of(engine: str, hw) -> str:
    """Which learned constant a point takes: its engine's framework time per layer, or where the engine ran on a GPU
    not NVIDIA's, that engine's on that maker's GPUs (``EngineSpec.gpu_layer_us``: its Metal, ROCm/Vulkan, SYCL
    builds)."""
    vendor = hw.gpu.vendor if hw.gpu is not None else "nvidia"
    return engine if vendor == "nvidia" else f"{engine} on {vendor} GPUs"


def shipped_as(kind: str) -> tuple[str, str | None]:
    """The engine and the GPU maker (None: its own ``layer_us``) whose constant a kind's learned time is."""
    engine, _, rest = kind.partition(" on ")
    return engine, rest.removesuffix(" GPUs") or None


def framework_tpot(trace, settings: dict, hw, name: str, layer_us: float) -> float:
    """A token's seconds timed as the engine ``name`` (its kernel kind included) taking ``layer_us`` a MoE layer."""
    if ENGINES[name].kernel is not None:  # the engine runs its own kernel kind (the point's, where it says one)
        settings = {k: v for k, v in settings.items() if k != "kernel"}
    # the grid's time is the whole of it (no maker's shipped on top: ``EngineSpec.on``)
    with engine_as(name, layer_us=layer_us, gpu_layer_us=()):
        return simulate(trace, hardware=hw, engine=name, **settings).tpot_s


def placement(point: dict, spec) -> str:
    """The point's placement as the tables print it, with the layout over the sockets where the point sets one."""
    laid = {"distribute": ", --numa distribute", "one-pool": ", one pool", "per-socket": ", a pool a socket"}
    return _placed(point, spec) + laid.get(point.get("numa"), "")


def _placed(point: dict, spec) -> str:
    if point["strategy"] == "gpu-cache":
        return f"GPU cache {point['policy']} C={point['capacity']}"
    if point["strategy"] == "hybrid":
        return "routed experts on CPU"
    if point["strategy"] == "cpu-miss":
        return f"GPU {point['policy']} C={point['capacity']}, misses on CPU"
    layers = point.get("cpu_layers", spec.num_layers)
    split = ", every layer split over the GPUs" if point.get("split_mode") == "tensor" else ""
    return f"layers on CPU {layers}/{spec.num_layers}{split}"


def run(points: list[dict], grid: tuple = ()) -> list[dict]:
    rows = []
    for p in points:
        with as_run(p):
            out = predict(p, grid if p.get("counted", True) else ())
        error = (out["predicted"] - p["measured"]) / p["measured"]
        rows.append({**p, **out, "error": error, "counted": p.get("counted", True),
                     "placement": placement(p, get_model(p["model"]))})
    return rows


def summary(rows: list[dict]) -> dict:
    counted = [r for r in rows if r["counted"]]
    worst = max(counted, key=lambda r: abs(r["error"]))
    return {"points": len(counted), "machines": len({r.get("box", r["machine"]) for r in counted}),
            "engines": sorted({r["engine"] for r in counted}), "formats": sorted({r["format"] for r in counted}),
            "median_abs_error": statistics.median(abs(r["error"]) for r in counted),
            "worst": (worst["id"], worst["error"]), "within_10": sum(abs(r["error"]) <= 0.10 for r in counted),
            "within_25": sum(abs(r["error"]) <= 0.25 for r in counted)}


def print_table(rows: list[dict], s: dict) -> None:
    print(f"{'id':6} {'engine':18} {'machine':22} {'model':16} {'format':7} {'placement':24} {'measured':>8} "
          f"{'moesim':>8} {'error':>7} {'DRAM':>5} {'barr.':>5}  grade")
    for r in rows:
        mark = "" if r["counted"] else f"   not counted: {r['excluded']}"
        dram = "-" if r["dram_eff"] is None else f"{r['dram_eff']:.2f}"
        print(f"{r['id']:6} {r['engine']:18} {r['machine']:22} {r['model']:16} {r['format']:7} {r['placement']:24} "
              f"{r['measured']:8.2f} {r['predicted']:8.2f} {100 * r['error']:+6.0f}% {dram:>5} "
              f"{100 * r['barrier_share']:4.0f}%  {r['grade']}{mark}")
    print(f"\n{s['points']} counted points on {s['machines']} machines, engines {', '.join(s['engines'])}, "
          f"formats {', '.join(s['formats'])}")
    print(f"median |error| {100 * s['median_abs_error']:.0f}%, worst {s['worst'][0]} {100 * s['worst'][1]:+.0f}%; "
          f"{s['within_10']} within 10%, {s['within_25']} within 25%")


def plot(rows: list[dict], s: dict, path: Path) -> None:
    """Predicted against measured, log axes, y = x and its ±10% band; every point, coloured by engine, the
    points not counted hollow."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from moesim.plots.legible import label_points

    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    lo = min(min(r["measured"], r["predicted"]) for r in rows) / 1.5
    hi = max(max(r["measured"], r["predicted"]) for r in rows) * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.85", label="±10%")
    colours = dict(zip(sorted({r["engine"] for r in rows}), plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for engine, colour in colours.items():
        for counted in (True, False):
            mine = [r for r in rows if r["engine"] == engine and r["counted"] == counted]
            if mine:
                ax.scatter([r["measured"] for r in mine], [r["predicted"] for r in mine], s=36, zorder=3,
                           facecolors=colour if counted else "none", edgecolors=colour,
                           label=engine + ("" if counted else " (not counted)"))
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured decode tokens/s (published)",
           ylabel="moesim predicted tokens/s")
    ax.set_title(f"Published MoE decode speeds vs moesim: {s['points']} points, {s['machines']} machines "
                 f"(spec-sheet hardware files)\nmedian |error| {100 * s['median_abs_error']:.0f}%, worst "
                 f"{s['worst'][0]} {100 * s['worst'][1]:+.0f}%; batch 1, weights as published (GGUF, HQQ, bf16)",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    left_out = label_points(ax, [(r["measured"], r["predicted"], r["id"], {}) for r in rows], fontsize=6)
    if left_out:
        print(f"{left_out} point labels had no free place and are not drawn (--json has every point)")
    fig.savefig(path, dpi=130)


LAYER_US_BOUNDS = (0.0, 1e5)  # an engine's framework time per layer, µs: none, up to 0.1 s


SAME_SOURCE = ((r"^(ikawrakow|kvcache-ai)/", ""), (r"^kyuz0/.*", "kyuz0"), (r"^geerlingguy/.*", "geerlingguy"), (r"^melinoe\b.*", "melinoe"), (r"^moe-infinity readme.*", "moe-infinity readme"),
               (r"^efeslab/fiddler\b.*", "fiddler repository"), (r"^llmfit pr #\d+", "llmfit"), (r"^lhl/.*", "lhl"))


def source_of(point: dict) -> str:
    """The publication a point comes from: its source up to the first detail (" (", ", "), one name for each
    publication however the points cite it (``SAME_SOURCE``: a repository's owner, a paper's table, a commit)."""
    name = point["source"].split(" (")[0].split(", ")[0].lower()
    for pattern, same in SAME_SOURCE:
        name = re.sub(pattern, same, name)
    return name


LAYER_US_GRID = (0.0, 250.0, 500.0, 1000.0, 2000.0, 4000.0, 8000.0, 12000.0, 16000.0, 24000.0, 32000.0, 64000.0,
                 1e5)  # the framework times each counted point is simulated at (µs a MoE layer), LAYER_US_BOUNDS's


def pool_of(kind: str) -> str:
    """The pool a kind's framework time is judged in (``moesim.experiments.crossval``): the engines whose layers a
    Python loop runs (``EngineSpec.layer_loop``, on any maker's GPUs) are one; any other kind is its own (llama.cpp's
    builds for each maker's GPUs pooled did worse held out: AMD's, which takes no time, would take Apple's and
    Intel's)."""
    engine, _ = shipped_as(kind)
    return "Python engines" if engine in ENGINES and ENGINES[engine].layer_loop == "python" else ""


def cv_points(rows: list[dict]) -> list[Point]:
    """The counted points as the cross-validation sees them: a token's seconds simulated at each framework time of
    ``LAYER_US_GRID``."""
    return [Point(r["id"], source_of(r), r.get("box", r["machine"]), r["kind"], r["measured"], LAYER_US_GRID,
                  tuple(r["seconds"]), side(STRATEGIES[r["strategy"]]), pool_of(r["kind"]))
            for r in rows if r["counted"]]


PREFILL_GRID = (-0.9, 0.0, 30.0)  # a prompt's time grown by these fractions (one constant for every engine's prefill)
PREFILL_BOUNDS = (PREFILL_GRID[0], PREFILL_GRID[-1])  # the fraction a fit may take


def growth_ships(points: list[Point]) -> set:
    """Whether the prompts' growth ships ({"prefill"} or nothing): fitted without each point's group, it predicts the
    prompts better held out than none (``EngineSpec.prompt_growth``)."""
    return better_than_none(points, PREFILL_BOUNDS)


def prefill_points(rows: list[dict]) -> list[Point]:
    """The counted points whose source gives their run's prompt processing, as the cross-validation sees them: its
    tokens/s measured, moesim's seconds a prompt token with its time grown by each fraction of ``PREFILL_GRID`` (at 0:
    as simulated, what ships)."""
    return [Point(r["id"], source_of(r), r.get("box", r["machine"]), "prefill", r["prefill_measured"], PREFILL_GRID,
                  tuple(r["prefill_s"] / r["prompt_tokens"] * (1 + g) for g in PREFILL_GRID),
                  side(STRATEGIES[r["strategy"]]))
            for r in rows if r["counted"] and "prefill_s" in r]


def cv_summary(checked: list) -> dict:
    """Median |error| over every held-out point and by engine, the worst, the coverage and median half-width of the
    intervals."""
    errors = [abs(c.error) for c in checked]
    worst = max(checked, key=lambda c: abs(c.error))
    kinds = {}
    for c in checked:
        kinds.setdefault(c.point.kind, []).append(abs(c.error))
    return {"points": len(checked), "groups": len(set(groups([c.point for c in checked]).tolist())),
            "median_abs_error": statistics.median(errors), "worst": (worst.point.name, worst.error),
            "by_engine": {k: (len(v), statistics.median(v)) for k, v in kinds.items()},
            "coverage": sum(c.inside for c in checked) / len(checked),
            "median_half_width": statistics.median((c.high - c.low) / 2 / c.predicted for c in checked
                                                   if c.high == c.high)}


def plot_cv(checked: list, path: Path) -> None:
    """Held-out prediction against measured, log axes, y = x; each point with its 80% interval as a vertical bar,
    coloured by engine."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = cv_summary(checked)
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    lo = min(min(c.point.measured, c.low) for c in checked) / 1.3
    hi = max(max(c.point.measured, c.high) for c in checked) * 1.3
    ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="predicted = measured")
    kinds = sorted({c.point.kind for c in checked})
    colours = dict(zip(kinds, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 2))
    for kind in kinds:
        mine = [c for c in checked if c.point.kind == kind]
        x = [c.point.measured for c in mine]
        ax.vlines(x, [c.low for c in mine], [c.high for c in mine], color=colours[kind], alpha=0.35, lw=3)
        ax.scatter(x, [c.predicted for c in mine], s=22, color=colours[kind], zorder=3, label=f"{kind} ({len(mine)})")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured decode tokens/s (published)",
           ylabel="moesim tokens/s, held out (bar: its 80% interval)")
    ax.set_title(f"Published MoE decode speeds vs moesim, each point's group left out of every fit and of the choice "
                 f"of what ships:\n{s['points']} points, {s['groups']} groups, median |error| "
                 f"{100 * s['median_abs_error']:.0f}%, worst {s['worst'][0]} {100 * s['worst'][1]:+.0f}%; the 80% "
                 f"intervals hold {100 * s['coverage']:.0f}% (median half-width {100 * s['median_half_width']:.0f}%)\n"
                 "batch 1, spec-sheet hardware files, weights as published "
                 "(GGUF, HQQ, bf16)", fontsize=8)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def on_side(point: Point) -> str:
    """A point's family: the side its engine computes the experts not on the GPU (``moesim.sim.accuracy.side``)."""
    return point.side


def same_machine_pairs(rows: list[dict], checked: list) -> list[tuple]:
    """Every two counted points of one model on one machine (box) that moesim predicts apart, each with (their names,
    measured ratio, held-out predicted ratio), the first point's over the second's: what a plan's ranking of two rows
    on a user's machine is checked against. (Two runs of one setting, predicted alike, are not a ranking.)"""
    predicted = {c.point.name: c.predicted for c in checked}
    counted = [r for r in rows if r["counted"]]
    out = []
    for i, a in enumerate(counted):
        for c in counted[i + 1:]:
            ratio = predicted[a["id"]] / predicted[c["id"]]
            if (a.get("box", a["machine"]), a["model"]) == (c.get("box", c["machine"]), c["model"]) \
                    and abs(ratio - 1) > 1e-9:
                out.append((f"{a['id']}/{c['id']}", a["measured"] / c["measured"], ratio))
    return out


def ships(points: list[Point]) -> set:
    """Of ``points``' engines (and pools of them, ``pool_of``), those whose framework times ship: fitted without each
    point's group, they predict their points better held out than none, and moesim runs the engine as one of its own
    (``moesim.sim.engines``)."""
    return better_than_none(points, LAYER_US_BOUNDS, {p.kind for p in points if shipped_as(p.kind)[0] in ENGINES})


def print_cv(checked: list, plain: list, fitted: list, shipped: dict) -> None:
    """Every counted point: measured, predicted with the framework times its fold chose to ship, fitted without its
    group, its 80% interval (from the held-out ratios of the other groups), the error, whether the interval holds it,
    and the machines of its group (left out of everything its prediction, interval and choice were made from); then
    each engine's held-out error with a framework time (``fitted``), without (``plain``) and as chosen
    (``checked``), and what ships."""
    labels = groups([c.point for c in checked])
    machines = {g: sorted({c.point.machine for c, h in zip(checked, labels) if h == g}) for g in set(labels.tolist())}
    print(f"{'id':6} {'engine':23} {'measured':>8} {'moesim':>8} {'80% interval':>15} {'error':>7} in  "
          f"{'µs/layer':>8}  left out with it: its group's machines")
    for c, g in zip(checked, labels):
        present = {o.point.kind for o, h in zip(checked, labels) if h != g}  # the kinds its fold fitted from
        used = c.point.constant(c.constants, present) if {c.point.kind, c.point.pool} & set(c.constants) else None
        print(f"{c.point.name:6} {c.point.kind[:23]:23} {c.point.measured:8.2f} {c.predicted:8.2f} "
              f"{c.low:7.2f}-{c.high:<7.2f} {100 * c.error:+6.0f}% {'yes' if c.inside else 'no':3} "
              f"{'-' if used is None else f'{used:.0f}':>8}  {', '.join(machines[g])}")
    s, p, f = cv_summary(checked), cv_summary(plain), cv_summary(fitted)
    print(f"\n{s['points']} counted points in {s['groups']} groups (points sharing a source or a machine are left out "
          "together)")
    print(f"median |error| {100 * s['median_abs_error']:.0f}% (nothing learned: {100 * p['median_abs_error']:.0f}%), "
          f"worst {s['worst'][0]} {100 * s['worst'][1]:+.0f}%; 80% intervals hold {100 * s['coverage']:.0f}% of the "
          f"points, median half-width {100 * s['median_half_width']:.0f}%")
    print("an engine's framework time per MoE layer, fitted without each point's group (held out); the last figure, as "
          "each fold chose from its own training groups whether it ships (the choice held out too):")
    for kind, (n, med) in p["by_engine"].items():
        learned = any({kind, c.point.pool} & set(c.constants) for c in fitted if c.point.kind == kind)
        verdict = ("no other group measured it: nothing to learn held out" if not learned else
                   f"ships, {shipped[kind]:.0f} µs a layer (fitted on all its points)" if kind in shipped else
                   "not shipped: " + ("held out, it does no better than none" if shipped_as(kind)[0] in ENGINES
                                      else "moesim runs it as another engine"))
        print(f"  {kind[:23]:23} {n:3} points, median |error| {100 * f['by_engine'][kind][1]:.0f}% with it, "
              f"{100 * med:.0f}% without, {100 * s['by_engine'][kind][1]:.0f}% as chosen; {verdict}")


class Derived(NamedTuple):
    """What the cross-validation gives: every counted point held out with the framework times that ship
    (``checked``), with none (``plain``) and with every engine's (``fitted``); the framework times that ship, fitted
    on all their engines' points (``shipped``, µs a MoE layer); and each side's band, side -> (low, high, share of its
    points their held-out intervals held), of predictions with those times (``framework``) and without
    (``operations``); every two points of one model on one machine predicted apart (``pairs``,
    ``same_machine_pairs``), and of those it orders wrong, the ratio it predicted them apart by at most (``tie``: rows
    of a plan closer than that are not told apart); the points whose source gives their prompt processing, held out
    with the prompts' growth where it ships, chosen and fitted in each fold without the point's group (``prefill``),
    and with none (``prefill_operations``), the band of their prompt tokens/s with the share it held of each
    (``prefill_band``, ``prefill_operations_band``: one for both sides, as one such point is of the GPU side), and the
    growth that ships, fitted on all of them (``prompt_growth``; 0 where it does not ship).
    """

    checked: list
    plain: list
    fitted: list
    shipped: dict
    framework: tuple
    operations: tuple
    pairs: list
    tie: float
    prefill: list
    prefill_operations: list
    prefill_band: tuple
    prefill_operations_band: tuple
    prompt_growth: float


def derive(rows: list[dict]) -> Derived:
    """The learned constants and bands from the points ``run`` simulated at ``LAYER_US_GRID``; what ships in
    ``moesim.sim.engines`` and ``moesim.sim.accuracy`` (``tests/test_shipped_constants.py`` checks it does)."""
    cv = cv_points(rows)
    plain, fitted = cross_validate(cv, (0.0, 0.0), family=on_side), cross_validate(cv, LAYER_US_BOUNDS, family=on_side)
    # what ships, chosen again inside each fold from its training groups: those engines' framework times, no other
    checked = cross_validate(cv, LAYER_US_BOUNDS, ships, family=on_side)

    def band(held: list, family=on_side) -> dict:
        """Each family's quantiles of the held-out ratios at the level learned from every group, and the share of
        its points inside their held-out intervals: by side, or one for every point."""
        spread = [c.point.measured / c.predicted for c in held]
        levels = family_levels([c.point for c in held], spread, family=family)
        return {k: (*quantile_band([r for c, r in zip(held, spread) if family(c.point) == k], level),
                    cv_summary([c for c in held if family(c.point) == k])["coverage"]) for k, level in levels.items()}
    pairs = same_machine_pairs(rows, checked)
    tie = max((max(p, 1 / p) for _, m, p in pairs if (m > 1) != (p > 1)), default=1.0)
    prompts = prefill_points(rows)
    prefill, prefill_operations = (cross_validate(prompts, PREFILL_BOUNDS, growth_ships),
                                   cross_validate(prompts, (0.0, 0.0), set()))
    one = lambda point: "all"  # noqa: E731 (one band for both sides: one such point is of the GPU side)
    kinds = {p.kind for p in cv}  # what ships is a kind's own fit (a pool's stands in held out only)
    shipped = {k: us for k, us in fit(cv, LAYER_US_BOUNDS, ships(cv)).items() if k in kinds}
    return Derived(checked, plain, fitted, shipped, band(checked), band(plain), pairs,
                   tie, prefill, prefill_operations, band(prefill, one)["all"], band(prefill_operations, one)["all"],
                   fit(prompts, PREFILL_BOUNDS, growth_ships(prompts)).get("prefill", 0.0))


def print_prefill(rows: list[dict], d: Derived) -> None:
    """Every point whose source gives its prompt processing: its prompt, measured prompt tokens/s, moesim's held out
    as its engine (the prompts' growth fitted without the point's group, where each fold chose to ship it) with its
    80% interval, the error, and the operations alone; then the median, worst and coverage of each, and what ships
    (``PROMPT_GROWTH``, ``PREFILL_BAND``, ``PREFILL_OPERATIONS_BAND``)."""
    by_id = {r["id"]: r for r in rows}
    print(f"\nprompt processing (TTFT = prompt / tokens/s), held out\n{'id':6} {'engine':14} {'prompt':>6} "
          f"{'measured':>9} {'moesim':>9} {'80% interval':>17} {'error':>7} in  {'growth':>6} {'operations':>10} "
          f"{'error':>7}")
    for c, o in zip(d.prefill, d.prefill_operations):
        r, used = by_id[c.point.name], c.constants.get("prefill")
        print(f"{c.point.name:6} {r['engine'][:14]:14} {r['prompt_tokens']:6} {c.point.measured:9.1f} "
              f"{c.predicted:9.1f} {c.low:8.1f}-{c.high:<8.1f} {100 * c.error:+6.0f}% {'yes' if c.inside else 'no':3} "
              f"{'-' if used is None else f'{used:+.2f}':>6} {o.predicted:10.1f} {100 * o.error:+6.0f}%")
    for what, held, (low, high, inside) in (
            ("grown as each fold chose (PREFILL_BAND)", d.prefill, d.prefill_band),
            ("the operations alone (PREFILL_OPERATIONS_BAND)", d.prefill_operations, d.prefill_operations_band)):
        s = cv_summary(held)
        print(f"{what}: {s['points']} points in {s['groups']} groups, median |error| "
              f"{100 * s['median_abs_error']:.0f}%, worst {s['worst'][0]} {100 * s['worst'][1]:+.0f}%; held out, 80% "
              f"intervals held {100 * s['coverage']:.0f}%, median half-width {100 * s['median_half_width']:.0f}%; the "
              f"band that ships, measured / predicted over every point: ({low:.2f}, {high:.2f}), which held "
              f"{100 * inside:.0f}%")
    print(f"ships: a prompt's time x (1 + {d.prompt_growth:.2f}) as its engine runs it (PROMPT_GROWTH, fitted on all "
          "the points)" if d.prompt_growth else "ships: no growth (held out, it does no better than none)")


def load_points() -> list[dict]:
    return tomllib.loads((HERE / "published_points.toml").read_text())["point"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, help="write the predicted-vs-measured figure here")
    parser.add_argument("--json", type=Path, help="write every point and the summary here")
    parser.add_argument("--cv", action="store_true", help="predict each point with the engines' framework time fitted "
                        "without its group, each with its 80%% interval")
    args = parser.parse_args()
    rows = run(load_points(), LAYER_US_GRID if args.cv else ())
    if not args.cv:
        s = summary(rows)
        print_table(rows, s)
        if args.plot:
            plot(rows, s, args.plot)
        if args.json:
            args.json.write_text(json.dumps({"points": rows, "summary": s}, indent=1))
        return
    d = derive(rows)
    print_cv(d.checked, d.plain, d.fitted, d.shipped)
    pairs = d.pairs
    wrong = [(name, max(p, 1 / p)) for name, m, p in pairs if (m > 1) != (p > 1)]
    if args.plot:
        plot_cv(d.checked, args.plot)
    print("ships: " + "; ".join(f"{k} layer_us = {v:.0f}" for k, v in d.shipped.items()))
    for what, bands, rows_ in (
            ("predictions with the framework times that ship (FRAMEWORK_BANDS)", d.framework, d.checked),
            ("predictions with none (OPERATIONS_BANDS)", d.operations, d.plain)):
        every = cv_summary(rows_)
        levels = family_levels([c.point for c in rows_], [c.point.measured / c.predicted for c in rows_],
                               family=on_side)
        print(f"  the bands of {what}, each side's measured / predicted over its points at the side's level learned "
              f"held out; held out, such intervals held {100 * every['coverage']:.0f}% of all {len(rows_)} points, "
              f"median half-width {100 * every['median_half_width']:.0f}%: " + "; ".join(
                  f"{s}-side ({low:.2f}, {high:.2f}) at level {levels[s]:.2f} (percentiles {50 * (1 - levels[s]):.0f} "
                  f"and {50 * (1 + levels[s]):.0f}) held {100 * held:.0f}% of {mine['points']}, median half-width "
                  f"{100 * mine['median_half_width']:.0f}%" for s, (low, high, held) in bands.items()
                  for mine in (cv_summary([c for c in rows_ if c.point.side == s]),)))
    worst = max(wrong, key=lambda w: w[1])
    print(f"  two settings on one machine ({len(pairs)} pairs of points of one model on one box): held out, moesim "
          f"orders {len(pairs) - len(wrong)} of them as measured; the widest it got wrong, {worst[0]}, it predicted "
          f"{worst[1]:.2f} times apart (TIE_RATIO)")
    print_prefill(rows, d)


if __name__ == "__main__":
    main()
