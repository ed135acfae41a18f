"""llama.cpp, the real engine, run in this process through its Python bindings (``pip install
'moesim[llamacpp]'``: llama-cpp-python, which builds llama.cpp for this CPU; set ``CMAKE_ARGS=-DGGML_NATIVE=ON``).

``decode_tok_s`` times batch-1 decode as llama-bench's ``tg`` test does: one token at a time, each a token id
drawn at random (seeded), no sampler, every ``llama_decode`` followed by ``llama_synchronize``, the KV cache
cleared before each run and one warm-up run discarded. Random ids matter: greedy sampling on a random-weight
model repeats a few tokens, which route to the same experts and let their weights sit in the CPU's cache.
``prefill_tok_s`` times prompt processing as llama-bench's ``pp`` test does: one batch of random ids into an
empty cache. ``quantize`` is llama.cpp's quantizer (``llama_model_quantize``), for the formats ``gguf`` cannot write
(k-quants, MXFP4). llama.cpp's log is kept quiet; its last error line is in the one-line errors.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError
from moesim.files import atomic_output
from moesim.sim.costs import UBATCH

# moesim's format names -> llama.cpp's file types (``llama-quantize``'s names)
FTYPES = {"q4_k": "Q4_K_S", "q4_k_m": "Q4_K_M", "q5_k": "Q5_K_S", "q6_k": "Q6_K", "q3_k": "Q3_K_S",
          "q2_k": "Q2_K", "mxfp4": "MXFP4_MOE", "iq4_xs": "IQ4_XS", "q8_0": "Q8_0", "q4_0": "Q4_0"}

_LOG: list = []  # llama.cpp's log callback (kept alive) and its last error line
GGML_LOG_LEVEL_ERROR = 4


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
                          "CMAKE_ARGS=-DGGML_NATIVE=ON pip install 'moesim[llamacpp]'") from None
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


def system_info() -> str:
    """The instruction sets llama.cpp's CPU backend was built with, as it prints them."""
    return bindings().llama_print_system_info().decode()


def quantize(src: str | Path, dst: str | Path, fmt: str, threads: int = 0, pure: bool = False) -> Path:
    """``src`` (a 16- or 32-bit GGUF) quantised by llama.cpp to ``fmt`` at ``dst`` (atomically): as llama-quantize
    does, some tensors in other types (Q4_K_M keeps some in Q6_K), or (``pure``) every matrix in ``fmt``."""
    if fmt not in FTYPES:
        raise MoesimError(f"llama.cpp quantises to {', '.join(FTYPES)}; not {fmt!r}")
    L = bindings()
    params = L.llama_model_quantize_default_params()
    params.ftype = getattr(L, f"LLAMA_FTYPE_MOSTLY_{FTYPES[fmt]}")
    params.nthread = threads
    params.pure = pure
    with atomic_output(Path(dst)) as tmp:
        if L.llama_model_quantize(str(src).encode(), str(tmp).encode(), params) != 0:
            raise _failed(f"{src}: llama.cpp could not quantise it to {fmt}")
    return Path(dst)


def decode_tok_s(path: str | Path, threads: int, tokens: int = 64, runs: int = 5, seed: int = 0,
                 context: int = 0) -> list[float]:
    """Batch-1 decode tokens/s of the GGUF at ``path`` on ``threads`` threads, one figure per run after a discarded
    warm-up run (module docstring), the tokens drawn from the model's vocabulary with ``seed``; with ``context``,
    each run first fills the KV cache with that many prompt tokens (one untimed batch), as llama-bench's
    ``tg N @ dM``."""
    if tokens < 1 or runs < 1 or threads < 1 or context < 0:
        raise MoesimError(f"decode needs at least one token, run and thread and a context of 0 or more; got "
                          f"{tokens}, {runs}, {threads}, {context}")
    return _timed(path, threads, runs, seed, context, tokens)


def prefill_tok_s(path: str | Path, threads: int, prompt: int, runs: int = 5, seed: int = 0) -> list[float]:
    """Prompt-processing tokens/s of the GGUF at ``path``: one batch of ``prompt`` random tokens (seeded) into an
    empty KV cache, in micro-batches of ``UBATCH`` as llama-bench's ``pp`` test runs it, one figure per run after a
    discarded warm-up run."""
    if prompt < 1 or runs < 1 or threads < 1:
        raise MoesimError(f"prefill needs at least one prompt token, run and thread; got {prompt}, {runs}, {threads}")
    return _timed(path, threads, runs, seed, prompt, 0)


def _timed(path, threads: int, runs: int, seed: int, prompt: int, tokens: int) -> list[float]:
    """Each run: the KV cache cleared, ``prompt`` tokens in one batch, then ``tokens`` one at a time; the decoded
    tokens timed, or (``tokens`` 0) the prompt."""
    L = bindings()
    model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
    if not model:
        raise _failed(f"{path}: llama.cpp could not load it")
    ctx = None
    try:
        params = L.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = prompt + tokens + 8, max(prompt, 1), min(max(prompt, 1), UBATCH)
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
                batch = (L.llama_token * prompt)(*(int(t) for t in ids[run, :prompt]))
                if L.llama_decode(ctx, L.llama_batch_get_one(batch, prompt)) != 0:
                    raise _failed(f"{path}: llama.cpp could not process a {prompt}-token prompt")
                L.llama_synchronize(ctx)
            if tokens:
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
