"""The weights a run holds: the bytes of one routed expert and of every other parameter, and the format each is
stored in (what a CPU kernel unpacks, ``moesim.sim.cpu_rates``)."""

from __future__ import annotations

from typing import NamedTuple

from moesim.errors import MoesimError, named
from moesim.tracegen.model_spec import BYTES_PER_PARAM, ModelSpec, recipe_mix
from moesim.tracegen.models import format_of
from moesim.tracegen.trace import Trace


class Weights(NamedTuple):
    other_bpp: float        # bytes per non-expert parameter
    expert_bytes: float     # one routed expert
    expert_format: str      # a ``moesim.tracegen.model_spec.FORMATS`` name (or a GGUF type the table lacks)
    other_format: str
    expert_mix: tuple = ()  # a model file's formats: (format, share of the bytes) pairs; () all one format
    other_mix: tuple = ()


def weights_of(trace: Trace | None, model: ModelSpec, dtype: str | None, other_dtype: str | None = None) -> Weights:
    """A format asked for (``dtype`` for the experts, ``other_dtype`` for the rest) decides; else what a model file
    stores (``ModelSpec.stored_*``); else what the trace recorded of its own model; else bf16. Experts without a
    format of their own are stored like the other weights. A recipe asked for (Q4_K_M) is priced as its formats
    (``recipe_mix``), as a file in it would be. A model file whose storage moesim cannot price (``unpriced``) needs
    both formats asked for."""
    why = unpriced(model)
    if why and (dtype is None or other_dtype is None):
        raise MoesimError(f"{why}: name the weights' formats ({named('dtype')} and {named('other_dtype')})")
    own = trace.meta.expert_bytes if trace is not None and trace.meta.model == model.name and model.kind == "moe" \
        else None
    other_mix = ()
    if other_dtype is not None:
        bpp, other, other_mix = BYTES_PER_PARAM[other_dtype], other_dtype, recipe_mix(other_dtype)
    elif model.stored_other_bytes:
        bpp, other, other_mix = model.stored_other_bytes / model.non_expert_params, model.other_format, model.other_mix
    elif own and dtype is None:
        bpp = float(trace.meta.bytes_per_param or 2.0)
        other = format_of(1, bpp)
    else:
        bpp, other = BYTES_PER_PARAM["bf16"], "bf16"
    if dtype is not None:
        return Weights(bpp, float(model.expert_params * BYTES_PER_PARAM[dtype]), dtype, other, recipe_mix(dtype),
                       other_mix)
    if model.stored_expert_bytes:
        return Weights(bpp, float(model.stored_expert_bytes), model.expert_format, other, model.expert_mix, other_mix)
    if own:
        return Weights(bpp, float(own), format_of(model.expert_params, own), other, (), other_mix)
    return Weights(bpp, float(model.expert_params * bpp), other, other, other_mix, other_mix)


def unpriced(model: ModelSpec) -> str:
    """Why a model file's own storage cannot be a run's formats (its name, with no bytes: ``ModelSpec.storage``); ""
    where it can, or where it names none."""
    if not model.storage or model.stored_expert_bytes:
        return ""
    return (f"{model.file or model.name} stores its weights as {model.storage}, a quantization moesim has no format "
            "for (it reads a GGUF's types, and mxfp4, fp8, and AWQ or GPTQ of 4 or 8 bits from a config.json)")
