"""prompt: MELINOE's prompt-level preload — before decoding, load per layer the Top-C experts of a predictor.

MELINOE §3.2: c^(ℓ,1) = Top-C(Ŷ(q)_ℓ), loaded into the GPU cache before generation; afterwards the
replacement policy runs as usual. The predictor here is the prompt's own routing histogram (how
often each expert was chosen by the prompt tokens at each layer), which needs the trace's prefill
rows. Where this differs: MELINOE's predictor is an MLP on a sentence embedding of the prompt; the
trace schema holds no prompt features, so that predictor is not offered.
"""

import numpy as np

from moesim.errors import MoesimError, named
from moesim.policies.prefetch import PrefetcherSpec
from moesim.tracegen.schema import PREFILL


def scores(trace, params) -> np.ndarray:
    """Per sequence and layer, how often the prompt routed to each expert: float [S, L, E]."""
    prompt = trace.phase == PREFILL
    if not prompt.any():
        raise MoesimError(f"{named('prefetch', 'prompt')} needs prefill rows in the trace (record or import the prompt "
                          f"routing); use {named('prefetch', 'popular')} for a preload without them")
    seq = trace.row_sequence()[prompt]
    n_layers, num_experts = trace.meta.num_layers, trace.meta.num_experts
    experts = trace.experts[prompt].astype(np.int64)
    layer = np.arange(n_layers)[None, :, None]
    flat = (seq[:, None, None] * n_layers + layer) * num_experts + experts
    counts = np.bincount(flat.ravel(), minlength=trace.num_sequences * n_layers * num_experts)
    return counts.reshape(trace.num_sequences, n_layers, num_experts).astype(np.float64)


SPEC = PrefetcherSpec("prompt", "preload", scores=scores)
