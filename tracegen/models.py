"""Model presets: the MoE dimensions that decide how many bytes an expert is and how much work it does.

Sources: MELINOE Table 6 (OLMoE, Phi-3.5-MoE, Mixtral), Speculating Experts Table 2 (Qwen3-30B-A3B,
GLM-4.7-Flash, Qwen3-235B-A22B) and each model's public config.json. `num_layers` counts MoE
layers only (DeepSeek-V2-Lite's first layer is dense). An expert is a SwiGLU FFN of
3 * d_model * d_expert parameters (gate, up, down); biases and quantisation scales are not counted.
`q_dim` / `kv_dim` (heads x head size) size the attention the cost model times; DeepSeek's latent
attention (MLA) is approximated by its query width and its compressed KV width (kv_lora_rank + rope
dims), cached once per token rather than as K and V, and its attention weights are counted exactly
(``attn_params``) where a preset gives them.

What a model holds besides its routed experts (``non_expert_params``) decides the GPU memory left for
them: the token embedding and the output head (``vocab`` x d_model each, one matrix when tied), per
layer the attention, the router (d_model x E), the shared experts and two norms, the dense FFN layers
before the MoE ones (``dense_layers``, DeepSeek's first_k_dense_replace), and the final norm. Vocabulary
sizes and dense layers are the models' config.json values.

MoLE (Mixture of Lookup Experts) presets are `kind="mole"`: the N routed experts are per-token
lookup tables, the shared expert is the dense FFN (MoLE Tab. 2, Pythia dims: 160M d=768 L=12,
410M d=1024 L=24, 1B d=2048 L=16, FFN 4d, vocabulary 50k, GELU MLPs of 2 matrices). Their MoE
counterparts (`moe-*-10e`) halve the FFN width per expert, top-2, no shared expert, as MoLE §4.1 sets them.
Speculating Experts Table 2 lists "GPT-OSS-120B" with 24 layers and 32 experts, which are
GPT-OSS-20B's dimensions; the presets follow the public configs of both models.
"""

from __future__ import annotations

from dataclasses import dataclass

from moesim.errors import MoesimError
from moesim.tracegen.schema import TraceMeta

# bytes per parameter of each weight format, block scales included: llama.cpp's Q8_0 (8.5 bits), Q4_K
# (4.5 bits), MXFP4 (4.25 bits: OCP microscaling, GPT-OSS's release format); int4 and int2 without scales
BYTES_PER_PARAM = {"bf16": 2.0, "fp8": 1.0, "q8_0": 8.5 / 8, "q4_k": 4.5 / 8, "mxfp4": 4.25 / 8, "int4": 0.5,
                   "int2": 0.25, "fp32": 4.0}


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
    q_dim: int = 0  # query width, heads x head size (0: d_model)
    kv_dim: int = 0  # width of K and of V, kv heads x head size (0: d_model)
    ffn_mats: int = 3  # weight matrices per FFN: 3 SwiGLU (gate, up, down), 2 GELU MLP
    kind: str = "moe"  # "mole": routed experts are lookup tables indexed by token id
    vocab: int = 0
    tied_embeddings: bool = False  # the output head is the embedding matrix
    dense_layers: int = 0  # dense FFN layers besides the MoE ones (not in the trace)
    d_dense: int = 0  # their intermediate size
    attn_params: int = 0  # attention weights per layer when the q/kv formula does not hold (MLA); 0: the formula

    @property
    def expert_params(self) -> int:
        return self.ffn_mats * self.d_model * self.d_expert

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek, GLM-4.7-Flash): one compressed KV vector per token and layer."""
        return self.architecture.startswith(("deepseek", "glm4_moe_lite"))

    @property
    def attention_params(self) -> int:
        """Attention weights of one layer: Q, K, V and output projections (d·q + 2·d·kv + q·d), or ``attn_params``."""
        d = self.d_model
        q, kv = self.q_dim or d, self.kv_dim or d
        return self.attn_params or d * q + 2 * d * kv + q * d

    @property
    def kv_width(self) -> int:
        """Values one token keeps in one layer's KV cache: K and V of kv_dim each, or MLA's one latent."""
        kv = self.kv_dim or self.d_model
        return kv if self.mla else 2 * kv

    @property
    def non_expert_params(self) -> int:
        """Every weight but the routed experts: embeddings and head, attention, routers, shared experts,
        dense FFN layers, norms (what stays on the GPU in every strategy)."""
        d = self.d_model
        per_layer = self.attention_params + 2 * d
        moe = self.num_layers * (per_layer + d * self.num_experts + self.shared_experts * self.ffn_mats * d * self.d_shared)
        dense = self.dense_layers * (per_layer + self.ffn_mats * d * self.d_dense)
        return self.vocab * d * (1 if self.tied_embeddings else 2) + moe + dense + d

    def kv_bytes(self, tokens: float, bytes_per_value: float = 2.0) -> float:
        """KV cache bytes for ``tokens`` tokens in every layer (MoE and dense)."""
        return tokens * self.kv_width * (self.num_layers + self.dense_layers) * bytes_per_value

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

    def routed_expert_bytes(self, dtype: str = "bf16") -> int:
        """All routed experts of all layers: what does not fit on a small GPU."""
        return self.num_layers * self.num_experts * self.expert_bytes(dtype)


_PRESETS = [
    ModelSpec("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", "mixtral", 32, 8, 2, 4096, 14336,
              source="MELINOE Tab. 6; config.json", q_dim=4096, kv_dim=1024, vocab=32000),
    ModelSpec("olmoe-1b-7b", "allenai/OLMoE-1B-7B-0924", "olmoe", 16, 64, 8, 2048, 1024,
              source="MELINOE Tab. 6; config.json", q_dim=2048, kv_dim=2048, vocab=50304),
    ModelSpec("qwen1.5-moe-a2.7b", "Qwen/Qwen1.5-MoE-A2.7B", "qwen2_moe", 24, 60, 4, 2048, 1408,
              shared_experts=1, d_shared=5632, source="config.json", q_dim=2048, kv_dim=2048, vocab=151936),
    ModelSpec("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "qwen3_moe", 48, 128, 8, 2048, 768,
              source="Speculating Experts Tab. 2; config.json", q_dim=4096, kv_dim=512, vocab=151936),
    ModelSpec("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", "qwen3_moe", 94, 128, 8, 4096, 1536,
              source="Speculating Experts Tab. 2; config.json", q_dim=8192, kv_dim=512, vocab=151936),
    ModelSpec("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite", "deepseek_v2", 26, 64, 6, 2048, 1408,
              shared_experts=2, d_shared=1408, source="config.json (27 layers, first dense)", q_dim=3072, kv_dim=576,
              vocab=102400, dense_layers=1, d_dense=10944),
    # MLA weights: q_a 7168x1536, q_b 1536x(128x192), kv_a 7168x576, kv_b 512x(128x256), o (128x128)x7168
    ModelSpec("deepseek-v3", "deepseek-ai/DeepSeek-V3", "deepseek_v3", 58, 256, 8, 7168, 2048,
              shared_experts=1, d_shared=2048, source="config.json (61 layers, first 3 dense)", q_dim=16384,
              kv_dim=576, vocab=129280, dense_layers=3, d_dense=18432, attn_params=187_105_280),
    ModelSpec("phi-3.5-moe", "microsoft/Phi-3.5-MoE-instruct", "phimoe", 32, 16, 2, 4096, 6400,
              source="MELINOE Tab. 6; config.json", q_dim=4096, kv_dim=1024, vocab=32064),
    ModelSpec("gpt-oss-20b", "openai/gpt-oss-20b", "gpt_oss", 24, 32, 4, 2880, 2880,
              source="config.json", q_dim=4096, kv_dim=512, vocab=201088),
    ModelSpec("gpt-oss-120b", "openai/gpt-oss-120b", "gpt_oss", 36, 128, 4, 2880, 2880,
              source="config.json", q_dim=4096, kv_dim=512, vocab=201088),
    ModelSpec("glm-4.7-flash", "zai-org/GLM-4.7-Flash", "glm4_moe_lite", 47, 64, 4, 2048, 1536,
              shared_experts=1, d_shared=1536, source="Speculating Experts Tab. 2; config.json", kv_dim=576,
              vocab=154880),
] + [spec for size, d, layers in (("160m", 768, 12), ("410m", 1024, 24), ("1b", 2048, 16)) for spec in (
    ModelSpec(f"moe-{size}-10e", "", "moe", layers, 10, 2, d, 2 * d, source="MoLE Tab. 2-3 (Pythia dims)",
              ffn_mats=2, vocab=50304),
    ModelSpec(f"mole-{size}-4e", "", "mole", layers, 4, 4, d, 4 * d, shared_experts=1, d_shared=4 * d,
              source="MoLE Tab. 2-3 (Pythia dims)", ffn_mats=2, kind="mole", vocab=50304),
    ModelSpec(f"mole-{size}-16e", "", "mole", layers, 16, 16, d, 4 * d, shared_experts=1, d_shared=4 * d,
              source="MoLE Tab. 2-3 (Pythia dims)", ffn_mats=2, kind="mole", vocab=50304))]
MODELS: dict[str, ModelSpec] = {m.name: m for m in _PRESETS}


def format_of(params: int, nbytes: float) -> str:
    """The weight format whose bytes per parameter are nearest to ``nbytes / params`` (a trace records bytes)."""
    per_param = nbytes / params
    return min(BYTES_PER_PARAM, key=lambda f: abs(BYTES_PER_PARAM[f] - per_param))


def model_for_trace(meta: TraceMeta, name: str | None = None) -> ModelSpec:
    """The model a trace is simulated on: the preset ``name`` (default: the trace's own model, or the
    preset a synthetic trace was made from), or, for a model without a preset, one built from the
    dimensions in the trace's metadata.

    A MoE preset must have the trace's layers, experts and top-k; a MoLE preset its layers (a MoLE
    layer reads every lookup table, so the trace supplies only the steps).
    """
    # a synthetic trace of a preset (`moesim trace synth --model M`, or --like a trace of one) is that preset's
    candidate = name or meta.model.removeprefix("synthetic-like-").removeprefix("synthetic-")
    spec = MODELS.get(candidate.lower())
    if spec is not None:
        want = (meta.num_layers,) if spec.kind == "mole" else (meta.num_layers, meta.num_experts, meta.top_k)
        have = (spec.num_layers,) if spec.kind == "mole" else (spec.num_layers, spec.num_experts, spec.top_k)
        if want == have:
            return spec
        if name is not None:
            raise MoesimError(f"model {spec.name} has (layers, experts, top_k) = "
                              f"{(spec.num_layers, spec.num_experts, spec.top_k)}, the trace "
                              f"{(meta.num_layers, meta.num_experts, meta.top_k)}")
    elif name is not None:
        get_model(name)  # raises: unknown preset
    if not meta.d_model or not meta.d_expert:
        raise MoesimError(f"trace model '{meta.model or '?'}' has no preset and its metadata lacks d_model / "
                          f"d_expert; pass --model with a preset ({', '.join(MODELS)})")
    return ModelSpec(meta.model or "trace", "", "", meta.num_layers, meta.num_experts, meta.top_k,
                     int(meta.d_model), int(meta.d_expert), shared_experts=int(meta.shared_experts or 0),
                     d_shared=int(meta.d_shared or 0), source="trace metadata")


def get_model(name: str) -> ModelSpec:
    """A preset by name (case-insensitive)."""
    try:
        return MODELS[name.lower()]
    except KeyError:
        raise MoesimError(f"unknown model '{name}' (presets: {', '.join(MODELS)})") from None
