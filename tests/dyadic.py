"""A machine and a model every duration of which is a dyadic rational: every rate a power of two (HBM
2^40 B/s, link 2^30 B/s, 2^50 FLOP/s, latencies and launches of 2^-20 s) and the model's dims small
powers of two, so every sum the discrete-event engine forms is exact and tests compare with ``==``
(test_des, test_strategies)."""

import numpy as np

from moesim.sim.machine import GPU, Hardware, Link
from moesim.tracegen.models import ModelSpec
from moesim.tracegen.schema import DECODE, TraceMeta
from moesim.tracegen.trace import Trace

US = 0.95367431640625  # 2^-20 s in microseconds
GPU_ = GPU("test-gpu", hbm_gbps=1099.511627776, tflops=1125.899906842624, hbm_gb=256, mem_eff=1.0, flop_eff=1.0,
           launch_us=US)
LINK = Link("test-link", gbps=1.073741824, efficiency=1.0, latency_us=US)
HW = Hardware("test", GPU_, LINK)
MODEL = ModelSpec("toy", "", "toy", num_layers=2, num_experts=4, top_k=2, d_model=256, d_expert=512, q_dim=256,
                  kv_dim=64)
LAT = 2.0 ** -20
MEM_BW, FLOPS, LINK_BW = 2.0 ** 40, 2.0 ** 50, 2.0 ** 30
EXPERT_BYTES = 3 * 256 * 512 * 2


def trace_of(experts, spec=None, phase=None, model="toy") -> Trace:
    experts = np.asarray(experts, np.int16)
    n, layers, k = experts.shape
    return Trace(TraceMeta(num_layers=layers, num_experts=4, top_k=k, model=model), experts,
                 np.zeros(1, np.int32), np.array([0, n], np.int64), np.arange(n, dtype=np.int32),
                 np.full(n, DECODE, np.int8) if phase is None else np.asarray(phase, np.int8),
                 spec=None if spec is None else np.asarray(spec, np.int16))


def pre_s(ctx: int) -> float:
    """Attention + router of one layer, one token whose sequence holds ``ctx`` KV tokens: memory-bound
    (the FLOP terms are 2^10 smaller) plus 8 launches."""
    d, q, kv, e = 256, 256, 64, 4
    attn = (d * q + 2 * d * kv + q * d) * 2 + 2 * kv * ctx * 2
    return attn / MEM_BW + d * e * 2 / MEM_BW + 8 * LAT


def experts_s(n: int) -> float:
    """The fused MoE kernel over n experts, one token each: n weight reads plus 2 launches."""
    return 2 * LAT + n * (EXPERT_BYTES / MEM_BW)


COPY = LAT + EXPERT_BYTES / LINK_BW
