"""The papers' reference points, reproduced by the engine with the tolerance each deserves.

docs/simulator.md gives the commands, the numbers and, where the model does not reproduce a
point, why.
"""

from dataclasses import replace

import pytest

from moesim import simulate
from moesim.sim.hardware import get_hardware
from moesim.tracegen.models import get_model
from moesim.tracegen.synth import synth_trace


def decode_trace(model, tokens=8):
    return synth_trace(layers=model.num_layers, experts=model.num_experts, top_k=model.top_k, sequences=1,
                       tokens=tokens, seed=0, model=model.name, meta=model.trace_meta())


def per_expert_copy_s(model, hw):
    r = simulate(decode_trace(model, 2), model=model, hardware=hw, policy="lru", capacity=0)
    return r.copy_s / (model.num_layers * model.top_k)


def test_melinoe_mixtral_expert_over_pcie5_takes_5_to_6_ms():
    """MELINOE §4.3: "even with PCIe 5 x16, a single expert transfer for Mixtral-8x7B without
    quantization can take 5-6 ms" — 352 MB at the nominal 64 GB/s. The preset's effective 85%
    of nominal (what pinned copies reach) gives 6.5 ms."""
    mixtral, h100 = get_model("mixtral-8x7b"), get_hardware("h100")
    nominal = per_expert_copy_s(mixtral, replace(h100, link=replace(h100.link, efficiency=1.0)))
    assert 5e-3 <= nominal <= 6e-3
    assert per_expert_copy_s(mixtral, h100) == pytest.approx(6.49e-3, abs=0.01e-3)


@pytest.mark.parametrize("context, copy_share, cut", [(1024, 0.88, 0.09), (65536, 0.84, 0.14)])
def test_speculating_experts_qwen3_on_a6000(context, copy_share, cut):
    """Speculating Experts §5.1: Qwen3-30B-A3B, A6000, PCIe 4, batch 1. On-demand loading: copy is
    84-88% of TPOT (less at longer context); next-layer prefetch cuts TPOT by 9-14% (more at longer
    context). The engine lands within 5 points of each end (it has no idle gaps: launch and sync
    overheads count as compute), and moves the same way with context."""
    qwen, a6000 = get_model("qwen3-30b-a3b"), get_hardware("a6000")
    trace = decode_trace(qwen)
    on_demand = simulate(trace, model=qwen, hardware=a6000, policy="lru", capacity=0, context=context)
    prefetch = simulate(trace, model=qwen, hardware=a6000, policy="lru", capacity=0, prefetch="oracle", context=context)
    assert on_demand.copy_s / on_demand.tpot_s == pytest.approx(copy_share, abs=0.05)
    assert 1 - prefetch.tpot_s / on_demand.tpot_s == pytest.approx(cut, abs=0.05)
    # eq. 1: the saving is min(copy, compute) per layer, here the compute
    assert on_demand.tpot_s - prefetch.tpot_s == pytest.approx(on_demand.compute_s, rel=0.02)


@pytest.mark.parametrize("size, paper_ratio", [("160m", 57 / 0.037), ("410m", 201 / 0.098)])
def test_mole_moves_a_fraction_of_moe_per_token(size, paper_ratio):
    """MoLE Table 3: parameters loaded per token, MoE-10E (worst case: no reuse) over MoLE-4E, about
    1500x at 160M and 2000x at 410M. The engine's bytes over the link, per token, give 2d: 1536x, 2048x."""
    moe, mole = get_model(f"moe-{size}-10e"), get_model(f"mole-{size}-4e")
    trace = decode_trace(moe, 4)
    hw = get_hardware("rtx4090")
    moe_bytes = simulate(trace, model=moe, hardware=hw, policy="lru", capacity=0).bytes_h2d
    mole_bytes = simulate(trace, model=mole, hardware=hw).bytes_h2d  # no cache: lookup rows
    assert moe_bytes / mole_bytes == 2 * moe.d_model
    assert moe_bytes / mole_bytes == pytest.approx(paper_ratio, rel=0.02)
    assert moe_bytes / trace.decode_steps / 2 == pytest.approx({"160m": 57e6, "410m": 201e6}[size], rel=0.01)
