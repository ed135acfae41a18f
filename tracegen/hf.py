"""Loading a causal LM for `trace record`: from a local folder (never the hub) or a tiny preset.

torch and transformers are optional extras, imported here only; every error is one line.
"""

from __future__ import annotations

import os
from pathlib import Path

from moesim.errors import MoesimError, first_line
from moesim.host import available_ram
from moesim.tracegen.families import FAMILIES, TINY_COMMON, TINY_MODELS, TINY_SEED, Family, family_of

RANDOM_PREFIX = "random-"
DTYPES = ("auto", "float32", "bfloat16", "float16", "float64")
SPECIALS = ("<pad>", "<s>", "</s>")  # ids 0, 1, 2 of the tiny tokenizer; bytes follow
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def require_torch():
    """Import torch and transformers, or say how to install them."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise MoesimError(f"trace record needs torch and transformers ({exc.name} is missing): "
                          "pip install 'moesim[torch]'") from None
    if int(transformers.__version__.split(".")[0]) < 5:
        raise MoesimError(f"trace record needs transformers 5 or newer (found {transformers.__version__}): "
                          "pip install 'moesim[torch]'")
    return torch, transformers


def load_model(ref: str, dtype: str = "auto", device: str = "cpu"):
    """(model in eval mode, tokenizer, family, display name) for a folder path or a `tiny-*` name."""
    torch, transformers = require_torch()
    if dtype not in DTYPES:
        raise MoesimError(f"unknown dtype '{dtype}' (choose from {', '.join(DTYPES)})")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise MoesimError(f"--device {device}: torch sees no CUDA device here (torch {torch.__version__})")
    try:  # a name torch does not know, or a device this build of torch cannot use (mps, xpu, meta)
        torch.ones(1, device=device).sum().item()
    except (RuntimeError, AssertionError, NotImplementedError) as exc:
        raise MoesimError(f"--device {device}: torch cannot compute on it here ({first_line(exc)})") from None
    torch_dtype = None if dtype == "auto" else getattr(torch, dtype)
    if ref in TINY_MODELS or ref.startswith(RANDOM_PREFIX):
        model, tokenizer = tiny_model(ref, torch_dtype or torch.float32, device)
        name = ref
    else:
        model, tokenizer = _from_folder(Path(ref), torch_dtype, transformers)
        name = Path(ref).resolve().name
    family = family_of(model.config.model_type, ref)
    if model.dtype == torch.float64:  # the fused grouped-matmul experts take no float64
        model.set_experts_implementation("eager")
    return model.to(device).eval(), tokenizer, family, name


def _from_folder(path: Path, torch_dtype, transformers):
    if not path.exists():
        raise MoesimError(f"{path}: no such model folder (or tiny preset: {', '.join(TINY_MODELS)}; "
                          f"or {RANDOM_PREFIX}<model preset>)")
    if not (path / "config.json").is_file():
        raise MoesimError(f"{path}: not a model folder (no config.json); give a folder written by save_pretrained")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub at run time
    try:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise MoesimError(f"{path}/config.json: unreadable ({first_line(exc)})") from None
    family_of(getattr(config, "model_type", "?"), str(path))
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, dtype=torch_dtype or "auto", use_safetensors=True)
    except Exception as exc:
        raise MoesimError(f"{path}: cannot load the model weights ({first_line(exc)})") from None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise MoesimError(f"{path}: cannot load the tokenizer ({first_line(exc)})") from None
    return model, tokenizer


def tiny_model(name: str, torch_dtype, device: str = "cpu"):
    """A random-initialised model of the real architecture, seeded, with a byte-level tokenizer.

    `tiny-*` names are test-sized; `random-<preset>` (e.g. random-olmoe-1b-7b) has a model
    preset's MoE dims (layers, experts, top-k, d_model, d_expert) on the family's default config.
    """
    torch, transformers = require_torch()
    tokenizer = tiny_tokenizer()
    family, dims = _random_dims(name) if name.startswith(RANDOM_PREFIX) else (FAMILIES[TINY_MODELS[name]], None)
    config = transformers.AutoConfig.for_model(
        family.model_type, **(dims or {**TINY_COMMON, **family.tiny}), vocab_size=len(tokenizer),
        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    with torch.device("meta"):
        size = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())
    _check_fits(name, size * torch.empty((), dtype=torch_dtype).element_size(), device, torch)
    torch.manual_seed(TINY_SEED)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    _randomise_router_biases(model, family, torch)
    model.generation_config.pad_token_id = 0
    return model, tokenizer


def _check_fits(name: str, need: int, device: str, torch) -> None:
    """Refuse a random model that would not fit, instead of running out of memory while building it."""
    if device.startswith("cuda"):
        have = torch.cuda.mem_get_info(torch.device(device))[0]
    else:
        have = available_ram()
    if have is not None and need > 0.9 * have:
        raise MoesimError(f"{name}: needs {need / 1e9:.1f} GB of weights, {device} has {have / 1e9:.1f} GB free; "
                          "try --dtype bfloat16 or a smaller preset")


def _random_dims(name: str) -> tuple[Family, dict]:
    from moesim.tracegen.models import get_model

    spec = get_model(name[len(RANDOM_PREFIX):])
    family = family_of(spec.architecture, name)
    dense = 1 if family.model_type.startswith("deepseek") else 0  # first_k_dense_replace of the presets
    dims = {"hidden_size": spec.d_model, "num_hidden_layers": spec.num_layers + dense, family.experts_key: spec.num_experts,
            "num_experts_per_tok": spec.top_k, family.d_expert_key: spec.d_expert}
    if dense:
        dims.update(first_k_dense_replace=dense, n_shared_experts=spec.shared_experts)
    return family, dims


def _randomise_router_biases(model, family: Family, torch) -> None:
    """DeepSeek-V3's correction bias starts at zero; give it values so it takes part in routing."""
    if family.model_type != "deepseek_v3":
        return
    gen = torch.Generator().manual_seed(TINY_SEED)
    with torch.no_grad():
        for module in model.modules():
            bias = getattr(module, "e_score_correction_bias", None)
            if bias is not None:
                bias.copy_(torch.randn(bias.shape, generator=gen, dtype=torch.float64).to(bias.dtype) * 0.05)


def tiny_tokenizer():
    """Byte-level tokenizer (256 byte tokens, no merges) built offline, with a chat template."""
    _, transformers = require_torch()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {tok: i for i, tok in enumerate([*SPECIALS, *alphabet])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=SPECIALS[0], bos_token=SPECIALS[1], eos_token=SPECIALS[2])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
