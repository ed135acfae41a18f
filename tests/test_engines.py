"""Engines as entities (issue 66): the engine a run is named for is the one whose figures time it, and an engine is
one module (``moesim.sim.engines``)."""

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from moesim.experiments.plan import CANDIDATES, run_with
from moesim.sim import engines
from moesim.sim.accuracy import OPERATIONS_BAND
from moesim.sim.config import Config
from moesim.sim.engines import ENGINES, UNNAMED, engine_for
from moesim.sim.machine import PER_SOCKET
from moesim.sim.strategies import STRATEGIES
from moesim.tracegen.models import get_model
from moesim.tracegen.trace import bundled_trace_path

# two sockets of 8 cores, each with its own DRAM, under an RTX 4090: where how an engine uses sockets shows
TWO_SOCKETS = """name = "two-socket"
gpu = "rtx4090"
link = "pcie4"

[cpu]
name = "2 x 8 cores"
cores = 8
ghz = 3.0
isa = "avx2"
dram_gbps = 100
ram_gb = 512
sockets = 2
"""


def test_every_engine_runs_registered_strategies_and_each_plan_candidate_names_one():
    """Each engine runs strategies that exist; each strategy at its defaults, and each candidate a plan ranks, is
    timed as a named engine, not as ``UNNAMED``; gpu-cache is Mixtral-offloading's without a prefetcher and
    MoE-Infinity's with one."""
    assert all(set(e.runs) <= set(STRATEGIES) for e in ENGINES.values())
    for name in STRATEGIES:
        assert engine_for(Config.build(strategy=name)) is not UNNAMED, name
    for strategy, settings in CANDIDATES:
        config = Config.build(strategy=strategy, **{k: v for k, v in settings.items() if v != "auto"})
        assert engine_for(config) is not UNNAMED, (strategy, settings)
    assert engine_for(Config.build(strategy="gpu-cache")).name == "Mixtral-offloading"
    assert engine_for(Config.build(strategy="gpu-cache", prefetch="history")).name == "MoE-Infinity"


def test_hybrid_without_a_cache_is_named_for_the_engine_that_times_it():
    """hybrid at capacity 0 is timed with kTransformers' figures (a pool and a copy per socket, the shared experts
    beside the routed ones, 3 barriers a CPU layer), so its row names kTransformers, whose defaults run it (it used to
    name llama.cpp's --cpu-moe, which cpu-experts times with llama.cpp's own); a cache that changes is HybriMoE's."""
    none = Config.build(strategy="hybrid", capacity=0)
    assert engine_for(none, named=True) is ENGINES["kTransformers"] and ENGINES["kTransformers"].numa == PER_SOCKET
    assert engine_for(none) == replace(ENGINES["kTransformers"], layer_us=0.0)  # sim run: its operations alone
    assert engine_for(Config.build(strategy="hybrid", policy="static", capacity=2)).name == "kTransformers"
    assert engine_for(Config.build(strategy="hybrid", policy="lru", capacity=2)).name == "HybriMoE"
    spec = get_model("mixtral-8x7b")
    assert ENGINES["kTransformers"].command({}, none, spec) == ""
    assert ENGINES["kTransformers"].command({}, none.replace(threads=6), spec) == "--cpu_infer 6"
    assert run_with(SimpleNamespace(engine="kTransformers", engine_flags="")) == "kTransformers (its defaults)"
    assert ENGINES["HybriMoE"].command({}, none.replace(threads=6), spec) == "none: research code"


def test_an_engine_is_one_module_registered(cli, tmp_path, monkeypatch):
    """The recipe in docs/architecture.md, followed: an engine written in this test — llama.cpp's figures but a thread
    pool and a copy of the experts per socket, and its own options — registered ahead of llama.cpp for cpu-experts,
    times ``sim run`` and names ``plan``'s rows with no other change. Its runs hold one more copy of the CPU layers'
    experts (two sockets), and read both sockets' DRAM, so they are faster; with llama.cpp's one pool it gives
    llama.cpp's numbers exactly."""
    machine = tmp_path / "two.toml"
    machine.write_text(TWO_SOCKETS)
    trace = bundled_trace_path()
    llama = ENGINES["llama.cpp"]
    toy = replace(llama, name="toy", source="this test", numa=PER_SOCKET, threads_flag="--toy-threads",
                  flags=lambda params, config, model, gpu: f"--toy-cpu-layers {params['cpu_layers']}")
    run = ("sim", "run", trace, "--hardware", machine, "--strategy", "cpu-experts", "--cpu-layers", "20", "--dtype",
           "q4_k", "--json")

    def result(*args):
        code, out, err = cli(*args)
        assert code == 0, err
        return json.loads(out)

    plain = result(*run)["results"][0]
    assert plain["timed_as"] == "llama.cpp" and plain["engine"] == "auto"
    # a spec sheet's machine: the tokens/s comes with its 80% interval (moesim.sim.accuracy)
    assert (plain["tokens_per_s_low"], plain["tokens_per_s_high"]) == pytest.approx(
        (plain["tokens_per_s"] * OPERATIONS_BAND[0], plain["tokens_per_s"] * OPERATIONS_BAND[1]), rel=1e-12)
    one_pool = replace(toy, numa=llama.numa)
    monkeypatch.setattr(engines, "ENGINES", {"toy": one_pool, **ENGINES})
    same = result(*run)["results"][0]
    assert same["timed_as"] == "toy" and same["tokens_per_s"] == plain["tokens_per_s"] and \
        same["ram_gb"] == plain["ram_gb"]
    monkeypatch.setattr(engines, "ENGINES", {"toy": toy, **ENGINES})
    mine = result(*run)["results"][0]
    spec = get_model("mixtral-8x7b")
    experts = 20 * spec.num_experts * spec.expert_params * 4.5 / 8 / 2 ** 30  # q4_k: 4.5 bits a weight
    assert mine["timed_as"] == "toy" and mine["ram_gb"] == pytest.approx(plain["ram_gb"] + experts, rel=1e-9)
    assert mine["tokens_per_s"] > plain["tokens_per_s"]
    rows = result("plan", "--model", "mixtral-8x7b", "--hardware", machine, "--dtype", "q4_k", "--threads", "4",
                  "--json")["rows"]
    placed = next(r for r in rows if r["strategy"] == "cpu-experts")
    assert placed["engine"] == "toy"
    assert placed["engine_flags"] == f"--toy-cpu-layers {placed['cpu_layers']} --toy-threads 4"


def test_moesim_engines_lists_each_engine_with_its_figures(cli):
    """``moesim engines --json`` gives every registered engine, in order, with the strategies it runs and the figures
    that time them."""
    code, out, err = cli("engines", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["name"] for r in rows] == list(ENGINES)
    kt = next(r for r in rows if r["name"] == "kTransformers")
    assert kt["runs"] == ["hybrid"] and kt["numa"] == PER_SOCKET and kt["cpu_ops"] == [3, 0] and kt["computes_on_cpu"]
    assert not next(r for r in rows if r["name"] == "Mixtral-offloading")["computes_on_cpu"]


def test_a_plan_row_is_timed_as_its_engine_and_sim_run_as_the_placement():
    """A plan's row names its engine and includes the framework time learned for it (``layer_us``): its TPOT is the
    same placement's in ``sim run`` plus that time on each of the model's MoE layers, and its interval is the named
    band; ``sim run`` times the placement's operations alone, with the operations' band."""
    import moesim
    from moesim.sim.accuracy import FRAMEWORK_BAND, OPERATIONS_BAND
    from moesim.sim.des import simulate_des

    p = moesim.plan("mixtral-8x7b", "rtx4090", dtypes=("q4_k",))
    row, result = next((r, res) for r, res in zip(p.rows, p.results) if r.engine == "Mixtral-offloading")
    plain = simulate_des(p.simulated, result.config, p.spec, p.machine_spec)
    layer_s = ENGINES["Mixtral-offloading"].layer_us * 1e-6
    assert layer_s > 0 and row.tpot_s == pytest.approx(plain.tpot_s + p.spec.num_layers * layer_s, rel=1e-9)
    assert row.tokens_per_s.low == pytest.approx(row.tokens_per_s.mid * FRAMEWORK_BAND[0], rel=1e-12)
    assert plain.timed_as == "Mixtral-offloading"
    assert plain.tokens_per_s_high == pytest.approx(plain.tokens_per_s * OPERATIONS_BAND[1], rel=1e-12)


def test_sim_run_times_a_named_engine_as_plan_does(cli):
    """``--engine NAME`` times a run as that engine, its learned framework time and its kernel kind included (a plan
    row's number): ``layer_us`` more on each MoE layer of each token than ``auto`` with that kernel; an engine that does not run the strategy, or
    lacks the mechanism the settings ask for, is refused in one line; ``auto`` keeps the ids of runs stored before the
    setting existed."""
    from moesim.sim.accuracy import FRAMEWORK_BAND
    from moesim.sim.config import config_id

    trace = bundled_trace_path()
    run = ("sim", "run", trace, "--hardware", "rtx4090", "--strategy", "gpu-cache", "--policy", "lru", "--capacity",
           "4", "--dtype", "q4_k", "--json")
    results = []
    for engine, kernel in (("auto", ("--kernel", "per-expert")), ("Mixtral-offloading", ())):
        code, out, err = cli(*run, "--engine", engine, *kernel)
        assert code == 0, err
        results.append(json.loads(out)["results"][0])
    auto, named = results
    assert named["kernel"] == "per-expert"  # the engine runs its own kernel kind, one per expert
    layers = get_model("mixtral-8x7b").num_layers
    assert named["timed_as"] == auto["timed_as"] == "Mixtral-offloading" and named["engine"] == "Mixtral-offloading"
    assert named["tpot_s"] == pytest.approx(auto["tpot_s"] + layers * ENGINES["Mixtral-offloading"].layer_us * 1e-6,
                                            rel=1e-9)
    assert named["tokens_per_s_high"] == pytest.approx(named["tokens_per_s"] * FRAMEWORK_BAND[1], rel=1e-12)
    assert named["framework_us"] == ENGINES["Mixtral-offloading"].layer_us and auto["framework_us"] == 0
    code, _, err = cli(*run, "--engine", "kTransformers")
    assert code == 1 and err.count("\n") == 1 and "--engine kTransformers does not run strategy gpu-cache" in err
    code, _, err = cli(*run, "--engine", "Mixtral-offloading", "--prefetch", "history")
    assert code == 1 and "(its cache is LRU and fetches nothing ahead); MoE-Infinity does" in err
    config = Config.build(strategy="gpu-cache")
    assert config_id("des", "t", config) == config_id("des", "t", {k: v for k, v in config.flat().items()
                                                                    if k != "engine"})
    assert config_id("des", "t", config.replace(engine="Mixtral-offloading")) != config_id("des", "t", config)


def test_a_kernel_given_to_an_engine_that_runs_its_own_is_refused(cli):
    """Mixtral-offloading runs one kernel per expert whatever ``--kernel`` says: a kernel typed beside it is read by
    nothing, one line, exit 1."""
    code, _, err = cli("sim", "run", bundled_trace_path(), "--hardware", "rtx4090", "--policy", "lru", "--capacity",
                       "4", "--engine", "Mixtral-offloading", "--kernel", "fused")
    assert code == 1 and err.count("\n") == 1
    assert "--kernel: engine Mixtral-offloading runs its own kind of expert kernel (per-expert)" in err
