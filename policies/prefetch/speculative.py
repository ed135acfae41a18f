"""speculative: prefetch what the model's own next router says on this layer's state (Speculating Experts §3.3).

The trace's ``spec`` column holds, for layer l, the experts layer l+1's router picks when applied to
layer l's router input (recorded with ``moesim trace record --speculate``); they are prefetched
while layer l computes. Layer 0 has no speculation (the paper loads it on demand), and neither does
the next token's layer 0.
"""

import numpy as np

from moesim.errors import MoesimError, named
from moesim.policies.prefetch import PrefetcherSpec


def predict(trace, params) -> np.ndarray:
    if trace.spec is None:
        raise MoesimError(f"{named('prefetch', 'speculative')} needs the trace's spec column; record the trace with "
                          f"'moesim trace record --speculate' or use {named('prefetch', 'history')} (or oracle)")
    out = np.full(trace.experts.shape, -1, np.int16)
    out[:, 1:] = trace.spec[:, :-1]
    # a prediction is a set: an expert the column names twice is fetched (and, under commit, run) once
    for j in range(1, out.shape[2]):
        repeated = (out[..., :j] == out[..., j:j + 1]).any(axis=-1)
        out[..., j][repeated] = -1
    return out


SPEC = PrefetcherSpec("speculative", "next", predict=predict)
