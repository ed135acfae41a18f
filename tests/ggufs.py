"""A tiny mixture of experts written as a GGUF file, in llama.cpp's tensor layout (test_model_files,
test_fuzz)."""

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType
D, D_EXPERT, D_DENSE, E, VOCAB, SHARED = 256, 512, 768, 4, 1000, 1


def row_bytes(kind, weights: int) -> int:
    """A row of ``weights`` weights in ggml's ``kind``, by its block size (the test's own arithmetic)."""
    block, size = gguf.GGML_QUANT_SIZES[kind]
    assert weights % block == 0
    return weights // block * size


def write_gguf(path, blocks=("dense", "moe", "moe"), top_k=2, down_kinds=(Q.Q4_K, Q.Q6_K), file_type=None):
    """A tiny MoE in llama.cpp's layout: F16 embeddings, a Q6_K output head, a dense first block, MoE blocks
    with Q4_K gate/up experts and down experts whose format differs by layer (as a Q4_K_M file's), Q8_0
    attention, an F32 router, a shared expert, and ``general.file_type`` where one is given (a
    ``gguf.LlamaFileType``); returns every tensor's bytes, by name."""
    w = gguf.GGUFWriter(str(path), "qwen2moe")
    w.add_block_count(len(blocks))
    if file_type is not None:
        w.add_file_type(file_type)
    w.add_uint32("qwen2moe.expert_used_count", top_k)
    w.add_uint32("qwen2moe.expert_count", E)
    w.add_name("Test-MoE")
    sizes = {}

    def tensor(name, ne, kind):
        ne = tuple(ne)
        nbytes_row = row_bytes(kind, ne[0])
        data = np.zeros((*reversed(ne[1:]), nbytes_row), np.uint8)
        w.add_tensor(name, data, raw_dtype=kind)
        sizes[name] = data.nbytes

    tensor("token_embd.weight", (D, VOCAB), Q.F16)
    tensor("output.weight", (D, VOCAB), Q.Q6_K)
    tensor("output_norm.weight", (D,), Q.F32)
    moe = 0
    for b, kind in enumerate(blocks):
        for name, ne in (("attn_q", (D, 512)), ("attn_k", (D, 128)), ("attn_v", (D, 128)), ("attn_output", (512, D))):
            tensor(f"blk.{b}.{name}.weight", ne, Q.Q8_0)
        tensor(f"blk.{b}.attn_norm.weight", (D,), Q.F32)
        tensor(f"blk.{b}.ffn_norm.weight", (D,), Q.F32)
        if kind == "dense":
            for name, ne in (("ffn_gate", (D, D_DENSE)), ("ffn_up", (D, D_DENSE)), ("ffn_down", (D_DENSE, D))):
                tensor(f"blk.{b}.{name}.weight", ne, Q.F16)
            continue
        tensor(f"blk.{b}.ffn_gate_inp.weight", (D, E), Q.F32)
        tensor(f"blk.{b}.ffn_gate_exps.weight", (D, D_EXPERT, E), Q.Q4_K)
        tensor(f"blk.{b}.ffn_up_exps.weight", (D, D_EXPERT, E), Q.Q4_K)
        tensor(f"blk.{b}.ffn_down_exps.weight", (D_EXPERT, D, E), down_kinds[moe % len(down_kinds)])
        for name, ne in (("ffn_gate_shexp", (D, D_EXPERT)), ("ffn_up_shexp", (D, D_EXPERT)),
                         ("ffn_down_shexp", (D_EXPERT, D))):
            tensor(f"blk.{b}.{name}.weight", ne, Q.Q8_0)
        moe += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sizes
