"""oracle: prefetch exactly the experts the next layer will use — the upper bound of next-layer prefetching.

The prediction for (token, layer) is the routing itself, issued one layer ahead (for layer 0, at the
previous token's last layer). Nothing real can predict better; it bounds what speculative and
history prefetching can gain.
"""

import numpy as np

from moesim.policies.prefetch import PrefetcherSpec


def predict(trace, params) -> np.ndarray:
    return trace.experts  # read, never written (``moesim.sim.des.predictions``): no copy


SPEC = PrefetcherSpec("oracle", "next", predict=predict)
