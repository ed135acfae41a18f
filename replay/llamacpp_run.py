"""llama.cpp, the real engine, run in this process through its Python bindings (``pip install
'moesim[llamacpp]'``: llama-cpp-python, which builds llama.cpp for this CPU; set ``CMAKE_ARGS=-DGGML_NATIVE=ON``).

``decode_tok_s`` times what llama.cpp's own counters time (``llama_perf_context``: ``n_eval`` tokens in
``t_eval_ms``): batch-1 decode of ``tokens`` tokens after a short prompt, the KV cache cleared before each run,
one warm-up run discarded, so the figure is llama-bench's ``tg`` without its process. ``quantize`` is llama.cpp's
quantizer (``llama_model_quantize``), for the formats ``gguf`` cannot write (k-quants, MXFP4).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from moesim.errors import MoesimError

# moesim's format names -> llama.cpp's file types (``llama-quantize``'s names)
FTYPES = {"q4_k": "Q4_K_S", "q4_k_m": "Q4_K_M", "q5_k": "Q5_K_S", "q6_k": "Q6_K", "q3_k": "Q3_K_S",
          "q2_k": "Q2_K", "mxfp4": "MXFP4_MOE", "iq4_xs": "IQ4_XS", "q8_0": "Q8_0", "q4_0": "Q4_0"}
PROMPT_TOKENS = 8


_QUIET = []  # the log callback llama.cpp holds, kept alive


def bindings():
    """llama-cpp-python's module, its backend started and its log silenced; a one-line error where it is not
    installed."""
    try:
        import llama_cpp
    except (ImportError, OSError) as exc:  # not installed, or its shared library does not load
        raise MoesimError(f"llama.cpp's Python bindings do not load ({exc.__class__.__name__}); install them with "
                          "CMAKE_ARGS=-DGGML_NATIVE=ON pip install 'moesim[llamacpp]'") from None
    if not _QUIET:
        _QUIET.append(llama_cpp.llama_log_callback(lambda level, text, data: None))
        llama_cpp.llama_log_set(_QUIET[0], ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
    return llama_cpp


def system_info() -> str:
    """The instruction sets llama.cpp's CPU backend was built with, as it prints them."""
    return bindings().llama_print_system_info().decode()


def quantize(src: str | Path, dst: str | Path, fmt: str, threads: int = 0) -> Path:
    """``src`` (a 16- or 32-bit GGUF) quantised by llama.cpp to ``fmt`` at ``dst``."""
    L = bindings()
    if fmt not in FTYPES:
        raise MoesimError(f"llama.cpp quantises to {', '.join(FTYPES)}; not {fmt!r}")
    params = L.llama_model_quantize_default_params()
    params.ftype = getattr(L, f"LLAMA_FTYPE_MOSTLY_{FTYPES[fmt]}")
    params.nthread = threads
    if L.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
        raise MoesimError(f"{src}: llama.cpp could not quantise it to {fmt}")
    return Path(dst)


def decode_tok_s(path: str | Path, threads: int, tokens: int = 64, runs: int = 5) -> list[float]:
    """Batch-1 decode tokens/s of the GGUF at ``path`` on ``threads`` threads, one figure per run (after a
    discarded warm-up run), from llama.cpp's own timers."""
    L = bindings()
    model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
    if not model:
        raise MoesimError(f"{path}: llama.cpp could not load it")
    params = L.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = PROMPT_TOKENS + tokens + 8, PROMPT_TOKENS, PROMPT_TOKENS
    params.n_threads = params.n_threads_batch = threads
    params.no_perf = False
    ctx = L.llama_init_from_model(model, params)
    sampler = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    L.llama_sampler_chain_add(sampler, L.llama_sampler_init_greedy())
    prompt = (L.llama_token * PROMPT_TOKENS)(*range(300, 300 + PROMPT_TOKENS))
    rates = []
    try:
        for run in range(runs + 1):
            L.llama_memory_clear(L.llama_get_memory(ctx), True)
            if L.llama_decode(ctx, L.llama_batch_get_one(prompt, PROMPT_TOKENS)) != 0:
                raise MoesimError(f"{path}: llama.cpp could not decode the prompt")
            L.llama_perf_context_reset(ctx)
            for _ in range(tokens):
                token = (L.llama_token * 1)(L.llama_sampler_sample(sampler, ctx, -1))
                if L.llama_decode(ctx, L.llama_batch_get_one(token, 1)) != 0:
                    raise MoesimError(f"{path}: llama.cpp could not decode a token")
            perf = L.llama_perf_context(ctx)
            if run:  # the first run warms the caches and pages the file in
                rates.append(perf.n_eval / perf.t_eval_ms * 1e3)
    finally:
        L.llama_sampler_free(sampler)
        L.llama_free(ctx)
        L.llama_model_free(model)
    return rates
