"""Random-weight MoE models as llama.cpp GGUF files (moesim.replay.llamacpp_model) and the engine's bindings
(moesim.replay.llamacpp_run): what is written is what moesim reads back, tensor by tensor."""

import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from moesim.errors import MoesimError  # noqa: E402
from moesim.replay import llamacpp_run  # noqa: E402
from moesim.replay.llamacpp_model import byte_tokens, qwen3_moe, write_gguf  # noqa: E402
from moesim.tracegen.model_files import load_model_file  # noqa: E402

SPEC = qwen3_moe("tiny-random", layers=2, experts=4, top_k=2, d_model=256, d_expert=256, vocab=300, heads=4,
                 kv_heads=1)
# bytes of one weight as each format stores it: ggml's block size and block bytes
BYTES = {"bf16": 2.0, "f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}


@pytest.mark.parametrize("fmt", list(BYTES))
def test_a_written_model_reads_back_with_its_shape_and_bytes(tmp_path, fmt):
    path = write_gguf(SPEC, fmt, tmp_path / f"m-{fmt}.gguf")
    m = load_model_file(path)
    assert (m.num_layers, m.num_experts, m.top_k, m.d_model, m.d_expert, m.q_dim, m.kv_dim, m.vocab) == \
        (2, 4, 2, 256, 256, 256, 64, 300)
    assert m.expert_format == fmt and m.stored_expert_bytes == 3 * 256 * 256 * BYTES[fmt]
    assert not m.tied_embeddings
    reader = gguf.GGUFReader(str(path))
    kinds = {t.name: t.tensor_type.name for t in reader.tensors}
    assert len(kinds) == 3 + 2 * 12  # embeddings, head, final norm; per block 4 norms, 4 attention, router, 3 experts
    f32 = {n for n, k in kinds.items() if k == "F32"}
    assert f32 == {"output_norm.weight"} | {f"blk.{b}.{n}.weight" for b in range(2) for n in
                                            ("attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm", "ffn_gate_inp")}
    assert {k for n, k in kinds.items() if n not in f32} == {fmt.upper()}
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.ggml.t")}
    assert fields["general.architecture"] == "qwen3moe" and fields["qwen3moe.expert_used_count"] == 2
    assert fields["qwen3moe.expert_feed_forward_length"] == 256 and fields["qwen3moe.attention.head_count_kv"] == 1


def test_every_expert_holds_the_same_random_block():
    """Decode time depends on bytes, not values: one quantised block per matrix shape, repeated."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        reader = gguf.GGUFReader(str(write_gguf(SPEC, "q8_0", Path(tmp) / "m.gguf", seed=3)))
        up = next(t for t in reader.tensors if t.name == "blk.1.ffn_up_exps.weight").data
        assert all(np.array_equal(up[0], up[e]) for e in range(4)) and np.any(up[0] != 0)


def test_formats_gguf_cannot_write_and_shapes_llama_cpp_cannot_load_are_one_line(tmp_path):
    for spec, fmt, message in ((SPEC, "q4_k", "llama.cpp models are written in"),
                               (qwen3_moe("odd", 1, 4, 2, 256, 200), "q8_0", "d_expert 200 is not a multiple"),
                               (qwen3_moe("small", 1, 4, 2, 256, 256, vocab=100), "q8_0", "a vocabulary of 100")):
        with pytest.raises(MoesimError, match=message) as err:
            write_gguf(spec, fmt, tmp_path / "m.gguf")
        assert "\n" not in str(err.value)
    assert not list(tmp_path.iterdir())


def test_the_byte_tokens_are_gpt2s_alphabet():
    tokens = byte_tokens()
    assert len(set(tokens)) == 256 and tokens[ord("!")] == "!" and tokens[ord("~")] == "~"
    assert tokens[0] == "\u0100" and tokens[ord(" ")] == "\u0120" and tokens[ord("\n")] == "\u010a"
    assert tokens[0xAD] == "\u0143" and tokens[0xFF] == "\u00ff"


def test_without_the_bindings_the_engine_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # an import of it fails
    with pytest.raises(MoesimError, match=r"pip install 'moesim\[llamacpp\]'") as err:
        llamacpp_run.decode_tok_s("m.gguf", 1)
    assert "\n" not in str(err.value)
