"""What a model is to the simulator: ``ModelSpec``, its MoE dimensions and what it holds besides its
routed experts, and the weight formats' bytes per parameter (``BYTES_PER_PARAM``). The presets are in
``moesim.tracegen.models``; models read from files in ``moesim.tracegen.model_files``."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from moesim.errors import MoesimError
from moesim.tracegen.schema import TraceMeta



@dataclass(frozen=True)
class WeightFormat:
    """A weight format as engines name it: its bits per parameter, block scales included, and the class of
    kernel it runs as on a CPU (``moesim.sim.cpu_rates``: fp32 FMA; 16-bit floats widened to fp32 or dotted
    natively; 8-bit integers dotted; 4- to 6-bit blocks unpacked to 8-bit first) and on a GPU."""

    name: str
    bits: float
    cpu_class: str  # fp32, bf16 (16-bit floats), int8, int4 (sub-byte blocks, unpacked)
    gpu_class: str  # fp32, bf16 (16-bit tensor cores), fp8, int8, int4 (dequantised in the kernel)
    source: str


# ggml's block sizes: a block of 32 (or a super-block of 256) weights and its scales (ggml-common.h; the
# ``gguf`` package's GGML_QUANT_SIZES): Q8_0 34 B / 32, Q6_K 210 B / 256, Q5_K 176 B / 256, Q4_K 144 B / 256,
# Q4_0 18 B / 32, IQ4_XS 136 B / 256, IQ4_NL 18 B / 32, Q3_K 110 B / 256, Q2_K 84 B / 256, MXFP4 17 B / 32 (OCP
# microscaling: 32 FP4 values and an E8M0 scale). Q4_K_M is a file recipe, not a type: llama.cpp's quantizer
# (``use_more_bits``) keeps the down projection (a third of an FFN's weights) of half the layers in Q6_K.
FORMATS = {f.name: f for f in (
    WeightFormat("fp32", 32, "fp32", "fp32", "IEEE binary32"),
    WeightFormat("bf16", 16, "bf16", "bf16", "bfloat16"),
    WeightFormat("f16", 16, "bf16", "bf16", "IEEE binary16 (llama.cpp's F16)"),
    WeightFormat("fp8", 8, "int8", "fp8", "E4M3, DeepSeek-V3's release format (its 128x128 block scales: +0.002 bit)"),
    WeightFormat("int8", 8, "int8", "int8", "8-bit integers, a scale per row (kTransformers' AMX format)"),
    WeightFormat("q8_0", 8 * 34 / 32, "int8", "int8", "llama.cpp Q8_0: 32 int8 and an fp16 scale"),
    WeightFormat("q6_k", 8 * 210 / 256, "int4", "int4", "llama.cpp Q6_K"),
    WeightFormat("q5_k", 8 * 176 / 256, "int4", "int4", "llama.cpp Q5_K"),
    WeightFormat("q4_k", 8 * 144 / 256, "int4", "int4", "llama.cpp Q4_K"),
    WeightFormat("q4_k_m", 2 / 3 * 4.5 + 1 / 3 * (4.5 + 6.5625) / 2, "int4", "int4",
                 "llama.cpp's Q4_K_M recipe: Q4_K, the down projections of half the layers in Q6_K"),
    WeightFormat("q4_0", 8 * 18 / 32, "int4", "int4", "llama.cpp Q4_0: 32 4-bit values and an fp16 scale"),
    WeightFormat("iq4_xs", 8 * 136 / 256, "int4", "int4", "llama.cpp IQ4_XS"),
    WeightFormat("iq4_nl", 8 * 18 / 32, "int4", "int4", "llama.cpp IQ4_NL: 32 4-bit codes of a non-linear grid, a scale"),
    WeightFormat("q3_k", 8 * 110 / 256, "int4", "int4", "llama.cpp Q3_K"),
    WeightFormat("q2_k", 8 * 84 / 256, "int4", "int4", "llama.cpp Q2_K"),
    WeightFormat("mxfp4", 8 * 17 / 32, "int4", "int4", "OCP MXFP4: GPT-OSS's release format"),
    WeightFormat("int4", 4 + 16 / 128, "int4", "int4", "4-bit integers, an fp16 scale per group of 128 (GPTQ, AWQ)"),
    WeightFormat("int2", 2 + 16 / 128, "int4", "int4", "2-bit integers, an fp16 scale per group of 128 (HOBBIT)"),
)}
BYTES_PER_PARAM = {name: f.bits / 8 for name, f in FORMATS.items()}  # block scales included
# a file recipe's formats by share of the parameters: Q4_K_M's down projections of half the layers (a sixth of an
# FFN's weights) in Q6_K, the rest in Q4_K (the bits above); a run in a recipe prices each part at its own rates
RECIPES = {"q4_k_m": (("q4_k", 5 / 6), ("q6_k", 1 / 6))}


def recipe_mix(fmt: str) -> tuple:
    """A recipe's (format, share of the bytes) pairs (``RECIPES``), as a model file's ``expert_mix``; () for a format
    that is one type."""
    parts = RECIPES.get(fmt, ())
    total = sum(share * BYTES_PER_PARAM[f] for f, share in parts)
    return tuple((f, share * BYTES_PER_PARAM[f] / total) for f, share in parts)


def shares(mix: tuple, fmt: str) -> str:
    """A mix of formats in words, the largest share first (``q4_k 79% + q6_k 21%``); ``fmt`` where there is none."""
    if not mix:
        return fmt
    return " + ".join(f"{f} {share:.0%}" if share >= 0.01 else f"{f} <1%" for f, share in
                      sorted(mix, key=lambda part: -part[1]))


# how a trace's metadata ``source`` names the model file its metadata was taken from (``ModelSpec.trace_meta``)
MODEL_FILE = "model file "


def with_model_file(source: str, file: str) -> str:
    """A trace's ``source`` with the model file its metadata came from named at its end (``file`` "": as it is)."""
    if not file:
        return source
    return f"{source}; {MODEL_FILE}{file}" if source else f"{MODEL_FILE}{file}"


def model_file_of(source: str) -> str:
    """The model file a trace's ``source`` names (``with_model_file``), or ""."""
    if source.startswith(MODEL_FILE):
        return source[len(MODEL_FILE):]
    at = source.rfind(f"; {MODEL_FILE}")
    return source[at + len(MODEL_FILE) + 2:] if at >= 0 else ""


# a GGUF's general.architecture -> the family's transformers model_type, where they differ: llama.cpp converts
# Mixtral to its llama architecture with stacked experts, and DeepSeek-V2, V3, R1 and Kimi-K2 alike to deepseek2,
# taken as V3's family (the one the engines that load GGUFs list)
GGUF_FAMILIES = {"llama": "mixtral", "qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "qwen3next": "qwen3_next",
                 "deepseek2": "deepseek_v3", "gpt-oss": "gpt_oss", "glm4moe": "glm4_moe"}


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
    # read from a model file (``moesim.tracegen.model_files``: a GGUF's tensors, a config.json's quantization_config):
    # the bytes as stored, and their formats (0, "": from the run's dtype)
    stored_expert_bytes: float = 0.0  # one routed expert (the mean over layers)
    stored_other_bytes: float = 0.0   # every other weight
    expert_format: str = ""
    other_format: str = ""
    expert_mix: tuple = ()            # every format the experts are stored in: (format, share of their bytes)
    other_mix: tuple = ()             # ... and every other weight (norms and routers often f32)
    storage: str = ""  # the file's name for its storage (a GGUF's file type, Q4_K_M; a config.json's quantization,
    # MXFP4): with no stored bytes, one moesim cannot price; "" a preset or an unquantised config.json
    file: str = ""  # the config.json or GGUF file the model was read from, its absolute path ("": a preset)

    @property
    def expert_params(self) -> int:
        return self.ffn_mats * self.d_model * self.d_expert

    @property
    def family(self) -> str:
        """The family engines list the models they run by: the transformers ``model_type`` (``GGUF_FAMILIES``)."""
        return GGUF_FAMILIES.get(self.architecture, self.architecture)

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
    def non_expert_parts(self) -> dict:
        """Every weight but the routed experts, by part (what stays on the GPU in every strategy)."""
        d, layers = self.d_model, self.num_layers + self.dense_layers
        return {"embeddings": self.vocab * d * (1 if self.tied_embeddings else 2),  # and the head
                "attention": layers * self.attention_params,
                "routers": self.num_layers * d * self.num_experts,
                "shared experts": self.num_layers * self.shared_experts * self.ffn_mats * d * self.d_shared,
                "dense FFNs": self.dense_layers * self.ffn_mats * d * self.d_dense,
                "norms": layers * 2 * d + d}

    @property
    def non_expert_params(self) -> int:
        """Every weight but the routed experts (``non_expert_parts``)."""
        return sum(self.non_expert_parts.values())

    @property
    def storage_text(self) -> str:
        """The file's own storage in words: its name, the formats of the experts and of the other weights."""
        return (f"{self.storage} (the file's: experts {shares(self.expert_mix, self.expert_format)}; other weights "
                f"{shares(self.other_mix, self.other_format)})")

    def kv_bytes(self, tokens: float, bytes_per_value: float = 2.0) -> float:
        """KV cache bytes for ``tokens`` tokens in every layer (MoE and dense)."""
        return tokens * self.kv_width * (self.num_layers + self.dense_layers) * bytes_per_value

    def expert_bytes(self, dtype: str = "bf16") -> int:
        if dtype not in BYTES_PER_PARAM:
            raise MoesimError(f"unknown dtype '{dtype}' (choose from {', '.join(BYTES_PER_PARAM)})")
        return int(self.expert_params * BYTES_PER_PARAM[dtype])

    def trace_meta(self, **fields) -> TraceMeta:
        """Trace metadata with this model's dimensions (bf16 expert bytes); `fields` override. A model read from a
        file also names that file in the metadata's ``source`` (``with_model_file``): the metadata holds its MoE
        dimensions only, so a run of the trace asks for the file rather than simulate a model without its attention,
        vocabulary and dense layers (``moesim.tracegen.models.model_for_trace``)."""
        fields = {**fields, "source": with_model_file(fields.get("source", ""), self.file)}
        return TraceMeta(**{
            "num_layers": self.num_layers, "num_experts": self.num_experts, "top_k": self.top_k,
            "model": self.name, "d_model": self.d_model, "d_expert": self.d_expert,
            "bytes_per_param": BYTES_PER_PARAM["bf16"], "expert_bytes": self.expert_bytes("bf16"),
            "shared_experts": self.shared_experts, "d_shared": self.d_shared or None, **fields})

    def routed_expert_bytes(self, dtype: str = "bf16") -> int:
        """All routed experts of all layers: what does not fit on a small GPU."""
        return self.num_layers * self.num_experts * self.expert_bytes(dtype)


# what each number of a model must be (a preset and a model file's reader give nothing else): whole numbers, the
# first five at least 1, the others at least 0 (0: none, or "the formula's"); the stored bytes finite and >= 0
AT_LEAST_ONE = ("num_layers", "num_experts", "top_k", "d_model", "d_expert")
AT_LEAST_ZERO = ("shared_experts", "d_shared", "q_dim", "kv_dim", "vocab", "dense_layers", "d_dense", "attn_params")
KINDS = ("moe", "mole")


def check_model(spec: ModelSpec, where: str) -> None:
    """A model built in code (the Python API's ``model=ModelSpec(...)``, ``dataclasses.replace`` of a preset) held to
    what every preset and model file gives: one line naming ``where`` and the field. A negative width gave negative
    GPU memory; a NaN one a wrong cause."""
    for name in ("name", "hf_id", "architecture", "source", "file", "expert_format", "other_format", "storage"):
        if not isinstance(getattr(spec, name), str):
            raise MoesimError(f"{where}: {name} must be a string, got {getattr(spec, name)!r}")
    for name in ("expert_mix", "other_mix"):  # a GGUF file's types moesim does not know keep their own names
        mix = getattr(spec, name)
        if not isinstance(mix, tuple) or not all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and
                                                 isinstance(p[1], numbers.Real) and 0 < p[1] <= 1 for p in mix):
            raise MoesimError(f"{where}: {name} must be a tuple of (format, share of the bytes) pairs, got {mix!r}")
    if not isinstance(spec.tied_embeddings, bool):
        raise MoesimError(f"{where}: tied_embeddings must be True or False, got {spec.tied_embeddings!r}")
    for name in AT_LEAST_ONE + AT_LEAST_ZERO:
        value, low = getattr(spec, name), 1 if name in AT_LEAST_ONE else 0
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
            raise MoesimError(f"{where}: {name} must be a whole number >= {low}, got {value!r}")
    for name in ("stored_expert_bytes", "stored_other_bytes"):
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
            raise MoesimError(f"{where}: {name} must be a finite number >= 0 (0: priced from the run's dtype), got "
                              f"{value!r}")
    mats = spec.ffn_mats
    if isinstance(mats, bool) or not isinstance(mats, numbers.Integral) or mats not in (2, 3):
        raise MoesimError(f"{where}: ffn_mats must be 3 (SwiGLU: gate, up, down) or 2 (a GELU MLP), got "
                          f"{spec.ffn_mats!r}")
    if spec.kind not in KINDS:
        raise MoesimError(f"{where}: kind must be one of {', '.join(KINDS)}, got {spec.kind!r}")
    if spec.top_k > spec.num_experts:
        raise MoesimError(f"{where}: top_k {spec.top_k} is more than its {spec.num_experts} experts")
