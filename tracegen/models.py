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

import difflib
import os

from moesim.errors import MoesimError, named
from moesim.tracegen.model_files import is_model_file, load_model_file
from moesim.tracegen.model_spec import BYTES_PER_PARAM, ModelSpec, model_file_of
from moesim.tracegen.schema import TraceMeta

__all__ = ["BYTES_PER_PARAM", "MODELS", "ModelSpec", "format_of", "get_model", "model_for_trace"]

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
    # MLA weights (no Q LoRA): q 2048x(16x192), kv_a 2048x576, kv_b 512x(16x256), o (16x128)x2048
    ModelSpec("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite", "deepseek_v2", 26, 64, 6, 2048, 1408,
              shared_experts=2, d_shared=1408, source="config.json (27 layers, first dense)", q_dim=3072, kv_dim=576,
              vocab=102400, dense_layers=1, d_dense=10944, attn_params=13_762_560),
    # MLA weights: q_a 7168x1536, q_b 1536x(128x192), kv_a 7168x576, kv_b 512x(128x256), o (128x128)x7168
    ModelSpec("deepseek-v3", "deepseek-ai/DeepSeek-V3", "deepseek_v3", 58, 256, 8, 7168, 2048,
              shared_experts=1, d_shared=2048, source="config.json (61 layers, first 3 dense)", q_dim=24576,
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
    """The model a trace is simulated on: the preset or model file ``name`` (default: the trace's own model, or
    the preset a synthetic trace was made from), or, for a model without a preset, one built from the
    dimensions in the trace's metadata.

    A trace whose metadata was taken from a config.json or GGUF file (``trace synth --model FILE``, ``trace
    import --model FILE``, ``moesim.synth_trace(model=FILE)``; its ``source`` names the file) has no default: its
    metadata holds the MoE dimensions only, and a model built from them would lack the file's attention,
    vocabulary and dense layers (less GPU memory, more tokens/s than the file's model), so a run without ``name``
    is refused with the file to name rather than simulate another model. So is a synthetic trace named
    ``synthetic-X`` where X is no preset (made from a model file by an older moesim, which did not name the file).

    A MoE preset must have the trace's layers, experts and top-k; a MoLE preset its layers (a MoLE
    layer reads every lookup table, so the trace supplies only the steps).
    """
    if name is None:
        _check_own_model(meta)
    # a synthetic trace of a preset (`moesim trace synth --model M`, or --like a trace of one) is that preset's
    candidate = name or meta.model.removeprefix("synthetic-like-").removeprefix("synthetic-")
    spec = get_model(candidate) if name is not None and is_model_file(name) else MODELS.get(candidate.lower())
    if spec is not None:
        if fits_trace(spec, meta):
            return spec
        if name is not None:
            check_fits_trace(spec, meta)
    elif name is not None:
        get_model(name)  # raises: unknown preset
    if not meta.d_model or not meta.d_expert:
        raise MoesimError(f"trace model '{meta.model or '?'}' has no preset and its metadata lacks d_model / "
                          f"d_expert; pass {named('model')} with a preset ({', '.join(MODELS)})")
    return ModelSpec(meta.model or "trace", "", "", meta.num_layers, meta.num_experts, meta.top_k,
                     int(meta.d_model), int(meta.d_expert), shared_experts=int(meta.shared_experts or 0),
                     d_shared=int(meta.d_shared or 0), source="trace metadata")


def fits_trace(spec: ModelSpec, meta: TraceMeta) -> bool:
    """Whether a model can run a trace: a MoE model its layers, experts and top-k; a MoLE model its layers (a MoLE
    layer reads every lookup table, so the trace supplies only the steps)."""
    if spec.kind == "mole":
        return spec.num_layers == meta.num_layers
    return (spec.num_layers, spec.num_experts, spec.top_k) == (meta.num_layers, meta.num_experts, meta.top_k)


def check_fits_trace(spec: ModelSpec, meta: TraceMeta) -> None:
    """``fits_trace``, refused in one line naming both: a preset named for a trace, a model built in code."""
    if not fits_trace(spec, meta):
        if spec.kind == "mole":  # its layers are what the trace must match
            raise MoesimError(f"model {spec.name} has {spec.num_layers} layers, the trace {meta.num_layers}")
        raise MoesimError(f"model {spec.name} has (layers, experts, top_k) = "
                          f"{(spec.num_layers, spec.num_experts, spec.top_k)}, the trace "
                          f"{(meta.num_layers, meta.num_experts, meta.top_k)}")


def _check_own_model(meta: TraceMeta) -> None:
    """Refuse to take a trace's own model where its metadata came from a model file (``model_for_trace``)."""
    file = model_file_of(meta.source)
    base = meta.model
    while base.startswith("synthetic-like-"):
        base = base.removeprefix("synthetic-like-")
    if not file and not (base.startswith("synthetic-") and base.removeprefix("synthetic-").lower() not in MODELS):
        return
    made = f"was made from the model file {file}" if file else "was synthesised from a model file (no preset is " \
        f"named {base.removeprefix('synthetic-')})"
    again = named("model", file) if file else f"{named('model')} with that config.json or GGUF file"
    raise MoesimError(f"trace model '{meta.model}' {made}, and a trace's metadata holds only its MoE dimensions, not "
                      f"its attention, vocabulary or dense layers: pass {again} to simulate it")


# a preset by its Hugging Face id too, as a user copies it from the hub (Qwen/Qwen3-30B-A3B), in any case
BY_HF_ID = {m.hf_id.lower(): m for m in MODELS.values() if m.hf_id}


def get_model(name: str) -> ModelSpec:
    """A preset by name or Hugging Face id (case-insensitive), or the model a config.json or GGUF file describes; an
    unknown name is refused with the presets nearest to it."""
    if not isinstance(name, (str, os.PathLike)):
        raise MoesimError(f"a model is a preset's name or a config.json or .gguf file, got {name!r}")
    if is_model_file(name):
        return load_model_file(name)
    found = MODELS.get(name.lower()) or BY_HF_ID.get(name.lower())
    if found is None:
        near = difflib.get_close_matches(name.lower(), [*MODELS, *BY_HF_ID], n=3, cutoff=0.6)
        guess = f"did you mean {' or '.join(dict.fromkeys(MODELS.get(n, BY_HF_ID.get(n)).name for n in near))}? " \
            if near else ""
        raise MoesimError(f"unknown model '{name}': {guess}(presets: {', '.join(MODELS)}, or their Hugging Face ids; "
                          "or a config.json or .gguf file)")
    return found
