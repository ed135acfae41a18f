"""The weights a run holds: the bytes of one routed expert and of every other parameter, and the format each is
stored in (what a CPU kernel unpacks, ``moesim.sim.cpu_rates``)."""

from __future__ import annotations

from typing import NamedTuple

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
    (``recipe_mix``), as a file in it would be."""
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
