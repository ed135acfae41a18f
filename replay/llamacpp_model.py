"""Random-weight MoE models as GGUF files llama.cpp loads and decodes: a model of any width, depth, expert count and
weight format, to time the real engine on shapes nobody has published (issue 37).

The layout is llama.cpp's ``qwen3moe`` architecture (what its converter writes for a transformers Qwen3-MoE
checkpoint): per block RMSNorms, Q/K/V/O projections with per-head Q and K norms, a router (``ffn_gate_inp``, f32)
and the routed experts stacked as ``ffn_{gate,up,down}_exps`` ``[d, width, experts]``; token embeddings and an
untied output head. Norms and the router are f32, every other matrix in the asked format, as a converted file of
that format has them. The vocabulary is GPT-2 style: 256 byte tokens, one merge, the rest user-defined tokens;
the engine is fed token ids, so no text is ever tokenised.

Decode time does not depend on the weights' values, only on their bytes and formats, so one random block of each
matrix shape is quantised (``gguf.quants``) and its bytes repeated for every expert and layer: a model of any
size is written in seconds. The values are small (normal, sigma 0.02, as transformers initialises), never NaN
(a few f16 values are subnormal; the CPU widens f16 with F16C, whose speed does not depend on them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from moesim.errors import MoesimError
from moesim.files import atomic_output
from moesim.tracegen.models import ModelSpec

ARCH = "qwen3moe"
HEAD_DIM = 64
# moesim's format names -> the ggml tensor types gguf.quants writes (the k-quants and MXFP4 it reads only: those
# come from llama.cpp's own quantizer, ``moesim.replay.llamacpp_run.quantize``)
GGML_TYPES = {"bf16": "BF16", "f16": "F16", "q8_0": "Q8_0", "q4_0": "Q4_0"}
VOCAB_BYTES = 256


def qwen3_moe(name: str, layers: int, experts: int, top_k: int, d_model: int, d_expert: int, vocab: int = 4096,
              heads: int = 0, kv_heads: int = 0) -> ModelSpec:
    """A Qwen3-MoE shape as moesim describes a model (``heads`` of ``HEAD_DIM``: d_model / 64 by default; for K and
    V the largest divisor of the heads that is at most a quarter of them)."""
    heads = heads or max(1, d_model // HEAD_DIM)
    kv_heads = kv_heads or max(k for k in range(1, max(1, heads // 4) + 1) if heads % k == 0)
    return ModelSpec(name, "", "qwen3_moe", layers, experts, top_k, d_model, d_expert, source="random GGUF",
                     q_dim=heads * HEAD_DIM, kv_dim=kv_heads * HEAD_DIM, vocab=vocab)


def _block(gguf, shape: tuple, kind, rng) -> np.ndarray:
    """One random matrix of ``shape`` (rows, columns: ggml's ne reversed) in ggml type ``kind``, as stored: f32 and
    f16 as numpy floats, the others as their bytes."""
    values = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
    plain = {gguf.GGMLQuantizationType.F32: np.float32, gguf.GGMLQuantizationType.F16: np.float16}
    return values.astype(plain[kind]) if kind in plain else gguf.quants.quantize(values, kind)


def write_gguf(spec: ModelSpec, fmt: str, path: str | Path, seed: int = 0) -> Path:
    """``spec`` (a ``qwen3_moe`` shape) with random weights in ``fmt`` as a GGUF file at ``path`` (atomically)."""
    import gguf

    if fmt not in GGML_TYPES:
        raise MoesimError(f"llama.cpp models are written in {', '.join(GGML_TYPES)}; not {fmt!r}")
    kind = gguf.GGMLQuantizationType[GGML_TYPES[fmt]]
    block, _ = gguf.GGML_QUANT_SIZES[kind]
    for what, width in (("d_model", spec.d_model), ("d_expert", spec.d_expert)):
        if width % block:
            raise MoesimError(f"{fmt} stores rows in blocks of {block} weights; {what} {width} is not a multiple")
    if spec.vocab < VOCAB_BYTES + 2:
        raise MoesimError(f"a vocabulary of {spec.vocab} tokens: llama.cpp's needs the {VOCAB_BYTES} bytes and more")
    d, width, experts = spec.d_model, spec.d_expert, spec.num_experts
    q_dim, kv_dim = spec.q_dim or d, spec.kv_dim or d
    if q_dim % HEAD_DIM or kv_dim % HEAD_DIM or (q_dim // HEAD_DIM) % (kv_dim // HEAD_DIM):
        raise MoesimError(f"attention of {q_dim} query and {kv_dim} key/value widths: llama.cpp's Qwen3-MoE needs "
                          f"heads of {HEAD_DIM} and query heads a multiple of the key/value heads")
    if not 1 <= spec.top_k <= experts:
        raise MoesimError(f"top-{spec.top_k} of {experts} experts: llama.cpp routes 1 to all of them")
    rng = np.random.default_rng(seed)
    f32 = gguf.GGMLQuantizationType.F32
    heads = q_dim // HEAD_DIM
    cache: dict = {}

    def matrix(shape: tuple, k=kind) -> np.ndarray:  # the same random bytes for every matrix of a shape
        if (shape, k) not in cache:
            cache[shape, k] = _block(gguf, shape, k, rng)
        return cache[shape, k]

    path = Path(path)
    with atomic_output(path) as tmp:
        w = gguf.GGUFWriter(str(tmp), ARCH)
        try:
            w.add_name(spec.name)
            w.add_block_count(spec.num_layers)
            w.add_context_length(4096)
            w.add_embedding_length(d)
            w.add_feed_forward_length(width)
            w.add_head_count(heads)
            w.add_head_count_kv(kv_dim // HEAD_DIM)
            w.add_key_length(HEAD_DIM)
            w.add_value_length(HEAD_DIM)
            w.add_rope_freq_base(1e6)
            w.add_layer_norm_rms_eps(1e-6)
            w.add_expert_count(experts)
            w.add_expert_used_count(spec.top_k)
            w.add_expert_feed_forward_length(width)
            _vocabulary(w, gguf, spec.vocab)
            plain = (f32, gguf.GGMLQuantizationType.F16)  # typed by their numpy dtype; the rest are bytes

            def tensor(name: str, data: np.ndarray, k=kind) -> None:
                w.add_tensor(name, data, raw_dtype=None if k in plain else k)

            tensor("token_embd.weight", matrix((spec.vocab, d)))
            tensor("output.weight", matrix((spec.vocab, d)))
            tensor("output_norm.weight", np.ones(d, np.float32), f32)
            for b in range(spec.num_layers):
                for norm, n in (("attn_norm", d), ("ffn_norm", d), ("attn_q_norm", HEAD_DIM),
                                ("attn_k_norm", HEAD_DIM)):
                    tensor(f"blk.{b}.{norm}.weight", np.ones(n, np.float32), f32)
                tensor(f"blk.{b}.attn_q.weight", matrix((q_dim, d)))
                tensor(f"blk.{b}.attn_k.weight", matrix((kv_dim, d)))
                tensor(f"blk.{b}.attn_v.weight", matrix((kv_dim, d)))
                tensor(f"blk.{b}.attn_output.weight", matrix((d, q_dim)))
                tensor(f"blk.{b}.ffn_gate_inp.weight", matrix((experts, d), f32), f32)
                one = matrix((width, d))
                tensor(f"blk.{b}.ffn_gate_exps.weight", np.broadcast_to(one, (experts, *one.shape)))
                tensor(f"blk.{b}.ffn_up_exps.weight", np.broadcast_to(one, (experts, *one.shape)))
                down = matrix((d, width))
                tensor(f"blk.{b}.ffn_down_exps.weight", np.broadcast_to(down, (experts, *down.shape)))
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
        finally:
            w.close()
    return path


def byte_tokens() -> list[str]:
    """GPT-2's byte-level alphabet: byte b as a printable character, the printable Latin-1 bytes as themselves and
    the other 68 as U+0100 onwards, in byte order (llama.cpp looks bytes up by these names)."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    shifted = iter(range(0x100, 0x200))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(VOCAB_BYTES)]


def _vocabulary(w, gguf, size: int) -> None:
    """GPT-2's byte-level vocabulary: the 256 byte tokens, one merge, user-defined tokens to ``size``."""
    tokens = byte_tokens() + ["ab"]
    tokens += [f"<t{i}>" for i in range(size - len(tokens))]
    normal, user = gguf.TokenType.NORMAL, gguf.TokenType.USER_DEFINED
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([normal] * (VOCAB_BYTES + 1) + [user] * (size - VOCAB_BYTES - 1))
    w.add_token_merges(["a b"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
