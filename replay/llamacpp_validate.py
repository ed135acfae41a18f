"""`moesim validate --engine llama.cpp`: predicted against measured llama.cpp decode on configurations that
calibration did not run.

Each configuration is a random-weight Qwen3-MoE model (``moesim.replay.llamacpp_model``) of a shape (``SHAPES``:
an OLMoE-like one, many narrow experts and top-8; a Qwen3-like one; a Mixtral-like one, few wide experts and
top-2, each of other widths and depths than calibration's ``CALIBRATION_SHAPES``; or a model's own widths), a weight format,
a thread count and a context (KV tokens filled before the timed tokens). llama.cpp decodes it (the median of
``runs`` runs after a warm-up, in a child process after a probe on a tiny model: ``moesim.replay.llamacpp_run``)
between two DRAM bandwidth probes, and moesim predicts it on the hardware given:

- ``file``: the hardware as it is (what a user gets from ``moesim sim run --hardware here.toml``);
- ``probe``: the same with the DRAM read rate the probes beside the run found (this host's bandwidth moves by up
  to several times from minute to minute; this one separates the model's error from the host's swing).

Both errors are reported, each run's spread, and the probes. The files live in a scratch folder removed after.
``decode_band`` is this machine's own 80% interval from the decode rows, as ``moesim.sim.accuracy`` takes it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from moesim.errors import MoesimError
from moesim.replay.llamacpp_calibrate import CALIBRATION_SHAPES, OVERHEAD_SHAPE, Measured, measure, model_file
from moesim.replay.cpu_fit import Run
from moesim.replay.llamacpp_model import HEAD_DIM
from moesim.replay.llamacpp_run import LlamaCpp
from moesim.replay.scratch import scratch, work_folder
from moesim.sim.accuracy import quantile_band
from moesim.sim.machine import Hardware
from moesim.tracegen.model_files import load_model_file
from moesim.tracegen.models import ModelSpec

SHAPES = {  # (layers, experts, top_k, d_model, expert width, vocab): 0.2-0.45 B parameters each
    "olmoe": (8, 64, 8, 1024, 256, 4096),
    "qwen3": (8, 32, 4, 768, 512, 4096),
    "mixtral": (4, 8, 2, 1024, 2048, 4096),
}
FORMATS = ("bf16", "q8_0", "q4_k_m", "q4_0", "mxfp4")
BAND_ROWS = 10  # the fewest decode configurations a machine's band is taken from
MAX_FILE_GB = 4.0  # a model asked for is cut to the layers whose bf16 file stays under this


@dataclass(frozen=True)
class Row:
    """One configuration: measured, and predicted from the file and from the probes."""

    shape: str
    format: str
    measured: Measured
    predicted_file: float
    predicted_probe: float

    def error(self, which: str = "probe") -> float:
        predicted = self.predicted_probe if which == "probe" else self.predicted_file
        return (predicted - self.measured.tok_s) / self.measured.tok_s

    def as_dict(self) -> dict:
        m = self.measured
        return {"shape": self.shape, "format": self.format, "threads": m.threads, "test": m.test,
                "context": m.context, "prompt": m.prompt, "measured_tok_s": m.tok_s, "runs_tok_s": m.rates, "probe_gbps": list(m.probe), "swung": m.swung,
                "predicted_tok_s": self.predicted_probe, "error": self.error("probe"),
                "predicted_file_tok_s": self.predicted_file, "error_file": self.error("file")}


def counts(text: str | None, what: str, default: list[int], low: int = 1) -> list[int]:
    """A comma-separated list of whole numbers >= ``low``, none twice (``default`` where not given)."""
    if text is None:
        return default
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise MoesimError(f"{what} takes comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < low:
        raise MoesimError(f"{what} takes whole numbers of at least {low}, got {text!r}")
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:  # as every listed option: each value is one run
        raise MoesimError(f"{what}: {twice} listed twice; each value is one run")
    return values


def model_shape(spec: ModelSpec, layers: int | None) -> tuple:
    """A model's widths as a validation shape in llama.cpp's Qwen3-MoE layout: its experts, widths, attention
    projections' widths (in heads of 64) and vocabulary, cut to ``layers`` (default: as many as keep its bf16 file
    under ``MAX_FILE_GB``, at most its own). What that layout lacks (shared experts, dense layers, MLA) is left
    out."""
    if spec.kind != "moe":
        raise MoesimError(f"{spec.name}: llama.cpp validation writes MoE models; this one is {spec.kind}")
    per_layer = 2.0 * (spec.num_experts * spec.expert_params + spec.attention_params + spec.d_model * spec.num_experts)
    fit = int(MAX_FILE_GB * 1e9 // per_layer)
    layers = layers or min(spec.num_layers, fit)
    if layers < 1 or layers > fit:
        raise MoesimError(f"{spec.name}: {layers or 1} layer(s) in bf16 is over {MAX_FILE_GB:g} GB of model file; "
                          f"ask for --layers {max(fit, 1)} or fewer" if fit >= 1 else
                          f"{spec.name}: one layer in bf16 is over {MAX_FILE_GB:g} GB of model file")
    heads, kv_heads = ((spec.q_dim or spec.d_model) // HEAD_DIM, (spec.kv_dim or spec.d_model) // HEAD_DIM)
    return (layers, spec.num_experts, spec.top_k, spec.d_model, spec.d_expert, spec.vocab or 4096, heads, kv_heads)


def predict(run: Run, hw: Hardware, probed: bool) -> float:
    """The tokens/s moesim predicts for ``run`` (decode or prefill) on ``hw``'s CPU alone, with the DRAM read rate
    of the file or (``probed``) the one probed beside the run."""
    cpu = hw.cpu
    if cpu is None:
        raise MoesimError(f"{hw.source or hw.name}: has no [cpu] section to predict llama.cpp on the CPU with")
    rate = run.dram_gbps if probed else cpu.dram_gbps * cpu.sockets
    return (run.prompt or 1) / replace(run, dram_gbps=rate).model_s(cpu)


def validate_llamacpp(hw: Hardware, shapes: dict, formats: list[str], threads: list[int], contexts: list[int],
                      runs: int = 5, workdir: Path | None = None, progress: Callable[[str], None] = lambda _: None,
                      prompts: tuple = ()) -> list[Row]:
    """Every configuration of ``shapes`` x ``formats`` x ``threads`` x (decode after each of ``contexts``, prefill of
    each of ``prompts``), measured and predicted."""
    taken = {shape for shape in shapes.values() if shape in (OVERHEAD_SHAPE, *CALIBRATION_SHAPES.values())}
    if taken:
        raise MoesimError("validation would run calibration's own shape; choose others")
    rows = []
    with scratch(work_folder(workdir), "llamacpp") as folder:
        with LlamaCpp() as engine:
            engine.probe(folder)
            for name, shape in shapes.items():
                for fmt in formats:
                    path = model_file(engine, name, shape, fmt, folder)
                    spec = load_model_file(path)
                    for t in threads:
                        for context, prompt in [(c, 0) for c in contexts] + [(0, p) for p in prompts]:
                            progress(f"{name} {fmt}, {t} thread(s), " + (f"prompt {prompt}" if prompt else
                                                                         f"context {context}"))
                            m = measure(engine, path, t, runs, context, prompt=prompt)
                            run = m.run(spec)
                            rows.append(Row(name, fmt, m, predict(run, hw, False), predict(run, hw, True)))
                    path.unlink()
    return rows


def decode_band(rows: list[Row]) -> tuple[float, float, float]:
    """This machine's 80% decode interval, from the hardware file as it is (what a user's run gets): the 10th and
    90th percentiles of measured / predicted over the decode rows (``moesim.sim.accuracy.quantile_band``), and the
    share of those rows an interval from the other rows held (each left out in turn)."""
    ratios = np.array([r.measured.tok_s / r.predicted_file for r in rows if not r.measured.prompt])
    if ratios.size < BAND_ROWS:
        raise MoesimError(f"a machine's band is taken from at least {BAND_ROWS} decode configurations, this validation "
                          f"ran {ratios.size}: give more --threads, --contexts or --dtype")
    low, high = quantile_band(ratios)
    held = [lo <= x <= hi for i, x in enumerate(ratios) for lo, hi in (quantile_band(np.delete(ratios, i)),)]
    return low, high, float(np.mean(held))


def summary(rows: list[Row]) -> dict:
    """Decode's and prefill's median and worst error (from the probes, and from the file as it is), and the probes'
    range."""
    def of(part: list[Row], which: str) -> dict:
        errors = [abs(r.error(which)) for r in part]
        worst = max(part, key=lambda r: abs(r.error(which)))
        return {"median_abs_error": statistics.median(errors), "within_10pct": sum(e <= 0.10 for e in errors),
                "worst": {"shape": worst.shape, "format": worst.format, "threads": worst.measured.threads,
                          "test": worst.measured.test, "error": worst.error(which)}}

    probes = [p for r in rows for p in r.measured.probe]
    out = {"configurations": len(rows), "probe_gbps": [min(probes), max(probes)],
           "swung": sum(r.measured.swung for r in rows)}
    for kind, part in (("decode", [r for r in rows if not r.measured.prompt]),
                       ("prefill", [r for r in rows if r.measured.prompt])):
        if part:
            out[kind] = {"configurations": len(part), "probe": of(part, "probe"), "file": of(part, "file")}
    tests = dict.fromkeys(r.measured.test for r in rows)
    out["by_test"] = {test: statistics.median(abs(r.error()) for r in rows if r.measured.test == test)
                      for test in tests}
    return out


HEADERS = ["shape", "format", "threads", "test", "llama.cpp tok/s", "runs", "moesim tok/s", "error %",
           "from file %", "DRAM probe GB/s"]


def cells(row: Row) -> list:
    """A row as the table and the benchmark print it (``HEADERS``)."""
    m = row.measured
    return [row.shape, row.format, m.threads, m.test, round(m.tok_s, 1),
            f"{min(m.rates):.1f}-{max(m.rates):.1f}", round(row.predicted_probe, 1), round(100 * row.error(), 1),
            round(100 * row.error("file"), 1), f"{m.probe[0]:.1f}/{m.probe[1]:.1f}" + (" swung" if m.swung else "")]


def summary_line(s: dict) -> str:
    """The summary in sentences."""
    parts = []
    for kind in ("decode", "prefill"):
        if kind in s:
            p, f = s[kind]["probe"], s[kind]["file"]
            w = p["worst"]
            parts.append(f"{kind}, {s[kind]['configurations']} held-out configurations: median |error| "
                         f"{100 * p['median_abs_error']:.1f}% (worst {w['shape']} {w['format']} t{w['threads']} "
                         f"{w['test']} {100 * w['error']:+.0f}%, {p['within_10pct']} within 10%) with the DRAM rate "
                         f"probed beside each run; {100 * f['median_abs_error']:.1f}% (worst "
                         f"{100 * f['worst']['error']:+.0f}%) from the hardware file as it is.")
    if len(s["by_test"]) > 1:
        parts.append("Median |error| by test: " + ", ".join(f"{test} {100 * e:.1f}%" for test, e in s["by_test"].items())
                     + ".")
    return " ".join(parts) + (f" DRAM probe {s['probe_gbps'][0]:.1f}-{s['probe_gbps'][1]:.1f} GB/s"
                              + (f"; it moved by over 30% during {s['swung']} configuration(s)" if s["swung"] else ""))
