"""`moesim calibrate --engine llama.cpp` and `moesim validate --engine llama.cpp`: the CPU model against the real
llama.cpp on this machine (``moesim.replay.llamacpp_calibrate``, ``moesim.replay.llamacpp_validate``)."""

from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from moesim.cli.console import console, emit_json, progress_bar, table
from moesim.errors import MoesimError, named
from moesim.replay.llamacpp_validate import counts

ENGINES = ("llama.cpp",)


def check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise MoesimError(f"--engine {engine!r}: the engine moesim runs is {', '.join(ENGINES)}")


TAKES = ("hardware", "force", "model", "dtype", "threads")  # the settings validate --engine llama.cpp reads
OPTIONS = ("--hardware", "--force", "--model", "--layers", "--dtype", "--threads", "--contexts", "--prompts", "--runs",
           "--workdir", "--json")


def refuse_replay_options(asked, backend: bool, scale: bool) -> None:
    """``validate --engine llama.cpp`` reads ``TAKES`` and its own options, from the command line; a replay setting
    given to it (a policy, a capacity, ``--backend``, ``--scale``, ...) or a configuration file would be silently
    ignored, so each is refused in one line."""
    from moesim.sim.config import DECLARED

    if asked.in_file:
        raise MoesimError(f"--engine llama.cpp reads no configuration file (--config); give {', '.join(OPTIONS)} "
                          "on the command line")
    extra = [named(name) for name in sorted(asked.given) if name not in TAKES and name in DECLARED]  # as typed
    extra += [f"--{name.replace('_', '-')}" for name in sorted(asked.params)] + \
        ["--backend"] * backend + ["--scale"] * scale
    if extra:
        raise MoesimError(f"--engine llama.cpp takes {', '.join(OPTIONS)}; not {', '.join(dict.fromkeys(extra))} "
                          "(the replay's)")


def llamacpp_formats(dtypes: list[str] | None) -> list[str]:
    """The weight formats asked for (default: validation's own), each one llama.cpp's files can hold: ``gguf`` writes
    it or llama-quantize makes it; refused in one line before anything is built."""
    from moesim.replay.llamacpp_model import GGML_TYPES
    from moesim.replay.llamacpp_run import FTYPES
    from moesim.replay.llamacpp_validate import FORMATS

    formats = dtypes or list(FORMATS)
    known = list(dict.fromkeys([*GGML_TYPES, *FTYPES]))
    unknown = [f for f in formats if f not in known]
    if unknown:
        raise MoesimError(f"--dtype {', '.join(unknown)}: llama.cpp validation writes {', '.join(known)}")
    return formats


def _bar() -> Progress:
    return progress_bar(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                        TimeElapsedColumn())


def calibrate(out: Path, threads: str | None, runs: int, workdir: Path | None, force: bool = False) -> None:
    """Fit this machine's CPU model to llama.cpp and write it to ``out`` (an existing one only with ``force``)."""
    from moesim.files import check_output
    from moesim.replay.llamacpp_calibrate import CALIBRATION_SHAPES, FORMATS, SUMMARY, calibrate_llamacpp
    from moesim.sim.local_machine import thread_counts
    from moesim.sim.hardware import write_hardware

    check_output(out, "hardware file", force=force, suffixes=(".toml",))
    chosen = _on_cores(counts(threads, "--threads", thread_counts()))
    with _bar() as bar:  # the probe, every thread count's models, the fit
        task = bar.add_task("calibrating", total=len(chosen) * (len(FORMATS) * len(CALIBRATION_SHAPES) + 1) + 2)

        def step(what: str) -> None:
            bar.update(task, description=what, advance=1)

        hw, notes = calibrate_llamacpp(chosen, runs, workdir, step)
    write_hardware(hw, out, tuple(notes))
    console.print(f"wrote {out}: {hw.describe()}")
    for note in notes[SUMMARY]:
        console.print(f"  {note}")


def _on_cores(chosen: list[int]) -> list[int]:
    """Thread counts this machine runs llama.cpp with: at most its cores (``physical_cores``), where the model's one
    thread a core holds; more would time-share them and be fitted as if they did not."""
    from moesim.sim.local_machine import physical_cores

    cores = physical_cores()
    over = [t for t in chosen if t > cores]
    if over:
        raise MoesimError(f"--threads {over[0]}: more threads than this machine's {cores} physical cores (at most the "
                          "CPUs this process may run on); the model computes with one thread a core at most")
    return chosen


BAND_NOTE = "moesim validate --engine llama.cpp: this machine's 80% decode interval"  # the band's note in a file


def validate(hardware: str | None, model: str | None, layers: int | None, dtypes: list[str] | None,
             threads: list[int] | None, contexts: str | None, prompts: str | None, runs: int, workdir: Path | None,
             as_json: bool, force: bool = False, out: Path | None = None) -> None:
    """Predict and measure the held-out configurations; print the table and the summary; with ``out`` (not the
    ``hardware`` file itself), write the calibrated machine with its own decode band (``decode_band``)."""
    from dataclasses import replace

    from moesim.files import check_output
    from moesim.replay.llamacpp_calibrate import PROMPT, calibrate_llamacpp
    from moesim.sim.accuracy import measured
    from moesim.sim.local_machine import thread_counts
    from moesim.replay.llamacpp_validate import (BAND_ROWS, HEADERS, SHAPES, cells, decode_band, model_shape, summary,
                                                 summary_line, validate_llamacpp)
    from moesim.sim.hardware import get_hardware, write_hardware
    from moesim.tracegen.models import get_model

    notes: tuple = ()
    if out is not None:
        check_output(out, "hardware file", inputs=(hardware,), suffixes=(".toml",))
        if hardware is not None:
            given = get_hardware(hardware, force=force)
            if not measured(given):
                raise MoesimError(f"--out: {hardware} is a spec sheet's machine, whose interval is the published "
                                  "points'; a band measured here is a calibrated machine's (moesim calibrate "
                                  "--engine llama.cpp, or leave --hardware out)")
            if Path(hardware).is_file():  # its calibration's notes kept, an earlier band's left behind
                notes = tuple(line[1:].strip() for line in Path(hardware).read_text().splitlines()
                              if line.startswith("#") and not line[1:].strip().startswith(BAND_NOTE))

    shapes = SHAPES
    if model is not None:
        spec = get_model(model)
        shapes = {spec.name: model_shape(spec, layers)}
    elif layers is not None:
        raise MoesimError("--layers cuts the model given with --model")
    chosen = _on_cores(threads or thread_counts())
    ctxs = counts(contexts, "--contexts", [0], low=0)
    pps = [p for p in counts(prompts, "--prompts", [PROMPT], low=0) if p]
    formats = llamacpp_formats(dtypes)
    decodes = len(shapes) * len(formats) * len(chosen) * len(ctxs)
    if out is not None and decodes < BAND_ROWS:
        raise MoesimError(f"--out: a machine's band is taken from at least {BAND_ROWS} decode configurations, these "
                          f"options give {decodes}: give more --threads, --contexts or --dtype")
    with _bar() as bar:
        task = bar.add_task("validating", total=len(shapes) * len(formats) * len(chosen) * (len(ctxs) + len(pps)))
        if hardware is None:
            bar.update(task, description="calibrating this machine first (no --hardware)")
            hw, calibrated = calibrate_llamacpp(chosen, runs, workdir)
            notes = tuple(calibrated)
        else:
            hw = get_hardware(hardware, force=force)
        rows = validate_llamacpp(hw, shapes, formats, chosen, ctxs, runs, workdir,
                                 lambda what: bar.update(task, description=what, advance=1), pps)
    s = summary(rows)
    if out is not None:
        low, high, held = decode_band(rows)
        s["band"] = {"low": low, "high": high, "held": held}
        write_hardware(replace(hw, cpu=replace(hw.cpu, band_low=low, band_high=high, band_held=held)), out,
                       notes + (f"{BAND_NOTE} x{low:.3f} to x{high:.3f}, measured / predicted over {decodes} decodes "
                                f"calibration did not run; each left out, such intervals held {held:.0%} of them",))
    if as_json:
        emit_json({"engine": "llama.cpp", "hardware": hw.source or hw.name, "rows": [r.as_dict() for r in rows],
                   "summary": s})
        return
    table(f"llama.cpp decode on this machine against moesim ({hw.source or hw.name}); median of {runs} runs; error "
          "with the DRAM rate probed beside each run, and from the file as it is", HEADERS, [cells(r) for r in rows])
    console.print(summary_line(s))
    if out is not None:
        console.print(f"wrote {out}: this machine's 80% decode interval x{s['band']['low']:.2f} to "
                      f"x{s['band']['high']:.2f} of a prediction; each left out, such intervals held "
                      f"{s['band']['held']:.0%} of these decodes")
