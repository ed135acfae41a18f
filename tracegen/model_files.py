"""Models from files: a transformers ``config.json`` or a GGUF file's header, read into a ``ModelSpec``.

Everywhere a model preset's name is taken, a path to one of these is too (``get_model``).

**config.json** (``spec_from_config``): the MoE shape every family states in it, under the names each
uses — experts (``num_local_experts``: Mixtral, Phi-MoE, GPT-OSS; ``num_experts``: Qwen-MoE, OLMoE;
``n_routed_experts``: DeepSeek, GLM-4 MoE), experts per token (``num_experts_per_tok``,
``experts_per_token``), the expert's width (``moe_intermediate_size``, else ``intermediate_size``),
shared experts (``n_shared_experts`` of the expert's width; Qwen2-MoE's one
``shared_expert_intermediate_size`` wide; Llama 4's one), the layers that are dense FFNs
(``first_k_dense_replace``, Qwen's ``decoder_sparse_step`` and ``mlp_only_layers``, Llama 4's
``interleave_moe_layer_step``; their width ``intermediate_size``, Llama 4's ``intermediate_size_mlp``), attention
(heads, KV heads, ``head_dim``; DeepSeek's multi-head latent attention from its LoRA ranks and head
dims), the vocabulary and whether the embeddings are tied. A ``quantization_config`` names the storage
(``_quantized``): ``mxfp4`` (GPT-OSS: the experts in MXFP4, the rest in the config's torch_dtype), ``fp8``
(DeepSeek-V3: every Linear in FP8, the embeddings, head, routers and norms not), AWQ and GPTQ of 4 or 8 bits (int4,
int8, as fp8); the weights are stored bytes then, as a GGUF's are. Without one the format is the run's ``dtype``
(bf16 where it names none). Each field is read as transformers reads it, and a value it would fail on or
misread is refused rather than replaced: ``num_key_value_heads`` absent or null is one per attention head, else
a whole number that divides ``num_attention_heads`` (0 is no default); ``mlp_only_layers`` is a list of layer
indices; the MoE layer steps are at least 1.

**GGUF** (``spec_from_gguf``, with the ``gguf`` package; only the header is read): the shape from the
tensors themselves — ``token_embd`` (vocabulary, width), each layer's ``ffn_{gate,up,down}_exps``
(experts, the expert's width), shared experts (``*_shexp``), dense FFN layers, the attention tensors'
elements — and the top-k from ``{arch}.expert_used_count``. Every tensor's own type and bytes are kept:
``stored_expert_bytes`` is one routed expert as the file stores it (the mean over layers, which a
Q4_K_M file quantises unevenly: some layers' down projections in q6_k), ``stored_other_bytes`` every other
weight, ``expert_format`` / ``other_format`` the types that hold most of those bytes, and ``storage`` the recipe
``general.file_type`` names (Q4_K_M; without one, the experts' main type). A file that has the
magic but not the 24 bytes of a header is called truncated.

A model read from a file keeps the file's absolute path (``ModelSpec.file``): a trace whose metadata came from it names
it (so from any folder),
and is simulated only with it (``moesim.tracegen.models.model_for_trace``).

A file that names no mixture of experts (a dense model), an unknown layout, or a damaged file is a
one-line ``MoesimError`` naming the file.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from moesim.errors import MoesimError
from moesim.tracegen.model_spec import BYTES_PER_PARAM, ModelSpec

MODEL_FILES = (".json", ".gguf")
# keys families use for the MoE shape (the first present wins)
EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_top_k", "num_selected_experts")
MAX_HEADER_ITEMS = 1 << 20  # more tensors or metadata entries than this is not a model's header


def is_model_file(name: str) -> bool:
    """Whether ``name`` names a model file rather than a preset."""
    return isinstance(name, str) and name.lower().endswith(MODEL_FILES)


def load_model_file(path: str | Path) -> ModelSpec:
    """The model a config.json or a GGUF file describes (read once per file version)."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        raise MoesimError(f"{path}: no such model file") from None
    return _load(str(path), str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=16)
def _load(shown: str, path: str, mtime: int, size: int) -> ModelSpec:
    """The file named ``shown`` (as given: errors name it so), read now; ``path``, its resolved name, is with its
    version the cache's key and names a config.json's model by its folder."""
    if path.lower().endswith(".gguf"):
        return replace(spec_from_gguf(shown), file=path)
    try:
        data = json.loads(Path(shown).read_text())
    except json.JSONDecodeError as exc:
        raise MoesimError(f"{shown}: line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MoesimError(f"{shown}: not a readable config.json ({exc.__class__.__name__})") from None
    return replace(spec_from_config(data, _name_of(Path(path)), shown), file=path)


def _name_of(path: Path) -> str:
    """A model's name from its file: the folder of a config.json, the file's own name for a GGUF."""
    return (path.parent.name if path.name == "config.json" and path.parent.name else path.stem).lower()


def _first(data: dict, keys, default=None):
    return next((data[k] for k in keys if data.get(k) is not None), default)


MOST = 2 ** 31 - 1  # no model's count or dimension comes near it (what they give, e.g. an expert's bytes, is checked too)


def _whole(value, what: str, where: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MOST:
        raise MoesimError(f"{where}: {what} must be a whole number in {low}..{MOST}, got {value!r}")
    return value


def _count(data: dict, key: str, where: str) -> int:
    """An optional count of the config's (absent or null: 0)."""
    return 0 if data.get(key) is None else _whole(data[key], key, where, 0)


def spec_from_config(data: dict, name: str, where: str = "config.json") -> ModelSpec:
    """A ``ModelSpec`` from a transformers config (module docstring)."""
    if not isinstance(data, dict):
        raise MoesimError(f"{where}: a config.json is a JSON object")
    if isinstance(data.get("text_config"), dict):  # a multimodal model's language model (Llama 4)
        data = {**data, **data["text_config"]}
    family = str(data.get("model_type") or "?")
    experts = _first(data, EXPERTS)
    if experts in (None, 0, 1):
        raise MoesimError(f"{where}: model type {family} is not a mixture of experts (no expert count under "
                          f"{', '.join(EXPERTS)}); moesim simulates MoE models")
    experts = _whole(experts, "the number of experts", where, 2)
    top_k = _whole(_first(data, TOP_K), "experts per token", where)
    if top_k > experts:
        raise MoesimError(f"{where}: {top_k} experts per token of {experts}")
    d = _whole(_first(data, ("hidden_size", "d_model", "n_embd")), "hidden_size", where)
    layers = _whole(_first(data, ("num_hidden_layers", "n_layer", "num_layers")), "num_hidden_layers", where)
    d_expert = _whole(_first(data, ("moe_intermediate_size", "expert_intermediate_size"),
                             _count(data, "intermediate_size", where)), "the expert's intermediate size", where)
    d_dense = _count(data, "intermediate_size_mlp", where) or _count(data, "intermediate_size", where)
    dense = _dense_layers(data, layers, where)
    shared, d_shared = _shared(data, d_expert, where)
    heads = _whole(_first(data, ("num_attention_heads", "n_head")), "num_attention_heads", where)
    kv_heads = _kv_heads(data, heads, where)
    head_dim = _count(data, "head_dim", where) or d // heads
    q_dim, kv_dim, attn = heads * head_dim, kv_heads * head_dim, 0
    if data.get("kv_lora_rank"):  # multi-head latent attention (DeepSeek V2/V3, Kimi K2, GLM-4.7-Flash)
        q_dim, kv_dim, attn = _mla(data, d, heads, where)
    if not q_dim or not kv_dim:
        raise MoesimError(f"{where}: attention of {heads} heads on a width of {d} has no head dimension")
    spec = ModelSpec(name, str(data.get("_name_or_path") or ""), family, layers - dense, experts, top_k, d, d_expert,
                     shared_experts=shared, d_shared=d_shared, source=f"config.json ({where})", q_dim=q_dim,
                     kv_dim=kv_dim, vocab=_count(data, "vocab_size", where),
                     tied_embeddings=data.get("tie_word_embeddings") is True, dense_layers=dense,
                     d_dense=d_dense if dense else 0, attn_params=attn)
    return _quantized(spec, data, where)


# a quantization_config's quant_method: the format it stores the experts in (AWQ and GPTQ: by their bits), and the
# parts of ``ModelSpec.non_expert_parts`` it stores in that format too: transformers' MXFP4 the experts alone; FP8
# (DeepSeek-V3), AWQ and GPTQ every Linear but the head and the routers (DeepSeek-V3's router is no Linear; AWQ and
# GPTQ checkpoints keep theirs, a Linear of a few thousand weights, unquantised); embeddings and norms are no Linear
LINEAR = ("attention", "shared experts", "dense FFNs")
QUANT_METHODS = {"mxfp4": ("mxfp4", ()), "fp8": ("fp8", LINEAR), "awq": ({4: "int4", 8: "int8"}, LINEAR),
                 "gptq": ({4: "int4", 8: "int8"}, LINEAR)}
# a modules_to_not_convert (ignored_layers) entry that keeps a whole part unquantised, by its last module name
# ("model.layers.*.self_attn"); one naming a piece of a part ("self_attn.q_proj", "shared_expert_gate") is a few
# weights of it, and leaves the part as the method stores it
NOT_CONVERTED = {"self_attn": "attention", "attn": "attention", "attention": "attention",
                 "shared_expert": "shared experts", "shared_experts": "shared experts"}
DENSE_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "fp32"}  # torch_dtype: the unquantised weights'


def _quantized(spec: ModelSpec, data: dict, where: str) -> ModelSpec:
    """``spec`` stored as its ``quantization_config`` says (``QUANT_METHODS``): the experts in the method's format,
    the other weights in it where the method quantises them (less those modules_to_not_convert names), else in the
    config's torch_dtype (bf16 where it names none). A method or bit width moesim has no format for is kept by name
    with no bytes (refused where it would be a run's format); with no quantization_config, ``spec`` as it is."""
    qc = data.get("quantization_config")
    if qc is None:
        return spec
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    if not isinstance(method, str) or not method:
        raise MoesimError(f"{where}: quantization_config must be an object with a quant_method, got {_shown(qc)}")
    if method.lower() not in QUANT_METHODS:
        return replace(spec, storage=method)
    (fmt, parts), name, bits = QUANT_METHODS[method.lower()], method.upper(), qc.get("bits")
    if isinstance(fmt, dict):  # by bits
        name, fmt = f"{name} {bits}-bit", fmt.get(bits) if type(bits) is int else None
        if fmt is None:
            return replace(spec, storage=name)
    kept = qc.get("modules_to_not_convert") or qc.get("ignored_layers") or []
    if not isinstance(kept, list) or not all(isinstance(m, str) for m in kept):
        raise MoesimError(f"{where}: quantization_config's modules_to_not_convert must be a list of module names, got "
                          f"{_shown(kept)}")
    dense = DENSE_DTYPES.get(str(data.get("torch_dtype") or data.get("dtype")), "bf16")
    names = {m.rstrip(".*").rsplit(".", 1)[-1] for m in kept}  # each entry's last module name
    quantised = set(parts) - {NOT_CONVERTED[n] for n in names if n in NOT_CONVERTED}
    weight = Counter()
    for part, params in spec.non_expert_parts.items():
        stored = fmt if part in quantised else dense
        weight[stored] += params * BYTES_PER_PARAM[stored]
    weight = +weight  # the parts the model has
    return replace(spec, storage=name, stored_expert_bytes=spec.expert_params * BYTES_PER_PARAM[fmt],
                   stored_other_bytes=float(sum(weight.values())), expert_format=fmt,
                   other_format=_main_format(weight), other_mix=_mix(weight))


def _kv_heads(data: dict, heads: int, where: str) -> int:
    """Grouped-query attention's KV heads, as transformers reads ``num_key_value_heads``: absent or null, one per
    attention head; else a whole number >= 1 that divides ``num_attention_heads`` (each KV head serves a group of
    query heads; 0 would divide by zero in the model's own code)."""
    if data.get("num_key_value_heads") is None:
        return heads
    kv_heads = _whole(data["num_key_value_heads"], "num_key_value_heads", where)
    if heads % kv_heads:
        raise MoesimError(f"{where}: num_key_value_heads must divide num_attention_heads {heads} (each KV head serves "
                          f"an equal group of query heads), got {kv_heads}")
    return kv_heads


# keys of the step between MoE layers (Qwen's decoder_sparse_step, Llama 4's interleave_moe_layer_step, DeepSeek's
# moe_layer_freq): absent or null, every layer; else a whole number >= 1 (the models' code takes it modulo)
MOE_STEPS = ("decoder_sparse_step", "interleave_moe_layer_step", "moe_layer_freq")


def _dense_layers(data: dict, layers: int, where: str) -> int:
    """Layers whose FFN is dense: DeepSeek's first k, Qwen's every-n-th sparse step and its MLP-only list (a list
    of layer indices, as transformers reads it: absent or null, none; an index no layer has, never met)."""
    dense = set(range(_count(data, "first_k_dense_replace", where)))
    step = next((_whole(data[k], k, where) for k in MOE_STEPS if data.get(k) is not None), 1)
    if step > 1:
        dense |= {i for i in range(layers) if (i + 1) % step != 0}
    listed = data.get("mlp_only_layers")
    listed = [] if listed is None else listed
    if not isinstance(listed, list) or any(type(i) is not int for i in listed):
        raise MoesimError(f"{where}: mlp_only_layers must be a list of layer indices 0..{layers - 1}, got "
                          f"{_shown(listed)}")
    dense |= set(listed) & set(range(layers))
    if len(dense) >= layers:
        raise MoesimError(f"{where}: every one of its {layers} layers is dense")
    return len(dense)


def _shown(value, most: int = 60) -> str:
    """A config's value as the error shows it: its JSON, cut to ``most`` characters."""
    text = json.dumps(value)
    return text if len(text) <= most else text[:most - 3] + "..."


def _shared(data: dict, d_expert: int, where: str) -> tuple[int, int]:
    """Shared (always-active) experts and each one's width."""
    width = _count(data, "shared_expert_intermediate_size", where)
    if width:  # Qwen2-MoE: one shared expert of its own width
        return 1, width
    if "interleave_moe_layer_step" in data:  # Llama 4: a shared expert as wide as the routed ones
        return 1, d_expert
    n = _count(data, "n_shared_experts", where) or _count(data, "num_shared_experts", where)
    return n, (d_expert if n else 0)


def _mla(data: dict, d: int, heads: int, where: str) -> tuple[int, int, int]:
    """Multi-head latent attention: the query width, the cached latent's width (kv_lora_rank + rope dims)
    and the attention's weights: Q (through its LoRA rank when it has one), the KV down projection with the
    rope key, the KV up projection, the output."""
    nope, rope = _count(data, "qk_nope_head_dim", where), _count(data, "qk_rope_head_dim", where)
    v_dim, kv_rank = _count(data, "v_head_dim", where) or nope, _count(data, "kv_lora_rank", where)
    if not nope or not rope:
        raise MoesimError(f"{where}: latent attention (kv_lora_rank) needs qk_nope_head_dim and qk_rope_head_dim")
    q_rank, q_dim = _count(data, "q_lora_rank", where), heads * (nope + rope)
    q = d * q_rank + q_rank * q_dim if q_rank else d * q_dim
    attn = q + d * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * d
    return q_dim, kv_rank + rope, attn


# GGUF tensor types as the engines name the formats (those the simulator's format table has)
GGUF_FORMATS = {"F32": "fp32", "F16": "f16", "BF16": "bf16", "Q8_0": "q8_0", "Q6_K": "q6_k", "Q5_K": "q5_k",
                "Q4_K": "q4_k", "Q4_0": "q4_0", "IQ4_XS": "iq4_xs", "IQ4_NL": "iq4_nl", "Q3_K": "q3_k", "Q2_K": "q2_k",
                "MXFP4": "mxfp4", "I8": "int8"}


def spec_from_gguf(path: str | Path) -> ModelSpec:
    """A ``ModelSpec`` from a GGUF file's header (module docstring)."""
    path = Path(path)
    tensors, meta = _gguf_header(path)
    arch = str(meta.get("general.architecture") or "?")
    if "token_embd.weight" not in tensors:
        raise MoesimError(f"{path}: no token_embd.weight tensor: not a language model's GGUF")
    d, vocab = tensors["token_embd.weight"][0][:2]
    blocks = sorted({int(n.split(".")[1]) for n in tensors if n.startswith("blk.") and n.split(".")[1].isdigit()})
    moe = [b for b in blocks if f"blk.{b}.ffn_down_exps.weight" in tensors]
    if not moe:
        raise MoesimError(f"{path}: architecture {arch} has no expert tensors (blk.N.ffn_down_exps): a dense "
                          "model; moesim simulates MoE models")
    dense = [b for b in blocks if b not in moe and f"blk.{b}.ffn_down.weight" in tensors]
    first = moe[0]
    down = tensors[f"blk.{first}.ffn_down_exps.weight"][0]  # ne: (expert width, d, experts)
    if len(down) != 3:
        raise MoesimError(f"{path}: blk.{first}.ffn_down_exps.weight has shape {down}, not (width, d, experts)")
    d_expert, experts = down[0], down[2]
    top_k = meta.get(f"{arch}.expert_used_count")
    if not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise MoesimError(f"{path}: {arch}.expert_used_count is {top_k!r}, not a number of experts 1..{experts}")
    mats = sum(f"blk.{first}.ffn_{m}_exps.weight" in tensors for m in ("gate", "up", "down")) + \
        2 * (f"blk.{first}.ffn_gate_up_exps.weight" in tensors)
    shared = int(meta.get(f"{arch}.expert_shared_count") or 0)
    shexp = tensors.get(f"blk.{first}.ffn_down_shexp.weight")
    if shexp is not None:
        shared = shared or 1
    d_shared = shexp[0][0] // shared if shexp is not None else 0
    attention = [n for n in tensors if n.startswith(f"blk.{first}.attn_") and not n.endswith("norm.weight")]
    attn_params = sum(tensors[n][1] for n in attention if n.endswith(".weight"))
    kv_rank = int(meta.get(f"{arch}.attention.kv_lora_rank") or 0)
    kv_a = tensors.get(f"blk.{first}.attn_kv_a_mqa.weight")
    k = tensors.get(f"blk.{first}.attn_k.weight")
    q = tensors.get(f"blk.{first}.attn_q.weight") or tensors.get(f"blk.{first}.attn_q_b.weight")
    kv_dim = kv_a[0][1] if kv_rank and kv_a is not None else (k[0][1] if k is not None else 0)
    expert_formats = _bytes_by_format(tensors, lambda n: "_exps." in n)
    other_formats = _bytes_by_format(tensors, lambda n: "_exps." not in n and n != "token_embd.weight")
    expert_bytes = [nbytes for n, (_, _, _, nbytes) in tensors.items() if "_exps." in n]
    other_bytes = [nbytes for n, (_, _, _, nbytes) in tensors.items() if "_exps." not in n]
    d_dense = tensors[f"blk.{dense[0]}.ffn_down.weight"][0][0] if dense else 0
    name = str(meta.get("general.name") or path.stem).lower().replace(" ", "-")
    return ModelSpec(name, "", arch, len(moe), experts, top_k, d, d_expert, shared_experts=shared,
                     d_shared=d_shared, source=f"GGUF header ({path})", q_dim=q[0][1] if q is not None else 0,
                     kv_dim=kv_dim, ffn_mats=mats or 3, vocab=vocab,
                     tied_embeddings="output.weight" not in tensors, dense_layers=len(dense), d_dense=d_dense,
                     attn_params=attn_params,
                     stored_expert_bytes=sum(expert_bytes) / (len(moe) * experts),
                     stored_other_bytes=float(sum(other_bytes)),
                     expert_format=_main_format(expert_formats), other_format=_main_format(other_formats),
                     expert_mix=_mix(expert_formats), other_mix=_mix(other_formats),
                     storage=_file_type(meta.get("general.file_type")) or _main_format(expert_formats).upper())


def _file_type(ftype) -> str:
    """A GGUF's ``general.file_type`` as llama.cpp names the recipe (``LLAMA_FTYPE_MOSTLY_Q4_K_M``: Q4_K_M; a type
    llama.cpp guessed, the same), or "" where it names none this ``gguf`` package knows."""
    from gguf import LlamaFileType

    if isinstance(ftype, bool) or not isinstance(ftype, int):
        return ""
    try:
        name = LlamaFileType(ftype & ~LlamaFileType.GUESSED).name
    except ValueError:
        return ""
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _bytes_by_format(tensors: dict, chosen) -> Counter:
    """The chosen tensors' bytes by moesim format name (a GGUF type moesim does not know: its own name, lower case)."""
    weight = Counter()
    for name, (_, _, kind, nbytes) in tensors.items():
        if chosen(name):
            weight[GGUF_FORMATS.get(kind, kind.lower())] += nbytes
    return weight


def _main_format(weight: Counter) -> str:
    """The format that holds most of the bytes."""
    return weight.most_common(1)[0][0] if weight else "fp32"


def _mix(weight: Counter) -> tuple:
    """Every format and its share of the bytes, sorted by name; () where one format holds them all."""
    total = sum(weight.values())
    return tuple(sorted((fmt, nbytes / total) for fmt, nbytes in weight.items())) if len(weight) > 1 else ()


def _gguf_header(path: Path) -> tuple[dict, dict]:
    """Every tensor's (shape in ggml order, elements, type name, bytes) by name, and the metadata's scalar
    values, from the header alone; a damaged or foreign file is a one-line error."""
    try:
        with path.open("rb") as f:
            head = f.read(24)
    except OSError as exc:
        raise MoesimError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if head[:4] != b"GGUF":
        raise MoesimError(f"{path}: not a GGUF file (no GGUF magic)")
    if len(head) < 24:  # the magic, then a version and two counts
        raise MoesimError(f"{path}: truncated GGUF file: {len(head)} of its header's 24 bytes")
    n_tensors, n_meta = int.from_bytes(head[8:16], "little"), int.from_bytes(head[16:24], "little")
    if n_tensors > MAX_HEADER_ITEMS or n_meta > MAX_HEADER_ITEMS:
        raise MoesimError(f"{path}: header claims {n_tensors} tensors and {n_meta} metadata entries: damaged")
    from gguf import GGUFReader, GGUFValueType

    try:
        reader = GGUFReader(path)
        meta = {}
        for key, field in reader.fields.items():
            if len(field.data) == 1 and len(field.types) == 1:  # a scalar or a string, not an array
                value = field.parts[field.data[0]]
                meta[key] = (bytes(value).decode("utf-8", "replace") if field.types[0] == GGUFValueType.STRING
                             else value.tolist()[0])
        tensors = {t.name: (tuple(int(x) for x in t.shape), int(t.n_elements), t.tensor_type.name, int(t.n_bytes))
                   for t in reader.tensors}
    except MoesimError:
        raise
    except Exception as exc:  # the reader's own errors on a damaged file are of many kinds
        raise MoesimError(f"{path}: not a readable GGUF file ({exc.__class__.__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else 'damaged'})") from None
    for name, (shape, elements, _, nbytes) in tensors.items():
        if not shape or min(shape) < 1 or nbytes < 1 or elements != math.prod(shape):
            raise MoesimError(f"{path}: tensor {name} has shape {shape} and {nbytes} bytes: damaged")
    return tensors, meta
