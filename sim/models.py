"""Model presets: the MoE dimensions that decide how many bytes an expert is and how much work it does.

Sources: MELINOE Table 6 (OLMoE, Phi-3.5-MoE, Mixtral), Speculating Experts Table 2 (Qwen3-30B-A3B,
GLM-4.7-Flash, Qwen3-235B-A22B) and each model's public config.json. `num_layers` counts MoE
layers only (DeepSeek-V2-Lite's first layer is dense). An expert is a SwiGLU FFN of
3 * d_model * d_expert parameters (gate, up, down); biases and quantisation scales are not counted.
Speculating Experts Table 2 lists "GPT-OSS-120B" with 24 layers and 32 experts, which are
GPT-OSS-20B's dimensions; the presets follow the public configs of both models.
"""

from __future__ import annotations

from dataclasses import dataclass

from moesim import MoesimError
from moesim.tracegen.schema import TraceMeta

BYTES_PER_PARAM = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hf_id: str
    architecture: str  # transformers model_type
    num_layers: int  # MoE layers
    num_experts: int  # routed experts per layer
    top_k: int
    d_model: int
    d_expert: int  # expert intermediate size
    shared_experts: int = 0  # always-active experts per layer, each d_shared wide
    d_shared: int = 0
    source: str = ""

    @property
    def expert_params(self) -> int:
        return 3 * self.d_model * self.d_expert

    def expert_bytes(self, dtype: str = "bf16") -> int:
        if dtype not in BYTES_PER_PARAM:
            raise MoesimError(f"unknown dtype '{dtype}' (choose from {', '.join(BYTES_PER_PARAM)})")
        return int(self.expert_params * BYTES_PER_PARAM[dtype])

    def trace_meta(self, **fields) -> TraceMeta:
        """Trace metadata with this model's dimensions (bf16 expert bytes); `fields` override."""
        return TraceMeta(**{
            "num_layers": self.num_layers, "num_experts": self.num_experts, "top_k": self.top_k,
            "model": self.name, "d_model": self.d_model, "d_expert": self.d_expert,
            "bytes_per_param": BYTES_PER_PARAM["bf16"], "expert_bytes": self.expert_bytes("bf16"),
            "shared_experts": self.shared_experts, "d_shared": self.d_shared or None, **fields})

    @property
    def routed_expert_bytes_bf16(self) -> int:
        """All routed experts of all layers at bf16: what does not fit on a small GPU."""
        return self.num_layers * self.num_experts * self.expert_bytes("bf16")


_PRESETS = [
    ModelSpec("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", "mixtral", 32, 8, 2, 4096, 14336,
              source="MELINOE Tab. 6; config.json"),
    ModelSpec("olmoe-1b-7b", "allenai/OLMoE-1B-7B-0924", "olmoe", 16, 64, 8, 2048, 1024,
              source="MELINOE Tab. 6; config.json"),
    ModelSpec("qwen1.5-moe-a2.7b", "Qwen/Qwen1.5-MoE-A2.7B", "qwen2_moe", 24, 60, 4, 2048, 1408,
              shared_experts=1, d_shared=5632, source="config.json"),
    ModelSpec("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "qwen3_moe", 48, 128, 8, 2048, 768,
              source="Speculating Experts Tab. 2; config.json"),
    ModelSpec("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", "qwen3_moe", 94, 128, 8, 4096, 1536,
              source="Speculating Experts Tab. 2; config.json"),
    ModelSpec("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite", "deepseek_v2", 26, 64, 6, 2048, 1408,
              shared_experts=2, d_shared=1408, source="config.json (27 layers, first dense)"),
    ModelSpec("phi-3.5-moe", "microsoft/Phi-3.5-MoE-instruct", "phimoe", 32, 16, 2, 4096, 6400,
              source="MELINOE Tab. 6; config.json"),
    ModelSpec("gpt-oss-20b", "openai/gpt-oss-20b", "gpt_oss", 24, 32, 4, 2880, 2880,
              source="config.json"),
    ModelSpec("gpt-oss-120b", "openai/gpt-oss-120b", "gpt_oss", 36, 128, 4, 2880, 2880,
              source="config.json"),
    ModelSpec("glm-4.7-flash", "zai-org/GLM-4.7-Flash", "glm4_moe_lite", 47, 64, 4, 2048, 1536,
              shared_experts=1, d_shared=1536, source="Speculating Experts Tab. 2; config.json"),
]
MODELS: dict[str, ModelSpec] = {m.name: m for m in _PRESETS}


def get_model(name: str) -> ModelSpec:
    """A preset by name (case-insensitive)."""
    try:
        return MODELS[name.lower()]
    except KeyError:
        raise MoesimError(f"unknown model '{name}' (presets: {', '.join(MODELS)})") from None
