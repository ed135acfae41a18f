"""ik_llama.cpp (github.com/ikawrakow/ik_llama.cpp): llama.cpp's fork with its own CPU kernels, run with the same
placement and flags (``--n-cpu-moe N``, ``-ngl 99``, ``-ts``; without a GPU ``-ngl 0 -op -1,0``, its switch for a CUDA
build's large products). What differs, from its source (``src/llama-build-context.cpp`` ``llm_build_moe_ffn``, ``ggml/src``):

- **Fused MoE**, the default since PR #863 (2025-10-25; ``-fmoe`` from PR #229, 2025-02-23, before): a CPU layer's
  routed experts are three graph nodes whatever top_k, so three barriers: up and gate with the activation
  (``ggml_moe_up_gate``), down (``mul_mat_id``), the router weights' product and the sum over the k experts
  (``ggml_mul_multi_add``). llama.cpp's ``build_moe_ffn`` takes gate, up, the activation, down, the weights and
  an add per expert. The rest of a layer on the CPU is taken as llama.cpp's (``CPU_LAYER_BARRIERS``): ik fuses part
  of the routing too (``iqk_topk_moe``), which moesim does not count.
- **Its CUDA backend copies a CPU layer's experts to the GPU** for a row in which each expert averages 32 tokens
  (``ggml_backend_cuda_offload_op``: batch · k ≥ 32 · E), not at 32 tokens.

Its own kernels for llama.cpp's formats (``-rtr``'s repacked rows, its iq*_k types) are not timed apart: a format's
rate is the one moesim takes for llama.cpp. Its families are those ``src/llama-arch.cpp`` loads (no OLMoE or PhiMoE);
it loads llama.cpp's GGUFs as they are. It publishes no binaries: users build it or run its container images."""

from functools import partial

from moesim.sim.engines import llama_cpp
from moesim.sim.engines.base import GGUF_FORMATS, EngineSpec
from moesim.sim.machine import DISTRIBUTE, ONE_POOL

ENGINE = EngineSpec(
    name="ik_llama.cpp", summary="llama.cpp's placement with fused MoE: 3 barriers a CPU layer",
    command=partial(llama_cpp.command, cpu_only="-ngl 0 -op -1,0", program="./build/bin/llama-server"),
    source="github.com/ikawrakow/ik_llama.cpp", vendors=("nvidia",),
    release="build from github.com/ikawrakow/ik_llama.cpp (or its images, ghcr.io/ikawrakow/ik-llama-cpp)",
    runs=("cpu-experts",),
    families=("mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "deepseek_v2", "deepseek_v3", "gpt_oss", "glm4_moe",
              "glm4_moe_lite", "dbrx", "granitemoe", "llama4", "kimi_k2", "minimax_m2"),
    formats=GGUF_FORMATS, loads_gguf=True, numa=ONE_POOL, numa_options=(DISTRIBUTE,), cpu_ops=(3, 0),
    offload_min_tokens=32,
    offload_per_expert=True, gpus=16, tensor_mode="graph", tensor_families=("qwen3_moe", "gpt_oss", "glm4_moe"),
    sources=(("numa", "llama.cpp's: one thread pool"), ("numa_options", "llama.cpp's --numa distribute"),
             ("cpu_ops", "src/llama-build-context.cpp llm_build_moe_ffn with fused_moe_up_gate (common/common.h: on by "
                         "default since PR #863): ggml_moe_up_gate, mul_mat_id, ggml_mul_multi_add; ggml.c "
                         "ggml_graph_compute_thread: a barrier after each node"),
             ("offload_min_tokens", "ggml-cuda.cu ggml_backend_cuda_offload_op: batch * n_experts_active >= "
                                    "GGML_CUDA_MIN_BATCH_OFFLOAD (32) * n_experts_tot for MUL_MAT_ID and "
                                    "MOE_FUSED_UP_GATE"),
             ("gpus", "ggml/include/ggml-cuda.h: GGML_CUDA_MAX_DEVICES 16, -ts as llama.cpp's"),
             ("tensor_mode", "--split-mode graph (PR #1022): every layer's tensors and its experts' FFN width split "
                             "over the GPUs, two GGML_OP_REDUCE a layer (src/llama-build-context.cpp); enabled "
                             "architecture by architecture: its families here those its PRs measured (GLM-4.5-Air "
                             "#1022, Qwen3-30B-A3B #1080, gpt-oss-120b #1118)"),
             ("families", "src/llama-arch.cpp LLM_ARCH_NAMES (2026-08; GLM-4.7-Flash converts to deepseek2): no olmoe, no phimoe")))
