"""popular: preload the C most used experts of each layer (Fiddler / DAOP-style placement).

Popularity is the activation count per layer in a training trace (parameter ``train_trace``;
default the simulated trace itself, an oracle for static placement). The same set is loaded before
every batch decodes; the replacement policy may evict it afterwards (pair with ``--policy static``
to pin it instead).
"""

import numpy as np

from moesim.errors import MoesimError
from moesim.policies.prefetch import PrefetcherSpec, TRAIN_TRACE
from moesim.tracegen.stats import layer_counts


def scores(trace, params) -> np.ndarray:
    train = trace if params["train_trace"] is None else params["train_trace"]
    n_layers, num_experts = trace.meta.num_layers, trace.meta.num_experts
    if (train.meta.num_layers, train.meta.num_experts) != (n_layers, num_experts):
        raise MoesimError(f"training trace has {train.meta.num_layers} layers x {train.meta.num_experts} experts, "
                          f"the simulated trace {n_layers} x {num_experts}")
    counts = layer_counts(train.experts, num_experts)
    return np.broadcast_to(counts.astype(np.float64), (trace.num_sequences, n_layers, num_experts))


SPEC = PrefetcherSpec("popular", "preload", scores=scores, params={"train_trace": TRAIN_TRACE})
