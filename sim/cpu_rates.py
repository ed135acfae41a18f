"""What a CPU core does with expert weights, by instruction set and weight format, with the sources.

Three limits bound an expert kernel on the host CPU (``moesim.sim.machine.CPU``):

- **DRAM**: the weights stream from memory once per layer. A streaming read reaches ``DRAM_EFF`` of the
  nominal bandwidth (channels x MT/s x 8 B): the median of the eleven published memory-benchmark reads in
  ``DRAM_READS`` (STREAM, Intel mlc, likwid, OCCT and llama.cpp's own dense decode; 0.27 to 1.09 of nominal;
  docs/hardware.md gives each one's source). ``dram_eff_without`` leaves a CPU's own reads out, for checking
  the model on that CPU's published points. Few threads read less: one core reaches ``CPU.core_gbps`` alone (the
  misses it keeps in flight over the latency; published single-core reads, one per family, docs/hardware.md).
- **Unpacking** (decode, one token per weight): a core turns ``WEIGHT_BYTES_PER_CYCLE`` bytes of weights per
  clock cycle into dot products. The x86 column is llama.cpp's (build 4384) dense decode on a Ryzen 9
  7950X with 2 threads (ik_llama.cpp discussion #164: LLaMA-3.1-8B, tg128; GiB of the model x tokens/s /
  2 threads / 5.7 GHz, AMD's boost clock with two cores busy), where two threads stay below the DRAM
  limit; the Arm column the same table's M2 Max rows (3-4 threads, 3.5 GHz). Other x86 cores are taken
  at Zen 4's bytes per cycle (no published per-format table of theirs was found). 16- and 32-bit floats
  are taken as not unpack-bound (their dot products are one FMA per value): only DRAM limits them, unless a
  measured rate (``CPU.unpack_gbps``, ``moesim calibrate --engine llama.cpp``) says otherwise. Formats the
  table does not measure take the nearest measured kernel: int8 and fp8 (kTransformers, widened on the
  CPU) Q8_0's, int4 Q4_0's, int2 Q2_K's, MXFP4 IQ4_NL's (both look 4-bit codes up in a 16-entry table).
  Where the two threads already reached DRAM's limit the figure is a lower bound (marked below).
- **Arithmetic** (prefill, many tokens per weight): ``ISA_FLOP_PER_CYCLE`` x cores x clock x ``kernel_eff``.

Engines on a CPU synchronise their threads after every operation of the graph (ggml's ``ggml_barrier``). A
barrier with n threads costs ``BARRIER_BASE_US + BARRIER_THREAD_US · (n − 1)``: llama.cpp's test-barrier on an
EPYC (PR #9598, its threadpool: 1.96 us a graph node with 4 threads, 3.04 with 8), a line through those two
(``moesim calibrate --engine llama.cpp`` fits this machine's own). A MoE
layer's decode graph on the CPU has ``CPU_LAYER_BARRIERS`` of them (llama.cpp issue #26200: about 2,000 barriers
a token for Qwen3-30B-A3B's 48 layers); of them its routed experts' (llama.cpp's ``build_moe_ffn``: gate, up, the
gated activation, down, the router weights and one add per chosen expert) ``EXPERT_BARRIERS``, 5 + k. An engine's own
graph of the routed experts (its ``cpu_ops``: ik_llama.cpp's fused MoE 3, kTransformers' MoE operator 3) replaces
those, the rest of the layer's staying.

A layer handed from the GPU to the CPU and back costs ``SYNC_US`` besides its experts: ik_llama.cpp PR #232
timed its parts on a Ryzen 9 7950X + RTX 4080 (DeepSeek-V2-Lite, experts on the CPU, 5 x tg128): 1.88 s of
synchronisation over 640 tokens x 26 CPU layers, 113 us a layer. That machine's points with experts on the CPU
are therefore not counted in the published-points check (benchmarks/published_offload.py).

Attention's products over the KV cache (K·q, the softmax, its weights · V: 4 FLOP per query, KV cell and query
dimension) run in ggml's CPU flash attention (llama.cpp's default, ``-fa auto``), which has two paths: a
micro-batch of fewer than ``FA_TILE_Q`` (64, ``GGML_FA_TILE_Q``) query rows of a sequence goes one row at a time
(``one_chunk``: an f16 dot product per cell, the online softmax, V accumulated in f16 — every decode step, each
sequence in its own KV stream however many are batched), a larger one in 64 x 64 tiles of f32 products
(``tiled``: prompts; tiles the causal mask hides wholly are skipped, so a prompt's work is its triangle).
``ATTN_FLOP_PER_CYCLE`` is each path's rate per cycle and thread as ``moesim calibrate --engine llama.cpp``
measured it on this project's Zen 4 (2 cores, AVX-512 on 256-bit pipes, llama.cpp of llama-cpp-python 0.3.36,
decode at 1,024 KV tokens and 1,024-token prompts of its two calibration models, 2026-11-24): 10.9 and 10.4
GFLOP/s a thread one row at a time, 25.5 and 31.8 in tiles, in two calibrations at 3.56 GHz; no published
per-path figure was found. Both are far below the weights' product rate: at 2,048 KV tokens a decode step of a
1-B-parameter MoE spends half its time there.

``moesim calibrate`` measures a machine's own rates instead (``unpack_gbps`` and ``matmul_gflops`` in ``[cpu]``,
per thread and format, and the attention's ``attn_gflops`` and ``attn_tiled_gflops``), which then replace the
unpacking, the arithmetic and the attention limit.
"""

from __future__ import annotations

import statistics

from moesim.tracegen.model_spec import FORMATS

# (CPU model, measured read / nominal): docs/hardware.md, "Where dram_eff comes from", one row each
DRAM_READS = (("Ryzen 9 7950X", 0.94), ("Threadripper PRO 3975WX", 0.41), ("Threadripper PRO 3955WX", 0.42),
              ("Threadripper PRO 7965WX", 0.73), ("EPYC 9355", 0.87), ("EPYC 9355", 0.97), ("EPYC 9355", 0.61),
              ("Xeon 6980P", 0.90), ("EPYC 9274F", 0.50), ("Core i9-10900X", 1.09), ("Apple M2 Max", 0.27))


def dram_eff_without(cpu_name: str = "") -> float:
    """The median fraction of the published reads, leaving out those measured on a CPU ``cpu_name`` names (its
    model at the start: "Xeon 6980P (1 of 2 sockets)" leaves out the Xeon 6980P's)."""
    return round(statistics.median(f for model, f in DRAM_READS if not cpu_name.startswith(model)), 3)


DRAM_EFF = dram_eff_without()
SYNC_US = 113.0
BARRIER_BASE_US, BARRIER_THREAD_US = 1.15, 0.27  # one thread's cost, and each further thread's
CPU_LAYER_BARRIERS = 42
EXPERT_BARRIERS = (5, 1)  # a + b x top_k of them


def expert_barriers(top_k: int, ops: tuple = EXPERT_BARRIERS) -> int:
    """The barriers of a CPU layer's routed experts, ``a + b · top_k`` (``ops``: an engine's graph of them; the
    default llama.cpp's)."""
    return ops[0] + ops[1] * top_k
FA_TILE_Q = 64
ATTN_FLOP_PER_CYCLE = {"one": 3.0, "tiled": 8.0}  # per thread; this machine's calibration (docstring)

# Peak FLOP per cycle and core of an expert kernel whose weights are in each format class, by the
# widest vector or matrix extension the CPU has (the vendors' instruction tables):
#   avx2:       two 256-bit FMA pipes: fp32 32; bf16 widened to fp32 first, half of that; int8 dot
#               products (vpmaddubsw + vpmaddwd) 64; 4-bit weights unpacked to int8 first, half of that;
#   avx512:     two 512-bit FMA pipes (Xeon): fp32 64; AVX512-BF16 (vdpbf16ps) 128; VNNI (vpdpbusd) 256; 4-bit 128;
#   avx512-256: AVX-512 on 256-bit pipes (AMD Zen 4): half the avx512 rates;
#   amx:        Sapphire Rapids and later: AMX-BF16 1024, AMX-INT8 2048 per cycle; fp32 on AVX-512;
#               4-bit weights dequantised on AVX-512 first: 256;
#   neon:       Arm Neoverse V2 (Grace), four 128-bit SVE2 pipes: fp32 32; BFMMLA 64; SDOT/I8MM 128; 4-bit 64.
ISA_FLOP_PER_CYCLE = {
    "avx2": {"fp32": 32, "bf16": 16, "int8": 64, "int4": 32},
    "avx512": {"fp32": 64, "bf16": 128, "int8": 256, "int4": 128},
    "avx512-256": {"fp32": 32, "bf16": 64, "int8": 128, "int4": 64},
    "amx": {"fp32": 64, "bf16": 1024, "int8": 2048, "int4": 256},
    "neon": {"fp32": 32, "bf16": 64, "int8": 128, "int4": 64},
}
ISA_FAMILY = {"avx2": "x86", "avx512": "x86", "avx512-256": "x86", "amx": "x86", "neon": "arm"}
# the kernel class a weight format runs as on a CPU (``moesim.tracegen.model_spec.FORMATS``)
FORMAT_CLASS = {name: f.cpu_class for name, f in FORMATS.items()}

# bytes of weights per cycle and core a decode kernel unpacks (see the module docstring); "*": a lower bound
# (the two threads were DRAM-bound); formats absent are not unpack-bound
WEIGHT_BYTES_PER_CYCLE = {
    "x86": {"q8_0": 3.71, "q6_k": 4.41, "q5_k": 3.68, "q4_k": 3.93, "q4_0": 4.60, "iq4_xs": 3.17,
            "iq4_nl": 2.44, "q3_k": 2.83, "q2_k": 2.97},
    "arm": {"q8_0": 11.4, "q6_k": 5.47, "q5_k": 4.90, "q4_k": 5.87, "q4_0": 7.97, "iq4_xs": 5.08,
            "iq4_nl": 7.82, "q3_k": 2.90, "q2_k": 2.97},  # q8_0, q4_0, iq4_nl: lower bounds
}
for _table in WEIGHT_BYTES_PER_CYCLE.values():
    _table.update({"int8": _table["q8_0"], "fp8": _table["q8_0"], "int4": _table["q4_0"], "int2": _table["q2_k"],
                   "mxfp4": _table["iq4_nl"]})
