"""llama.cpp, the real engine, through its Python bindings (``pip install 'moesim[llamacpp]'``: llama-cpp-python, which
builds llama.cpp for this CPU), always in a child process (``moesim.replay.llamacpp_worker``, which says how each test
is timed).

A build whose kernels fault on this machine (llama.cpp's AMX kernels on some virtual machines and newer Xeons; a
build made for another CPU) kills the child, never the caller: ``LlamaCpp`` turns the child's death into one line
naming the step (``load``, ``prefill``, ``decode``, ``quantize``), the file, the signal and what to do, and starts a
new child for the next call. ``probe`` runs the steps a calibration runs on a tiny model in a second or two, so
that such a build is found before minutes of work.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from moesim.errors import MoesimError
from moesim.replay.llamacpp_worker import install_line
from moesim.sim.costs import UBATCH

# moesim's format names -> llama.cpp's file types (``llama-quantize``'s names)
FTYPES = {"q4_k": "Q4_K_S", "q4_k_m": "Q4_K_M", "q5_k": "Q5_K_S", "q6_k": "Q6_K", "q3_k": "Q3_K_S",
          "q2_k": "Q2_K", "mxfp4": "MXFP4_MOE", "iq4_xs": "IQ4_XS", "q8_0": "Q8_0", "q4_0": "Q4_0"}
WORKER = (sys.executable, "-m", "moesim.replay.llamacpp_worker")
# the probe's model: (layers, experts, top_k, d_model, expert width, vocab), ``qwen3_moe``'s arguments
PROBE_SHAPE = (2, 8, 2, 256, 256, 512)
PROBE_FORMATS = ("q8_0", "q4_0", "q4_k")  # the kinds of kernel a calibration runs: 8-bit, 4-bit blocks, k-quants
PROBE_PROMPT = 64  # tokens of the probe's prompt: a batch, as a prefill's (llama.cpp's AMX kernels run on those)


class LlamaCpp:
    """llama.cpp in a child process: ``quantize``, ``decode_tok_s``, ``prefill_tok_s``, ``system_info``, ``probe``.
    A context manager; the child starts at the first call and ends with the ``with`` (or a crash). ``timeout_s``
    bounds each step of a call, the longest the child may be silent (a load, a prompt, one run's decode; None: no
    bound); ``command`` runs the child (tests give one that dies on purpose)."""

    def __init__(self, timeout_s: float | None = None, command: tuple | None = None):
        self.timeout_s = timeout_s
        self.command = command or WORKER
        self.proc: subprocess.Popen | None = None
        self._err = None
        self.built: str | None = None  # llama.cpp's system info, once read: the advice after a crash names AMX
        self._pending = b""

    def __enter__(self) -> LlamaCpp:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """End the child (at once: it holds nothing to save)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc.stdin.close()
            self.proc.stdout.close()
            self._err.close()
            self.proc, self._pending = None, b""

    def _start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}  # a fault is told here, in one line
        err = tempfile.TemporaryFile()  # what the child prints: its last line says why it ended
        try:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         env=env, start_new_session=True)
        except OSError as exc:
            err.close()
            raise MoesimError(f"cannot start llama.cpp's process ({exc.strerror or exc})") from None
        self._err = err

    def call(self, op: str, file, **args):
        """The child's answer to ``op`` on ``file``; its crash, error or silence past ``timeout_s`` a one-line
        ``MoesimError``."""
        if self.proc is None:
            self._start()
        if op != "info":
            self.system_info()  # read first: the advice after a crash names the build's AMX
        step = START if op == "info" else op
        try:
            self.proc.stdin.write((json.dumps({"op": op, "args": args}) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died before reading: its status tells how
        while True:
            message = self._read(step, file)
            if "at" in message:
                step, file = message["at"], message["file"]
            elif "ok" in message:
                return message["ok"]
            else:
                raise MoesimError(message["error"])

    def _read(self, step: str, file) -> dict:
        """The child's next answer line; its end (a crash, an exit) or a silence of ``timeout_s`` raised."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], self.timeout_s)
            if not ready:
                self.close()
                raise MoesimError(f"llama.cpp said nothing for {self.timeout_s:g} s {_where(step, file)}; stopped it")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise MoesimError(self._died(step, file))
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def _died(self, step: str, file) -> str:
        """Why the child ended, in one line, after which the next call starts another."""
        status = self.proc.wait()
        self._err.seek(0)
        said = [line.strip() for line in self._err.read().decode(errors="replace").splitlines() if line.strip()]
        last = said[-1][:200] if said else ""
        self.close()
        if status >= 0:
            return f"llama.cpp's process ended (exit status {status}) {_where(step, file)}" + (f": {last}" if last else "")
        return f"llama.cpp crashed ({_signal_name(-status)}) {_where(step, file)}: {advice(-status, self.built, last)}"

    def system_info(self) -> str:
        """The instruction sets llama.cpp's CPU backend was built with, as it prints them."""
        if self.built is None:
            self.built = self.call("info", "")
        return self.built

    def quantize(self, src: str | Path, dst: str | Path, fmt: str, threads: int = 0, pure: bool = False) -> Path:
        """``src`` (a 16- or 32-bit GGUF) quantised by llama.cpp to ``fmt`` at ``dst`` (atomically): as llama-quantize
        does, some tensors in other types (Q4_K_M keeps some in Q6_K), or (``pure``) every matrix in ``fmt``."""
        if fmt not in FTYPES:
            raise MoesimError(f"llama.cpp quantises to {', '.join(FTYPES)}; not {fmt!r}")
        return Path(self.call("quantize", src, src=str(src), dst=str(dst), ftype=FTYPES[fmt], threads=threads,
                              pure=pure))

    def decode_tok_s(self, path: str | Path, threads: int, tokens: int = 64, runs: int = 5, seed: int = 0,
                     context: int = 0) -> list[float]:
        """Batch-1 decode tokens/s of the GGUF at ``path`` on ``threads`` threads, one figure per run after a
        discarded warm-up run, the tokens drawn from the model's vocabulary with ``seed``; with ``context``, each run
        first fills the KV cache with that many prompt tokens (one untimed batch), as llama-bench's ``tg N @ dM``."""
        if tokens < 1 or runs < 1 or threads < 1 or context < 0:
            raise MoesimError(f"decode needs at least one token, run and thread and a context of 0 or more; got "
                              f"{tokens}, {runs}, {threads}, {context}")
        return self._timed(path, threads, runs, seed, context, tokens)

    def prefill_tok_s(self, path: str | Path, threads: int, prompt: int, runs: int = 5, seed: int = 0) -> list[float]:
        """Prompt-processing tokens/s of the GGUF at ``path``: one batch of ``prompt`` random tokens (seeded) into an
        empty KV cache, in micro-batches of ``UBATCH`` as llama-bench's ``pp`` test runs it, one figure per run after
        a discarded warm-up run."""
        if prompt < 1 or runs < 1 or threads < 1:
            raise MoesimError(f"prefill needs at least one prompt token, run and thread; got {prompt}, {runs}, "
                              f"{threads}")
        return self._timed(path, threads, runs, seed, prompt, 0)

    def _timed(self, path, threads: int, runs: int, seed: int, prompt: int, tokens: int) -> list[float]:
        return self.call("timed", path, path=str(path), threads=threads, runs=runs, seed=seed, prompt=prompt,
                         tokens=tokens, ubatch=UBATCH)

    def probe(self, folder: Path) -> None:
        """A tiny model in each of ``PROBE_FORMATS`` (quantised by llama.cpp where ``gguf`` cannot write it) loaded,
        given a prompt and decoded on one thread and on two, in ``folder``: a build that faults here raises its
        one line in a second or two. The files are removed."""
        from moesim.replay.llamacpp_model import GGML_TYPES, qwen3_moe, write_gguf

        spec = qwen3_moe("probe", *PROBE_SHAPE)
        paths = {"bf16": write_gguf(spec, "bf16", folder / "probe-bf16.gguf")}
        try:
            for fmt in PROBE_FORMATS:
                path = folder / f"probe-{fmt}.gguf"
                paths[fmt] = write_gguf(spec, fmt, path) if fmt in GGML_TYPES else \
                    self.quantize(paths["bf16"], path, fmt, pure=True)
                for threads in sorted({1, min(2, os.cpu_count() or 1)}):
                    self._timed(path, threads, 1, 0, PROBE_PROMPT, 2)
        finally:
            for path in paths.values():
                path.unlink(missing_ok=True)


START = "start"  # the step of loading llama.cpp's library, before any model


def _where(step: str, file) -> str:
    """Where in a call the child was: ``in prefill of m.gguf``, ``as it started``."""
    return "as it started" if step == START else f"in {step}" + (f" of {Path(file).name}" if file else "")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal has no name
        return f"signal {signum}"


FAULTS = (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS)  # what a kernel that cannot run here dies of


def advice(signum: int, built: str | None, said: str = "") -> str:
    """What to do after llama.cpp died of ``signum`` in a build whose system info is ``built`` (None: not read),
    having last printed ``said``."""
    rebuild = install_line(reinstall=True)
    if signum == signal.SIGKILL:
        return "it was killed (out of memory? see dmesg); free memory or run smaller models"
    if signum == signal.SIGABRT:
        return f"it stopped on a check of its own{f' ({said})' if said else ''}"
    if signum in FAULTS and built is not None and "AMX_INT8 = 1" in built:
        return (f"this build's AMX kernels fault on this machine (llama.cpp issue #20824); reinstall llama-cpp-python "
                f"without them (AVX-512 kept): {rebuild}")
    if signum == signal.SIGILL:
        return ("this build uses an instruction this CPU lacks (was it built on another machine?); rebuild it here: "
                f"{rebuild}")
    return (f"a fault in llama.cpp or its build; rebuild it ({rebuild}) and, if it persists, report it with "
            "'moesim hardware --show local'")
