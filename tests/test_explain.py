"""``--explain``: a run's decode step part by part (issue 69 item 3): the parts add up to TPOT, each checked against
a closed form where one is knowable, on the command line and in JSON."""

import json

import pytest

import moesim
from moesim.sim.explain import explain
from moesim.sim.hardware import get_hardware
from moesim.tracegen.models import get_model
from moesim.tracegen.trace import bundled_trace_path


def parts(e) -> dict:
    return {line.what: line.value for line in e.step}


def test_every_expert_on_the_gpu_is_its_kernels_and_nothing_waits():
    """Mixtral-8x7B in q4_k with all 8 experts a layer cached on an H100, one kernel per expert: after the warm-up
    every access hits, so the step is attention, the experts' kernels and the head, nothing waits, the GPU's own work
    binds, and the kernels are 32 layers x 2 experts x (the expert's bytes at the memory rate it reaches + a kernel's
    4 launches: gate, up, activation, down)."""
    hw, model = get_hardware("h100"), get_model("mixtral-8x7b")
    r = moesim.simulate(moesim.load_trace(bundled_trace_path()), hardware=hw, policy="lru", capacity=8, dtype="q4_k",
                        kernel="per-expert", warmup=1)
    e = explain(r, model)
    expert_s = 3 * 4096 * 14336 * 4.5 / 8 / (hw.gpu.hbm_gbps * 1e9 * hw.gpu.mem_eff) + 4 * hw.gpu.launch_us * 1e-6
    assert r.hit_rate == 1.0
    assert parts(e)["expert kernels on the GPU"] == pytest.approx(32 * 2 * expert_s * 1e3, rel=1e-9)
    assert parts(e)["waiting on copies, the CPU's experts or the SSD's reads"] == 0
    assert e.binds.startswith("the GPU's own work")
    assert sum(parts(e).values()) == pytest.approx(e.tpot_ms, rel=1e-12) == r.tpot_s * 1e3


@pytest.mark.parametrize("args", [("--policy", "lru", "--capacity", "4"),
                                  ("--strategy", "cpu-experts", "--cpu-layers", "12"),
                                  ("--strategy", "hybrid", "--policy", "lru", "--capacity", "3"),
                                  ("--strategy", "cpu-miss", "--policy", "lru", "--capacity", "3", "--prefetch",
                                   "history")])
def test_sim_run_explain_adds_up_to_tpot_and_names_what_binds(cli, args):
    """Whatever the placement, the parts of a step add up to the run's TPOT; a cache that misses waits on the link
    (gpu-cache: its copies bind), a placement that computes on the CPU says how many experts it did there."""
    code, out, err = cli("sim", "run", bundled_trace_path(), "--hardware", "rtx4090", "--dtype", "q4_k", *args,
                         "--explain", "--json")
    assert code == 0, err
    (result,) = json.loads(out)["results"]
    e = result["explain"]
    assert sum(line["value"] for line in e["step"]) == pytest.approx(result["tpot_s"] * 1e3, rel=1e-9)
    assert e["tpot_ms"] == pytest.approx(result["tpot_s"] * 1e3, rel=1e-12)
    if "--strategy" not in args:
        assert e["binds"] == "the host link's copies"
    else:
        cpu = next(line for line in e["beside"] if line["what"] == "host CPU computing experts")
        assert cpu["value"] == pytest.approx(result["cpu_s"] * 1e3) and cpu["value"] > 0
    assert any(c["what"].startswith("tokens/s, its 80% interval") for c in e["constants"])


def test_plan_explains_a_row_and_refuses_one_it_does_not_have(cli):
    """``plan --explain N``: row N's step, whose parts add up to its TPOT, printed under the plan and in its JSON; a
    row past the last is refused in one line."""
    args = ("plan", "--model", "qwen3-30b-a3b", "--hardware", "rtx4080", "--dtype", "q4_k")
    code, out, err = cli(*args, "--explain", "1", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert sum(line["value"] for line in plan["explain"]["step"]) == pytest.approx(
        plan["rows"][0]["tpot_s"] * 1e3, rel=1e-9)
    code, out, err = cli(*args, "--explain", "1")
    assert code == 0 and "a decode step, part by part" in out and "binds: " in out, err
    code, _, err = cli(*args, "--explain", "99")
    assert code == 1 and err.count("\n") == 1 and "--explain 99: the plan has" in err


def test_a_row_read_from_the_ssd_names_the_reads_and_the_drive():
    """A plan's row that reads experts from the SSD (RAM smaller than the model): beside the step, the SSD's busy time
    is its reads a step times one read (latency + an expert's bytes at the drive's rate), the reads bind where the
    step waits longest on them, and the drive is among the constants, said to be assumed where the machine has none."""
    p = moesim.plan("qwen3-30b-a3b", "ryzen-7950x", ram=12, dtypes=["q4_k"])
    row, result = p.rows[0], p.results[0]
    assert row.from_ssd
    e = explain(result, p.spec)
    steps = result.decode_steps
    reads = result.bytes_ssd / result.costs.expert_bytes / steps
    one_read = 80e-6 + result.costs.expert_bytes / 7.0e9  # the pcie4-nvme preset: 7.0 GB/s, 80 us
    beside = {line.what: line.value for line in e.beside}
    assert beside["SSD reading experts"] == pytest.approx(reads * one_read * 1e3, rel=1e-9)
    assert e.binds == "the SSD's reads" and beside["SSD reading experts"] > beside["host CPU computing experts"]
    assert {line.what: line.value for line in e.constants}["SSD pcie4-nvme, assumed: its read rate"] == 7.0
    assert sum(parts(e).values()) == pytest.approx(e.tpot_ms, rel=1e-9)
