"""The cost model behind one interface (``moesim.sim.cost_model``): a machine's spec sheets, or its measured
``[compute]`` table, give the durations; the two differ in the compute side only, in closed form on the dyadic
machine (every sum exact)."""

from dataclasses import replace

import numpy as np
import pytest

from dyadic import COPY, EXPERT_BYTES, FLOPS, HW, LAT, MEM_BW, MODEL, pre_s
from moesim.errors import MoesimError
from moesim.sim.cost_model import Measured, SpecSheet, cost_model
from moesim.sim.engines import ENGINES
from moesim.sim.machine import MeasuredCompute
from moesim.sim.weights import weights_of

ENGINE = replace(ENGINES["llama.cpp"], layer_us=0.0)
TABLE = MeasuredCompute("toy", layer_s=2.0 ** -12, expert_s=2.0 ** -14, layer_token_s=2.0 ** -16,
                        layer_ctx_s=2.0 ** -24, expert_token_s=2.0 ** -30, moe_launch_s=2.0 ** -18,
                        expert_launch_s=2.0 ** -19, row_s=2.0 ** -10, row_token_s=2.0 ** -20)
WEIGHTS = weights_of(None, MODEL, "bf16")


def test_the_machine_picks_its_cost_model():
    assert type(cost_model(MODEL, HW, WEIGHTS, ENGINE)) is SpecSheet
    assert type(cost_model(MODEL, replace(HW, compute=TABLE), WEIGHTS, ENGINE)) is Measured
    with pytest.raises(MoesimError, match=r"its \[compute\] table was measured for toy, not other"):
        cost_model(replace(MODEL, name="other"), replace(HW, compute=TABLE), WEIGHTS, ENGINE)


def test_the_spec_sheets_give_the_rooflines():
    """One expert on T tokens: its bytes at the HBM rate (the FLOPs are far below); a layer's attention and router
    at one token and ctx KV tokens: ``dyadic.pre_s``; a copy: latency + bytes at the link's rate."""
    c = SpecSheet(MODEL, HW, WEIGHTS, ENGINE).costs(np.array([1.0]), np.array([5.0]), max_expert_tokens=3)
    assert c.by_tokens.tolist() == [EXPERT_BYTES / MEM_BW] * 4
    assert 2.0 * MODEL.expert_params * 3 / FLOPS < EXPERT_BYTES / MEM_BW
    assert c.pre_s.tolist() == [pre_s(5)] and c.copy_s == COPY
    assert (c.moe_launch_s, c.expert_launch_s) == (2 * LAT, 4 * LAT)


def test_a_measured_table_replaces_the_compute_side_and_keeps_the_transfers():
    """By the table's closed forms: an expert on T tokens ``expert_s + expert_token_s (T - 1)``; a layer on T tokens
    and ctx KV tokens ``layer_s + layer_token_s T + layer_ctx_s ctx`` (decode: every KV token read); a row
    ``row_s + row_token_s T``; the launches its own. The copy, the SSD read and the hand-off stay the spec sheet's."""
    tokens, ctx = np.array([1.0, 4.0]), np.array([8.0, 64.0])
    hw = replace(HW, compute=TABLE)
    spec, measured = (model.costs(tokens, ctx, max_expert_tokens=4)
                      for model in (SpecSheet(MODEL, hw, WEIGHTS, ENGINE), Measured(MODEL, hw, WEIGHTS, ENGINE)))
    t = np.arange(5.0)
    assert measured.by_tokens.tolist() == (2.0 ** -14 + 2.0 ** -30 * np.maximum(t - 1, 0)).tolist()
    assert measured.pre_s.tolist() == (2.0 ** -12 + 2.0 ** -16 * tokens + 2.0 ** -24 * ctx).tolist()
    assert measured.row_s.tolist() == (2.0 ** -10 + 2.0 ** -20 * tokens).tolist()
    assert measured.shared_s.tolist() == [0.0, 0.0]
    assert (measured.moe_launch_s, measured.expert_launch_s) == (2.0 ** -18, 2.0 ** -19)
    for same in ("copy_s", "expert_bytes", "cpu_layer_fixed_s"):
        assert getattr(measured, same) == getattr(spec, same)
    assert measured.handoff_s.tolist() == spec.handoff_s.tolist()
    assert measured.pre_s.tolist() != spec.pre_s.tolist()
