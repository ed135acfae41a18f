"""Generated inputs several test modules share (hypothesis strategies)."""

import numpy as np
from hypothesis import strategies as st

from moesim.tracegen.schema import DECODE, PREFILL, TraceMeta
from moesim.tracegen.trace import Trace


@st.composite
def traces(draw, prompt: bool = False):
    """A small trace: 1-3 layers, 2-7 experts, top-1..3, 1-3 sequences of 1-9 tokens, routing drawn
    from a skewed distribution so that hits and evictions both happen; a random ``spec`` column
    (-1 or a wrong or right guess), and with ``prompt`` 0-3 prompt rows per sequence."""
    layers, experts = draw(st.integers(1, 3)), draw(st.integers(2, 7))
    k = draw(st.integers(1, min(3, experts)))
    lengths = draw(st.lists(st.integers(1, 9), min_size=1, max_size=3))
    prompts = [draw(st.integers(0, 3)) if prompt else 0 for _ in lengths]
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    rows = sum(lengths) + sum(prompts)
    weights = rng.dirichlet(np.full(experts, 0.5))
    routed = np.array([[rng.choice(experts, k, replace=False, p=weights) for _ in range(layers)]
                       for _ in range(rows)], np.int16).reshape(rows, layers, k)
    spec = rng.integers(-1, experts, routed.shape).astype(np.int16)
    steps = np.concatenate([np.arange(p + n) for p, n in zip(prompts, lengths)]).astype(np.int32)
    phase = np.concatenate([[PREFILL] * p + [DECODE] * n for p, n in zip(prompts, lengths)]).astype(np.int8)
    offsets = np.concatenate([[0], np.cumsum(np.add(prompts, lengths))]).astype(np.int64)
    meta = TraceMeta(num_layers=layers, num_experts=experts, top_k=k, model="toy")
    return Trace(meta, routed, np.arange(len(lengths), dtype=np.int32), offsets, steps, phase, spec=spec)
