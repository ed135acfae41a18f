"""`moesim calibrate --engine llama.cpp`: this machine's CPU model fitted to the real llama.cpp's decode.

It first runs llama.cpp on a tiny model (``LlamaCpp.probe``: a build that faults on this machine is one line in
seconds), then writes random-weight Qwen3-MoE models as GGUF files (``moesim.replay.llamacpp_model``; the k-quants
and MXFP4 through llama.cpp's own quantizer), decodes each with llama.cpp at every thread count asked
(``moesim.replay.llamacpp_run``, in a child process: the median of ``runs`` runs after a warm-up), probes the DRAM
read bandwidth right before and after each configuration, and fits (``moesim.replay.cpu_fit``):

- the per-operation cost (``barrier_base_us``, ``barrier_thread_us``) on ``OVERHEAD_SHAPE``, a model of 2 MB
  whose token is nearly all graph overhead;
- each format's unpack rate (``unpack_gbps``), in ``FORMATS``, on ``CALIBRATION_SHAPES``: many narrow experts
  (top-8) and few wide ones (top-2), 0.1-0.2 B parameters each, every matrix in the format (llama-quantize's
  ``--pure``: a file as users have it mixes types, Q4_K_M some Q6_K, which moesim reads from its header);
- an expert's fixed cost (``task_us``) and the share of the probe's DRAM rate llama.cpp reaches (``dram_eff``) on
  the same runs;
- each format's matrix-product rate (``matmul_gflops``) on the same models' prompt processing (``PROMPT`` tokens
  in one batch), everything else as the decode fit left it;
- the flash attention's rates over the KV cache (``attn_gflops``: a query row at a time, per thread, and what each
  thread past the first adds to it, ``attn_thread_eff``, where several thread counts ran; ``attn_tiled_gflops``:
  tiles of rows) on the same models in
  ``ATTN_FORMAT``, decoding after ``CONTEXT`` KV tokens and processing a ``LONG_PROMPT``-token prompt.

The hardware file it writes is CPU-only: this machine as ``--hardware local`` detects it (cores, clock under load,
instruction set, RAM from the OS), its DRAM rate the median of the probes, and the fitted values; comments at
its top say when, with which llama.cpp, and every run's figures. ``moesim validate --engine llama.cpp`` then checks
it on shapes, formats, thread counts and contexts it did not run. The models (about 1.5 GB) live in a scratch
folder removed afterwards.
"""

from __future__ import annotations

import datetime
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from moesim.errors import MoesimError
from moesim.replay.cpu_fit import ROUNDS, Run, fit, fit_attention, fit_matmul
from moesim.replay.llamacpp_model import GGML_TYPES, qwen3_moe, write_gguf
from moesim.replay.llamacpp_run import LlamaCpp
from moesim.replay.scratch import scratch, work_folder
from moesim.sim.machine import Hardware
from moesim.tracegen.model_files import load_model_file
from moesim.tracegen.models import ModelSpec

# (layers, experts, top_k, d_model, expert width, vocab[, heads, kv_heads]): ``qwen3_moe``'s arguments
OVERHEAD_SHAPE = (16, 8, 2, 64, 64, 512)
# widths are multiples of 256: llama.cpp's k-quants need whole 256-value blocks, else it falls back to other types
CALIBRATION_SHAPES = {"narrow": (6, 40, 8, 768, 256, 4096), "wide": (4, 8, 2, 768, 1536, 4096)}
FORMATS = ("bf16", "f16", "q8_0", "q6_k", "q4_k", "q4_0", "mxfp4")
TOKENS = 64          # decoded per run
PROMPT = 256         # prompt tokens of a prefill run
CONTEXT = LONG_PROMPT = 1024  # KV tokens before the decodes, and prompt tokens, that time the attention
ATTN_FORMAT = "q4_0"  # the weights of the models those run (attention's cost does not depend on them)
SUMMARY = slice(1, 6)  # the notes that sum the calibration up (after the first, which says when and with what)
SWING = 1.3          # a probe pair further apart than this is flagged: the bandwidth moved during the runs
PROBING = "checking llama.cpp on a tiny model"  # the first step: a build that faults here is found in seconds

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Measured:
    """A configuration llama.cpp ran: its file, threads, context, every run's tokens/s, and the probes beside."""

    path: Path
    threads: int
    context: int
    rates: list
    probe: tuple
    prompt: int = 0  # a prefill: the prompt's tokens/s (context unused)

    @property
    def tok_s(self) -> float:
        return statistics.median(self.rates)

    @property
    def dram_gbps(self) -> float:
        return sum(self.probe) / 2

    @property
    def swung(self) -> bool:
        return max(self.probe) > SWING * min(self.probe)

    def run(self, model: ModelSpec) -> Run:
        # the i-th of TOKENS decoded tokens reads context + i KV entries: context + (TOKENS + 1) / 2 on average
        return Run(model, self.threads, self.context + (TOKENS + 1) / 2, self.tok_s, self.dram_gbps, self.prompt)

    @property
    def test(self) -> str:
        """llama-bench's name for it: ``pp512``, ``tg64``, ``tg64@d1024``."""
        return f"pp{self.prompt}" if self.prompt else f"tg{TOKENS}" + (f"@d{self.context}" if self.context else "")

    @property
    def label(self) -> str:
        return f"{self.path.stem} {self.test} t{self.threads}"


def model_file(engine: LlamaCpp, name: str, shape: tuple, fmt: str, folder: Path, pure: bool = False) -> Path:
    """The shape's GGUF in ``fmt`` in ``folder``, written once (a quantised one from its bf16 file by ``engine``, every
    matrix in ``fmt`` where ``pure``, else as llama-quantize mixes its types)."""
    path = folder / f"{name}-{fmt}.gguf"
    if not path.exists():
        if fmt in GGML_TYPES:
            write_gguf(qwen3_moe(f"random-{name}", *shape), fmt, path)
        else:
            engine.quantize(model_file(engine, name, shape, "bf16", folder), path, fmt, pure=pure)
    return path


def measure(engine: LlamaCpp, path: Path, threads: int, runs: int, context: int = 0, seed: int = 0,
            prompt: int = 0) -> Measured:
    """llama.cpp's decode (or, with ``prompt``, its prompt processing) of ``path`` between two DRAM probes."""
    from moesim.sim.local_machine import measure_dram_gbps

    before = measure_dram_gbps()
    rates = (engine.prefill_tok_s(path, threads, prompt, runs, seed) if prompt else
             engine.decode_tok_s(path, threads, TOKENS, runs, seed, context))
    after = measure_dram_gbps()
    return Measured(path, threads, context, rates, (before, after), prompt)


def calibrate_llamacpp(threads: list[int], runs: int = 5, workdir: Path | None = None,
                       progress: Progress = lambda _: None, shapes: dict = CALIBRATION_SHAPES,
                       formats: tuple = FORMATS) -> tuple[Hardware, list[str]]:
    """This machine's CPU-only hardware, fitted to llama.cpp (module docstring), and the lines that say what was
    measured (the file's comments); ``shapes`` and ``formats`` replace the calibration's own (tests run tiny
    ones)."""
    from moesim.sim.hardware import this_machine

    machine = this_machine(remeasure=True)  # a calibration measures now, and keeps it for --hardware local
    with scratch(work_folder(workdir), "llamacpp") as folder:
        with LlamaCpp() as engine:
            progress(PROBING)
            engine.probe(folder)
            built = engine.system_info()
            overhead = []
            for t in threads:
                progress(f"per-operation cost, {t} thread(s)")
                path = model_file(engine, "overhead", OVERHEAD_SHAPE, "q8_0", folder)
                overhead.append(measure(engine, path, t, runs))
            by_format, prefill, attention = {}, {}, []
            for fmt in formats:
                for name, shape in shapes.items():
                    path = model_file(engine, name, shape, fmt, folder, pure=True)
                    for t in threads:
                        progress(f"{name} {fmt}, {t} thread(s)")
                        by_format.setdefault(fmt, []).append(measure(engine, path, t, runs))
                        prefill.setdefault(fmt, []).append(measure(engine, path, t, runs, prompt=PROMPT))
                        if fmt == ATTN_FORMAT:
                            attention += [measure(engine, path, t, runs, CONTEXT),
                                          measure(engine, path, t, runs, prompt=LONG_PROMPT)]
        specs = {m.path: load_model_file(m.path) for ms in [overhead, *by_format.values()] for m in ms}
        mixed = [(path, spec.expert_mix) for path, spec in specs.items() if spec.expert_mix]
        if mixed:  # the fit takes each file for its one format
            raise MoesimError(f"{mixed[0][0].name}: llama.cpp stored its experts in several types "
                              f"({', '.join(f for f, _ in mixed[0][1])}); calibration needs one")
    progress("fitting")
    everything = [m for ms in [overhead, *by_format.values(), *prefill.values(), attention] for m in ms]
    probes = [p for m in everything for p in m.probe]
    cpu = replace(machine.cpu, name=f"{machine.cpu.name}, llama.cpp", dram_gbps=statistics.median(probes)
                  / machine.cpu.sockets, dram_eff=1.0, threads=0, task_us=0.0)
    cpu, rates = fit(cpu, [m.run(specs[m.path]) for m in overhead],
                     {fmt: [m.run(specs[m.path]) for m in ms] for fmt, ms in by_format.items()})
    for _ in range(ROUNDS):  # the long prompts' time is products and attention both
        matmul = {fmt: fit_matmul(cpu, fmt, [m.run(specs[m.path]) for m in ms]) for fmt, ms in prefill.items()}
        cpu = fit_attention(replace(cpu, matmul_gflops=tuple(sorted(matmul.items()))),
                            [m.run(specs[m.path]) for m in attention])
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    notes = [f"moesim calibrate --engine llama.cpp, {when}: {built.strip()}",
             f"DRAM read probe {min(probes):.1f}-{max(probes):.1f} GB/s (dram_gbps: the median), of which "
             f"llama.cpp reaches {cpu.dram_eff:.3f} (dram_eff); clock {machine.cpu.ghz:g} GHz under load",
             f"per-operation cost: {cpu.barrier_base_us:.3g} us + {cpu.barrier_thread_us:.3g} us per further thread; "
             f"an expert's {cpu.task_us:.3g} us besides its bytes",
             "unpack rates per thread: " + ", ".join(
                 f"{f} {dict(cpu.unpack_gbps)[f]:.2f} GB/s" + (" or more (DRAM bound every run)" if u is None else "")
                 for f, u in rates.items()),
             f"prefill products per thread (pp{PROMPT}): " + ", ".join(f"{f} {g:.1f} GFLOP/s" for f, g in matmul.items()),
             f"attention over the KV cache per thread: {cpu.attn_gflops:.1f} GFLOP/s a query row at a time (tg{TOKENS}"
             f"@d{CONTEXT}" + (f"; each further thread adds {cpu.attn_thread_eff:.2f} of one's" if len(threads) > 1
                               else "") + f"), {cpu.attn_tiled_gflops:.1f} GFLOP/s in tiles (pp{LONG_PROMPT})"
             if attention else
             f"attention over the KV cache: not timed ({ATTN_FORMAT} not among the formats), the table's rates"]
    notes += [f"run {m.label}: {m.tok_s:.1f} tok/s (runs {min(m.rates):.1f}-{max(m.rates):.1f}), "
              f"probe {m.probe[0]:.1f}/{m.probe[1]:.1f} GB/s{' (swung)' if m.swung else ''}" for m in everything]
    return Hardware(f"{machine.cpu.name} (llama.cpp, calibrated)", None, None, source="calibrated", cpu=cpu), notes
