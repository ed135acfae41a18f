"""The MoE families `trace record` understands: where their routers are and how they route.

transformers 5 gives every supported family one router module per MoE layer (a class named
`<Family>TopKRouter`, at `mlp.gate` or `mlp.router`) whose forward returns
`(router_logits, topk_weights, topk_indices)` exactly as the model routes: softmax or sigmoid,
group limits, correction bias, renormalisation and scaling included. The recorder hooks those
modules, so it records what the model itself computed, not a re-implementation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moesim.errors import MoesimError


@dataclass(frozen=True)
class Family:
    """How one transformers `model_type` names its MoE dimensions and routes."""

    model_type: str
    experts_key: str  # config key of the routed experts per layer
    d_expert_key: str  # config key of one expert's intermediate size
    routing: str  # what the router computes, written into the trace metadata
    unsorted_topk: bool = False  # router returns its top-k unordered: sort by weight
    shared_key: str | None = None  # config key of the shared experts' width, if any
    tiny: dict = field(default_factory=dict)  # config of the tiny random model, on top of TINY_COMMON

    def shared_experts(self, config) -> tuple[int, int | None]:
        """(always-active experts per MoE layer, their intermediate size) from a config."""
        if self.shared_key is None:
            return 0, None
        if self.model_type.startswith("deepseek"):  # n_shared_experts fused into one MLP
            n = int(getattr(config, "n_shared_experts", 0) or 0)
            return n, int(config.moe_intermediate_size) if n else None
        width = int(getattr(config, self.shared_key, 0) or 0)
        return (1, width) if width else (0, None)


_SOFTMAX = "softmax over the router logits, top-k"
FAMILIES: dict[str, Family] = {f.model_type: f for f in [
    Family("mixtral", "num_local_experts", "intermediate_size", _SOFTMAX + ", renormalised to sum 1",
           tiny={"num_local_experts": 8}),
    Family("olmoe", "num_experts", "intermediate_size", _SOFTMAX + " (renormalised when norm_topk_prob)",
           tiny={"num_experts": 8}),
    Family("qwen2_moe", "num_experts", "moe_intermediate_size", _SOFTMAX + " (renormalised when norm_topk_prob)"
           "; plus one sigmoid-gated shared expert", shared_key="shared_expert_intermediate_size",
           tiny={"num_experts": 8, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64}),
    Family("qwen3_moe", "num_experts", "moe_intermediate_size", _SOFTMAX + " (renormalised when norm_topk_prob)",
           tiny={"num_experts": 8, "moe_intermediate_size": 32, "head_dim": 16}),
    Family("deepseek_v2", "n_routed_experts", "moe_intermediate_size",
           "softmax over the router logits, top-k (greedy or group-limited), times routed_scaling_factor; "
           "plus n_shared_experts always active", unsorted_topk=True, shared_key="n_shared_experts",
           tiny={"n_routed_experts": 8, "moe_intermediate_size": 32, "n_shared_experts": 1,
                 "first_k_dense_replace": 1, "kv_lora_rank": 16, "q_lora_rank": None, "qk_rope_head_dim": 8,
                 "qk_nope_head_dim": 8, "v_head_dim": 16, "num_key_value_heads": 4}),
    Family("deepseek_v3", "n_routed_experts", "moe_intermediate_size",
           "sigmoid scores plus correction bias choose the top-k within the best groups; weights are the "
           "sigmoid scores, renormalised when norm_topk_prob, times routed_scaling_factor; "
           "plus n_shared_experts always active", unsorted_topk=True, shared_key="n_shared_experts",
           tiny={"n_routed_experts": 8, "moe_intermediate_size": 32, "n_shared_experts": 1,
                 "first_k_dense_replace": 1, "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8,
                 "qk_nope_head_dim": 8, "v_head_dim": 16, "num_key_value_heads": 4, "n_group": 4,
                 "topk_group": 2}),
    Family("phimoe", "num_local_experts", "intermediate_size",
           "sparsemixer: experts picked one by one by logit, each weighted by a masked softmax",
           tiny={"num_local_experts": 8}),
    Family("gpt_oss", "num_local_experts", "intermediate_size",
           "top-k of the router logits (with bias), softmax over those k",
           tiny={"num_local_experts": 8, "head_dim": 16, "sliding_window": 32,
                 "rope_parameters": {"rope_type": "default", "rope_theta": 150000.0}}),
]}

# Tiny random models: `tiny-<name>` -> model_type. Small enough that a test records all of them
# in seconds, with the real architecture's code path.
TINY_MODELS = {
    "tiny-mixtral": "mixtral", "tiny-olmoe": "olmoe", "tiny-qwen2moe": "qwen2_moe",
    "tiny-qwen3moe": "qwen3_moe", "tiny-deepseek-v2": "deepseek_v2", "tiny-deepseek": "deepseek_v3",
    "tiny-phimoe": "phimoe", "tiny-gptoss": "gpt_oss",
}
TINY_COMMON = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_experts_per_tok": 2, "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}
TINY_SEED = 0


def family_of(model_type: str, where: str) -> Family:
    """The family of a transformers model_type, or a one-line error naming it."""
    if model_type not in FAMILIES:
        raise MoesimError(f"{where}: architecture '{model_type}' is not supported by trace record "
                          f"(supported: {', '.join(FAMILIES)})")
    return FAMILIES[model_type]


def is_router(module) -> bool:
    """A family's per-layer router: the `<Family>TopKRouter` modules of transformers 5."""
    return type(module).__name__.lower().endswith("topkrouter")
