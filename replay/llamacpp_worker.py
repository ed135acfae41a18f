"""The child process every call into llama.cpp runs in (``python -m moesim.replay.llamacpp_worker``), so that a
fault in the engine (an AMX kernel on a virtual machine, an instruction this CPU lacks) ends this process and not the
one that asked: ``moesim.replay.llamacpp_run.LlamaCpp`` starts it, reads its answers, and names the step it died in.

It reads one JSON request a line on stdin and answers on the stdout it started with; before each step of a request
(``load``, ``prefill``, ``decode``, ``quantize``) it writes ``{"at": step, "file": name}``, and at the end
``{"ok": result}`` or ``{"error": one line}``. Everything else it or llama.cpp prints goes to stderr. It dies with its
parent (Linux's ``PR_SET_PDEATHSIG``).

``decode`` times batch-1 decode as llama-bench's ``tg`` test does: one token at a time, each a token id drawn at
random (seeded), no sampler, every ``llama_decode`` followed by ``llama_synchronize``, the KV cache cleared before
each run and one warm-up run discarded. Random ids matter: greedy sampling on a random-weight model repeats a few
tokens, which route to the same experts and let their weights sit in the CPU's cache. ``prefill`` times prompt
processing as llama-bench's ``pp`` test does: one batch of random ids into an empty cache. ``quantize`` is
llama.cpp's quantizer (``llama_model_quantize``). llama.cpp's log is kept quiet; its last error line is in the
one-line errors.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError
from moesim.files import atomic_output

_LOG: list = []  # llama.cpp's log callback (kept alive) and its last error line
GGML_LOG_LEVEL_ERROR = 4
PR_SET_PDEATHSIG = 1


def build_flags() -> str:
    """``CMAKE_ARGS`` that build llama.cpp for this CPU: natively, and on x86 without its AMX kernels, which fault on
    some virtual machines and newer Xeons (AVX-512 and the rest of ``-march=native`` kept)."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        return '"-DGGML_NATIVE=ON -DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8"'
    return "-DGGML_NATIVE=ON"


def install_line(reinstall: bool = False) -> str:
    """The command that (re)builds llama.cpp's bindings with ``build_flags``: the installed version again, or the
    extra's; never from pip's cache, whose wheel was built with the flags of its day."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("llama-cpp-python") if reinstall else None
    except PackageNotFoundError:
        installed = None
    if installed is None:
        return f"CMAKE_ARGS={build_flags()} pip install --no-cache-dir 'moesim[llamacpp]'"
    return (f"CMAKE_ARGS={build_flags()} pip install --force-reinstall --no-deps --no-cache-dir "
            f"llama-cpp-python=={installed}")


def _keep_errors(level, text, data) -> None:
    if level == GGML_LOG_LEVEL_ERROR and text:
        _LOG[1:] = [text.decode(errors="replace").strip()]


def bindings():
    """llama-cpp-python's module, its backend started and its log kept quiet; a one-line error where it is not
    installed."""
    try:
        import llama_cpp
    except (ImportError, OSError) as exc:  # not installed, or its shared library does not load
        raise MoesimError(f"llama.cpp's Python bindings do not load ({exc.__class__.__name__}); install them with "
                          f"{install_line()}") from None
    if not _LOG:
        _LOG.append(llama_cpp.llama_log_callback(_keep_errors))
        llama_cpp.llama_log_set(_LOG[0], ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
    return llama_cpp


def _failed(what: str) -> MoesimError:
    """A one-line error with llama.cpp's last error line, if it logged one."""
    said = f" ({_LOG[1]})" if len(_LOG) > 1 else ""
    _LOG[1:] = []
    return MoesimError(" ".join(f"{what}{said}".split()))


class Worker:
    """The requests' handlers; ``say`` writes one answer line."""

    def __init__(self, say):
        self.say = say

    def at(self, step: str, path) -> None:
        self.say({"at": step, "file": Path(path).name})

    def info(self) -> str:
        """The instruction sets llama.cpp's CPU backend was built with, as it prints them."""
        return bindings().llama_print_system_info().decode()

    def quantize(self, src: str, dst: str, ftype: str, threads: int, pure: bool) -> str:
        L = bindings()
        params = L.llama_model_quantize_default_params()
        params.ftype = getattr(L, f"LLAMA_FTYPE_MOSTLY_{ftype}")
        params.nthread = threads
        params.pure = pure
        self.at("quantize", src)
        with atomic_output(Path(dst)) as tmp:
            if L.llama_model_quantize(str(src).encode(), str(tmp).encode(), params) != 0:
                raise _failed(f"{src}: llama.cpp could not quantise it to {ftype}")
        return dst

    def timed(self, path: str, threads: int, runs: int, seed: int, prompt: int, tokens: int, ubatch: int) -> list:
        """Each run: the KV cache cleared, ``prompt`` tokens in one batch (micro-batches of ``ubatch``), then
        ``tokens`` one at a time; the decoded tokens timed, or (``tokens`` 0) the prompt."""
        L = bindings()
        self.at("load", path)
        model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
        if not model:
            raise _failed(f"{path}: llama.cpp could not load it")
        ctx = None
        try:
            params = L.llama_context_default_params()
            params.n_ctx, params.n_batch = prompt + tokens + 8, max(prompt, 1)
            params.n_ubatch = min(max(prompt, 1), ubatch)
            params.n_threads = params.n_threads_batch = threads
            ctx = L.llama_init_from_model(model, params)
            if not ctx:
                raise _failed(f"{path}: llama.cpp could not make a context for it")
            vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
            ids = np.random.default_rng(seed).integers(0, vocab, size=(runs + 1, prompt + tokens))
            rates = []
            for run in range(runs + 1):
                L.llama_memory_clear(L.llama_get_memory(ctx), True)
                start = time.perf_counter()
                if prompt:
                    self.at("prefill", path)
                    batch = (L.llama_token * prompt)(*(int(t) for t in ids[run, :prompt]))
                    if L.llama_decode(ctx, L.llama_batch_get_one(batch, prompt)) != 0:
                        raise _failed(f"{path}: llama.cpp could not process a {prompt}-token prompt")
                    L.llama_synchronize(ctx)
                if tokens:
                    self.at("decode", path)
                    start = time.perf_counter()
                for token in ids[run, prompt:]:
                    one = (L.llama_token * 1)(int(token))
                    if L.llama_decode(ctx, L.llama_batch_get_one(one, 1)) != 0:
                        raise _failed(f"{path}: llama.cpp could not decode a token")
                    L.llama_synchronize(ctx)
                if run:  # the first run warms the caches and pages the file in
                    rates.append((tokens or prompt) / (time.perf_counter() - start))
            return rates
        finally:
            if ctx:
                L.llama_free(ctx)
            L.llama_model_free(model)


def die_with_parent() -> None:
    """Ask Linux to end this process when its parent ends (elsewhere a no-op): an orphaned decode would go on."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def main() -> None:
    """Answer requests until stdin closes."""
    die_with_parent()
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what llama.cpp or Python prints goes to stderr, never into the answers
    sys.stdout = sys.stderr

    def say(message: dict) -> None:
        answers.write(json.dumps(message) + "\n")

    worker = Worker(say)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            say({"ok": getattr(worker, request["op"])(**request["args"])})
        except MoesimError as exc:
            say({"error": str(exc)})


if __name__ == "__main__":
    main()
