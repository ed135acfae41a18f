"""Engines as entities (issue 66): the engine a run is named for is the one whose figures time it, and an engine is
one module (``moesim.sim.engines``)."""

import json
from dataclasses import replace

import pytest

import moesim
from moesim.experiments.plan import CANDIDATES
from moesim.sim import engines
from moesim.errors import MoesimError
from moesim.sim.accuracy import OPERATIONS_BANDS
from moesim.sim.config import Config
from moesim.sim.engines import ENGINES, UNNAMED, Launch, engine_for, engines_for
from moesim.sim.hardware import get_hardware
from moesim.sim.machine import DISTRIBUTE, ONE_POOL, PER_SOCKET
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


def test_a_cache_only_research_code_runs_is_timed_as_melinoe_s_runtime():
    """A per-layer GPU cache under LFU and no prefetcher (MELINOE's tables), which neither Mixtral-offloading (LRU
    only) nor MoE-Infinity (it prefetches) runs, is MELINOE's runtime: named for it, it takes the framework time
    learned for it; its code has no release, so a plan never offers it, and it has no command."""
    config = Config.build(strategy="gpu-cache", policy="lfu", capacity=4)
    melinoe = ENGINES["MELINOE runtime"]
    assert engine_for(config).name == "MELINOE runtime" and engine_for(config).layer_us == 0.0
    assert engine_for(config, as_engine=True) is melinoe and melinoe.layer_us > 0 and melinoe.layer_loop == "python"
    assert melinoe.refuses(get_model("olmoe-1b-7b"), "bf16") == "research code with no release to run"
    assert engine_for(Config.build(strategy="gpu-cache", policy="lfu", capacity=4, scope="global")).name == UNNAMED.name


def test_hybrid_without_a_cache_is_named_for_the_engine_that_times_it():
    """hybrid at capacity 0 is timed with kTransformers' figures (a pool a socket, each its share of every expert, the shared experts
    beside the routed ones, 3 barriers a CPU layer), so its row names kTransformers, whose defaults run it (it used to
    name llama.cpp's --cpu-moe, which cpu-experts times with llama.cpp's own); a cache that changes is HybriMoE's."""
    none = Config.build(strategy="hybrid", capacity=0)
    assert engine_for(none, as_engine=True) is ENGINES["kTransformers"] and ENGINES["kTransformers"].numa == DISTRIBUTE
    # sim run: its operations alone
    assert engine_for(none) == replace(ENGINES["kTransformers"], layer_us=0.0, prompt_growth=0.0)
    assert engine_for(Config.build(strategy="hybrid", policy="static", capacity=2)).name == "kTransformers"
    assert engine_for(Config.build(strategy="hybrid", policy="lru", capacity=2)).name == "HybriMoE"
    spec = get_model("qwen3-30b-a3b")
    launch = Launch(spec, "q4_k", none, 0, True, 6, 2, 640, 0.9)
    assert ENGINES["kTransformers"].command(launch) == (
        "python -m sglang.launch_server --model Qwen/Qwen3-30B-A3B --kt-weight-path Qwen3-30B-A3B-Q4_K.gguf "
        "--kt-method LLAMAFILE --kt-cpuinfer 6 --kt-threadpool-count 2 --kt-num-gpu-experts 0 --max-total-tokens 640")
    assert ENGINES["HybriMoE"].command(launch).startswith("none: research code")


def test_a_run_lays_its_threads_over_the_sockets_as_its_engine_can():
    """``numa`` sets the layout the engine runs (its own unless set): llama.cpp's and ik_llama.cpp's --numa
    distribute, kTransformers with one thread pool (and none for the archived build's copy per socket); an engine named
    for a layout it has no flag for is refused, as is one no engine that runs the strategy has; a run named for no
    engine is timed as the first that has it."""
    spread = Config.build(strategy="cpu-experts", numa="distribute")
    assert engine_for(spread) == replace(ENGINES["llama.cpp"], numa=DISTRIBUTE, layer_us=0.0, gpu_layer_us=(),
                                         prompt_growth=0.0)
    assert engine_for(Config.build(strategy="cpu-experts", engine="ik_llama.cpp", numa="distribute")).numa == DISTRIBUTE
    one = Config.build(strategy="hybrid", capacity=0, numa="one-pool")
    assert engine_for(one, as_engine=True) == replace(ENGINES["kTransformers"], numa=ONE_POOL)
    assert engine_for(Config.build(strategy="hybrid", capacity=0, numa="auto"), as_engine=True) is ENGINES["kTransformers"]
    with pytest.raises(MoesimError, match=r"^\[hardware\] numa per-socket: llama\.cpp lays its threads out as one-pool or "
                                          r"distribute; the engines that run per-socket: kTransformers, HybriMoE"):
        Config.build(strategy="cpu-experts", engine="llama.cpp", numa="per-socket")
    per_socket = Config.build(strategy="cpu-experts", numa="per-socket")
    assert engines_for(per_socket) == []
    two = replace(get_hardware("rtx4090"), cpu=replace(get_hardware("rtx4090").cpu, sockets=2))
    with pytest.raises(MoesimError, match=r"^numa='per-socket': no engine that runs strategy cpu-experts lays its threads "
                                          r"out so \(llama\.cpp: one-pool or distribute; ik_llama\.cpp: one-pool or "
                                          r"distribute\)$"):
        moesim.simulate(bundled_trace_path(), hardware=two, strategy="cpu-experts", cpu_layers=4, numa="per-socket")
    launch = Launch(get_model("qwen3-30b-a3b"), "q4_k", one, 0, True, 6, 2, 640, 0.9, numa=PER_SOCKET)
    assert ENGINES["kTransformers"].command(launch).startswith("none: kt-kernel splits each expert over the NUMA nodes")


def test_each_engine_writes_the_command_of_a_placement_and_says_what_it_runs():
    """A command is the whole line its engine takes: llama.cpp's server with the GGUF, the layers whose experts stay on
    the CPU (``--cpu-moe`` for all of them), the threads where it computes there and the context memory was sized for
    (``-np`` sequences sharing it); kTransformers' N experts a layer from a pool of L·N + r (the r left over unused),
    placed by frequency; Mixtral-offloading's OffloadConfig; MoE-Infinity's server with the share of GPU memory
    (rounded down). An engine refuses a family or a format it does not run, and research code has no release."""
    mixtral, qwen = get_model("mixtral-8x7b"), get_model("qwen3-30b-a3b")
    llama, kt = ENGINES["llama.cpp"], ENGINES["kTransformers"]
    batch2 = Config.build(strategy="cpu-experts", batch=2)
    assert llama.command(Launch(mixtral, "q8_0", batch2, 4, True, 8, 1, 700, 0.5)) == \
        "llama-server -m Mixtral-8x7B-v0.1-Q8_0.gguf -ngl 99 --n-cpu-moe 4 -t 8 -c 1400 -np 2"
    assert llama.command(Launch(mixtral, "q8_0", Config(), 32, True, 8, 1, 700, 0.5)).endswith("--cpu-moe -t 8 -c 700")
    assert llama.command(Launch(mixtral, "bf16", Config(), 0, False, 8, 1, 700, 0.0)) == \
        "llama-server -m Mixtral-8x7B-v0.1-BF16.gguf -ngl 0 --no-op-offload -t 8 -c 700"
    spread = Config.build(strategy="cpu-experts", numa="distribute")
    assert llama.command(Launch(mixtral, "q8_0", spread, 4, True, 8, 2, 700, 0.5, numa=DISTRIBUTE)) == \
        "llama-server -m Mixtral-8x7B-v0.1-Q8_0.gguf -ngl 99 --n-cpu-moe 4 -t 8 --numa distribute -c 700"
    one_pool = Launch(qwen, "q4_k", Config.build(strategy="hybrid", capacity=0), 0, True, 6, 2, 640, 0.9, numa=ONE_POOL)
    assert "--kt-cpuinfer 6 --kt-threadpool-count 1 " in kt.command(one_pool)
    pool = Config.build(strategy="hybrid", policy="static", scope="global", capacity=48 * 116 + 47)
    assert "--kt-num-gpu-experts 116 --kt-expert-placement-strategy frequency --init-expert-location expert-counts.json" in \
        kt.command(Launch(qwen, "bf16", pool, 0, True, 16, 1, 640, 1.0))
    assert "--kt-weight-path Qwen/Qwen3-30B-A3B --kt-method BF16" in kt.command(Launch(qwen, "bf16", pool, 0, True, 16,
                                                                                       1, 640, 1.0))
    cache = Config.build(strategy="gpu-cache", policy="lru", capacity=3)
    assert ENGINES["Mixtral-offloading"].command(Launch(mixtral, "int2", cache, 0, True, 16, 1, 640, 1.0)) == \
        "OffloadConfig(main_size=96, offload_size=160, buffer_size=4, offload_per_layer=5)"
    assert ENGINES["MoE-Infinity"].command(Launch(mixtral, "bf16", cache, 0, True, 16, 1, 640, 0.979)).endswith(
        "--model mistralai/Mixtral-8x7B-v0.1 --offload-dir ./offload --device-memory-ratio 0.97")
    assert llama.refuses(qwen, "q4_k") == "" and kt.refuses(qwen, "q4_k") == ""
    assert kt.refuses(mixtral, "q4_k").startswith("kTransformers runs no mixtral model")
    assert ENGINES["Fiddler"].refuses(mixtral, "q4_k") == "Fiddler runs experts in bf16, f16 only"
    assert ENGINES["Fiddler"].refuses(mixtral, "bf16") == ""
    assert ENGINES["HOBBIT (llama.cpp fork)"].refuses(mixtral, "bf16") == "research code with no release to run"
    # a GGUF's own storage, whatever types it holds, is run by the engines that load GGUFs as they are
    assert llama.refuses(qwen, "iq2_xxs", own_gguf=True) == "" and llama.refuses(qwen, "iq2_xxs") != ""
    assert ENGINES["MoE-Infinity"].refuses(qwen, "iq2_xxs", own_gguf=True) != ""
    # a GGUF's deepseek2 architecture (DeepSeek-V2, V3, R1, Kimi-K2) is the family the engines list as V3's
    deepseek = replace(get_model("deepseek-v3"), architecture="deepseek2")
    assert deepseek.family == "deepseek_v3" and kt.refuses(deepseek, "q4_k", own_gguf=True) == ""


def test_ik_llama_cpp_fuses_a_cpu_layers_experts_and_offloads_by_tokens_an_expert(monkeypatch):
    """ik_llama.cpp runs llama.cpp's placement with its fused MoE: 3 barriers a CPU layer's routed experts whatever
    top_k, against llama.cpp's 5 + k, so a decode token on Mixtral (k = 2) with all 32 layers' experts on the CPU
    takes exactly 32 x 4 barriers less; its CUDA backend runs a CPU layer's experts on the GPU for a row where each
    expert averages 32 tokens (ceil(32 E / k): Mixtral 128, Qwen3-30B-A3B 512), so a 100-token prompt stays on the
    CPU (as if it never offloaded) and a 128-token one does not; its command is llama.cpp's, run from its own build,
    with its own switch for a CUDA build's products on a run without the GPU."""
    from moesim import simulate
    from moesim.sim.hardware import get_hardware

    ik, llama = ENGINES["ik_llama.cpp"], ENGINES["llama.cpp"]
    assert [ik.expert_barriers(k) for k in (1, 2, 8)] == [3, 3, 3] and llama.expert_barriers(8) == 13
    mixtral, qwen = get_model("mixtral-8x7b"), get_model("qwen3-30b-a3b")
    assert ik.offload_tokens(mixtral.num_experts, mixtral.top_k) == 128
    assert ik.offload_tokens(qwen.num_experts, qwen.top_k) == 512 and llama.offload_tokens(128, 8) == 32
    trace, all_cpu = bundled_trace_path(), {"strategy": "cpu-experts", "cpu_layers": 32}
    tpot = {e: simulate(trace, hardware="rtx4090", engine=e, prompt=0, **all_cpu).tpot_s
            for e in ("llama.cpp", "ik_llama.cpp")}
    barrier = get_hardware("rtx4090").cpu.barrier_s()
    assert tpot["llama.cpp"] - tpot["ik_llama.cpp"] == pytest.approx(32 * (7 - 3) * barrier, rel=1e-9)

    def ttft(prompt):
        return simulate(trace, hardware="rtx4090", engine="ik_llama.cpp", prompt=prompt, **all_cpu).ttft_s

    offloading = {prompt: ttft(prompt) for prompt in (127, 128)}
    monkeypatch.setitem(engines.ENGINES, "ik_llama.cpp", replace(ik, offload_min_tokens=None))
    assert ttft(127) == offloading[127] and ttft(128) != offloading[128]
    # without a GPU every layer is the CPU's: the same barriers fewer, the rest of each layer's counted alike
    cpu = {e: simulate(trace, hardware="ryzen-7950x", engine=e, prompt=0, strategy="cpu-experts").tpot_s
           for e in ("llama.cpp", "ik_llama.cpp")}
    barrier = get_hardware("ryzen-7950x").cpu.barrier_s()
    assert cpu["llama.cpp"] - cpu["ik_llama.cpp"] == pytest.approx(32 * (7 - 3) * barrier, rel=1e-9)
    cpu_only = Launch(mixtral, "bf16", Config(), 0, False, 8, 1, 700, 0.0)
    assert ik.command(cpu_only) == "./build/bin/llama-server -m Mixtral-8x7B-v0.1-BF16.gguf -ngl 0 -op -1,0 -t 8 -c 700"
    assert ik.command(replace(cpu_only, gpu=True, cpu_layers=4)) == \
        "./build/bin/" + llama.command(replace(cpu_only, gpu=True, cpu_layers=4))
    assert ik.refuses(get_model("olmoe-1b-7b"), "q4_k").startswith("ik_llama.cpp runs no olmoe model")
    # its README: CPU and CUDA are its only working backends
    assert ik.refuses(mixtral, "q4_k", vendor="amd") == "ik_llama.cpp runs on nvidia GPUs only, not amd's"
    assert ik.refuses(mixtral, "q4_k", vendor="nvidia") == ik.refuses(mixtral, "q4_k") == ""


def test_a_plan_gives_a_row_per_engine_the_user_has_that_runs_a_placement(cli):
    """``--engine llama.cpp,ik_llama.cpp``: the placement both run is planned once for each, every row naming its
    engine and its command; the default, every engine, times each placement as the first that runs it (llama.cpp)."""
    args = ("plan", "--model", "qwen3-30b-a3b", "--hardware", "rtx4080", "--dtype", "q4_k", "--json")
    code, out, err = cli(*args, "--engine", "llama.cpp,ik_llama.cpp")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    by_engine = {(r["strategy"], r["engine"], r["gpu"]): r for r in rows}  # gpu false: the GPU left out
    assert {(engine, gpu) for _, engine, gpu in by_engine} == {(e, g) for e in ("llama.cpp", "ik_llama.cpp")
                                                                for g in (True, False)}
    ik, llama = by_engine[("cpu-experts", "ik_llama.cpp", True)], by_engine[("cpu-experts", "llama.cpp", True)]
    assert ik["cpu_layers"] == llama["cpu_layers"] > 0 and ik["tokens_per_s"] > llama["tokens_per_s"]
    assert "-ngl 0 -op -1,0" in by_engine[("cpu-experts", "ik_llama.cpp", False)]["command"]
    assert len(rows) == 4 and ik["command"] == "./build/bin/" + llama["command"]
    code, out, err = cli(*args)
    assert code == 0 and "ik_llama.cpp" not in {r["engine"] for r in json.loads(out)["rows"]}, err
    # a candidate the two cannot run (a model larger than the host's RAM), and one row that stands for both
    code, out, err = cli("plan", "--model", "deepseek-v3", "--hardware", "rtx4090", "--dtype", "q4_k", "--json",
                         "--engine", "llama.cpp,ik_llama.cpp")
    skipped = [(s["strategy"], s["reason"]) for s in json.loads(out)["skipped"]]
    assert code == 0 and len(skipped) == len(set(skipped)) == 2, skipped
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hardware", "rtx5090", "--dtype", "q4_k", "--json",
                         "--engine", "llama.cpp,ik_llama.cpp")
    whole = [r for r in json.loads(out)["rows"] if r["strategy"] == "all-on-gpu"]
    assert code == 0 and len(whole) == 1 and whole[0]["same_as"] == ["cpu-experts"], whole


TWO_SOCKETS = """name = "two-sockets"
[gpu]
name = "RTX 4090"
hbm_gb = 24
hbm_gbps = 1008
tflops = 165.2
[link]
name = "PCIe 4.0 x16"
gbps = 32
[cpu]
name = "Xeon"
cores = 32
ghz = 2.2
isa = "avx512"
dram_gbps = 307.2
ram_gb = 1024
sockets = 2
"""


def test_a_plan_lays_the_threads_over_the_sockets_as_asked(cli, tmp_path):
    """``plan --numa distribute`` on two sockets: each llama.cpp row that computes on the CPU writes the flag and reads
    both sockets' DRAM (faster than its row read from one), kTransformers (its own layout) keeps a pool a socket; not
    asked, the plan says which layout its rows run and the flag for the other; a machine of one socket refuses it."""
    machine = tmp_path / "two.toml"
    machine.write_text(TWO_SOCKETS)
    args = ("plan", "--model", "qwen3-30b-a3b", "--hardware", str(machine), "--dtype", "q8_0", "--json")
    code, out, err = cli(*args)
    assert code == 0, err
    alone = {(r["engine"], r["cpu_layers"], r["gpu"]): r for r in json.loads(out)["rows"]}
    code, out, err = cli(*args, "--numa", "distribute")
    assert code == 0, err
    rows = [r for r in json.loads(out)["rows"] if r["strategy"] == "cpu-experts"]
    assert rows and all("--kt-threadpool-count 2" in r["command"] for r in json.loads(out)["rows"]
                        if r["engine"] == "kTransformers")
    for r in rows:
        assert "-t 64 --numa distribute" in r["command"], r["command"]
        assert r["tokens_per_s"] > alone[(r["engine"], r["cpu_layers"], r["gpu"])]["tokens_per_s"]
    code, out, err = cli(*args[:-1])  # not asked: the table says what the rows read and the flag for the other
    assert code == 0 and "2 sockets: each row runs its engine's own layout of the CPU threads over them (llama.cpp: " \
                         "one-pool" in out and "--numa distribute plans llama.cpp laid out so" in out, out
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hardware", "rtx4090", "--numa", "distribute")
    assert code == 1 and "--numa: rtx4090 has one CPU socket at most" in err


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
    toy = replace(llama, name="toy", source="this test", numa=PER_SOCKET,
                  command=lambda launch: f"toy --cpu-layers {launch.cpu_layers} --threads {launch.threads}")
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
        (plain["tokens_per_s"] * OPERATIONS_BANDS["CPU"][0], plain["tokens_per_s"] * OPERATIONS_BANDS["CPU"][1]),
        rel=1e-12)
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
    assert placed["command"] == f"toy --cpu-layers {placed['cpu_layers']} --threads 4" and not placed["apart"]


def test_moesim_engines_lists_each_engine_with_its_figures(cli):
    """``moesim engines --json`` gives every registered engine, in order, with the strategies it runs and the figures
    that time them."""
    code, out, err = cli("engines", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["name"] for r in rows] == list(ENGINES)
    kt = next(r for r in rows if r["name"] == "kTransformers")
    assert kt["runs"] == ["hybrid"] and kt["numa"] == DISTRIBUTE and kt["cpu_ops"] == [3, 0] and kt["computes_on_cpu"]
    assert not next(r for r in rows if r["name"] == "Mixtral-offloading")["computes_on_cpu"]


def test_a_plan_row_is_timed_as_its_engine_and_sim_run_as_the_placement():
    """A plan's row names its engine and includes the framework time learned for it (``layer_us``): its TPOT is the
    same placement's in ``sim run`` plus that time on each of the model's MoE layers, and its interval is the named
    band; ``sim run`` times the placement's operations alone, with the operations' band."""
    import moesim
    from moesim.sim.accuracy import FRAMEWORK_BANDS, OPERATIONS_BANDS
    from moesim.sim.des import simulate_des

    p = moesim.plan("mixtral-8x7b", "rtx4090", dtypes=("int2",), vram=8)  # its format: its rows are answers
    row, result = next((r, res) for r, res in zip(p.rows, p.results) if r.engine == "Mixtral-offloading")
    plain = simulate_des(p.simulated, result.config, p.spec, p.machine_spec)
    layer_s = ENGINES["Mixtral-offloading"].layer_us * 1e-6
    assert layer_s > 0 and row.tpot_s == pytest.approx(plain.tpot_s + p.spec.num_layers * layer_s, rel=1e-9)
    assert row.tokens_per_s.low == pytest.approx(row.tokens_per_s.mid * FRAMEWORK_BANDS["GPU"][0], rel=1e-12)
    assert plain.timed_as == "Mixtral-offloading"
    assert plain.tokens_per_s_high == pytest.approx(plain.tokens_per_s * OPERATIONS_BANDS["GPU"][1], rel=1e-12)


def test_sim_run_times_a_named_engine_as_plan_does(cli):
    """``--engine NAME`` times a run as that engine, its learned framework time and its kernel kind included (a plan
    row's number): ``layer_us`` more on each MoE layer of each token than ``auto`` with that kernel; an engine that does not run the strategy, or
    lacks the mechanism the settings ask for, is refused in one line; ``auto`` keeps the ids of runs stored before the
    setting existed."""
    from moesim.sim.accuracy import FRAMEWORK_BANDS
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
    assert named["tokens_per_s_high"] == pytest.approx(named["tokens_per_s"] * FRAMEWORK_BANDS["GPU"][1], rel=1e-12)
    assert named["framework_us"] == ENGINES["Mixtral-offloading"].layer_us and auto["framework_us"] == 0
    code, _, err = cli(*run, "--engine", "kTransformers")
    assert code == 1 and err.count("\n") == 1 and "--engine kTransformers does not run strategy gpu-cache" in err
    code, _, err = cli(*run, "--engine", "Mixtral-offloading", "--prefetch", "history")
    assert code == 1 and "(its cache is LRU and fetches nothing ahead); MoE-Infinity or MELINOE runtime does" in err
    config = Config.build(strategy="gpu-cache")
    assert config_id("des", "t", config) == config_id("des", "t", {k: v for k, v in config.flat().items()
                                                                    if k != "engine"})
    assert config_id("des", "t", config.replace(engine="Mixtral-offloading")) != config_id("des", "t", config)


def test_an_engine_that_fixes_its_threads_is_timed_on_them(monkeypatch):
    """Fiddler computes its CPU experts on 16 threads whatever the machine has (``torch.set_num_threads(16)``): a run
    named for it (its framework time left out here: a prefetcher's copies may hide part of it) is timed as the same
    placement with --threads 16 on a machine of more cores, and on every core of one with fewer; an engine that fixes
    none keeps the machine's."""
    import moesim
    from moesim.sim.hardware import get_hardware

    monkeypatch.setitem(ENGINES, "Fiddler", replace(ENGINES["Fiddler"], layer_us=0.0))

    big, small = get_hardware("h100", cpu="xeon-8470"), get_hardware("h100", cpu="ryzen-7950x")
    fiddler = ENGINES["Fiddler"]
    assert (fiddler.threads, fiddler.machine(big).cpu.workers, fiddler.machine(small).cpu.workers) == (16, 16, 16)
    assert fiddler.machine(replace(small, cpu=replace(small.cpu, cores=8))).cpu.workers == 8
    assert ENGINES["llama.cpp"].machine(big) is big
    trace = moesim.load_trace(bundled_trace_path())
    settings = dict(strategy="cpu-miss", policy="static", prefetch="popular", capacity=2, dtype="bf16")
    named = moesim.simulate(trace, hardware=big, engine="Fiddler", **settings)
    by_hand = moesim.simulate(trace, hardware=big, threads=16, **settings)
    every_core = moesim.simulate(trace, hardware=big, **settings)
    assert named.tpot_s == by_hand.tpot_s
    assert named.tpot_s != every_core.tpot_s
    # the result carries the machine as simulated, which --explain shows
    assert (named.machine.cpu.workers, every_core.machine.cpu.workers) == (16, big.cpu.cores)


def test_a_kernel_given_to_an_engine_that_runs_its_own_is_refused(cli):
    """Mixtral-offloading runs one kernel per expert whatever ``--kernel`` says: a kernel typed beside it is read by
    nothing, one line, exit 1."""
    code, _, err = cli("sim", "run", bundled_trace_path(), "--hardware", "rtx4090", "--policy", "lru", "--capacity",
                       "4", "--engine", "Mixtral-offloading", "--kernel", "fused")
    assert code == 1 and err.count("\n") == 1
    assert "--kernel: engine Mixtral-offloading runs its own kind of expert kernel (per-expert)" in err


# each engine's program and the options it takes, value-taking (True) or not, as its own source names them:
# llama.cpp common/arg.cpp (llama-server), ik_llama.cpp common/common.cpp, kt-kernel's SGLang arguments
# (kt-kernel/README.md), MoE-Infinity's moe_infinity/entrypoints/openai/api_server_v2.py, Fiddler's src/fiddler/infer.py
LLAMA_SERVER = {"-m": True, "-ngl": True, "--n-cpu-moe": True, "--cpu-moe": False, "-t": True, "-c": True, "-np": True}
SGLANG = {"--model": True, "--kt-weight-path": True, "--kt-method": True, "--kt-cpuinfer": True,
          "--kt-threadpool-count": True, "--kt-num-gpu-experts": True, "--kt-expert-placement-strategy": True,
          "--init-expert-location": True, "--max-total-tokens": True}
PROGRAMS = {
    "llama.cpp": (("llama-server",), {**LLAMA_SERVER, "--no-op-offload": False}),
    "ik_llama.cpp": (("./build/bin/llama-server",), {**LLAMA_SERVER, "-op": True}),
    "kTransformers": (("python", "-m", "sglang.launch_server"), SGLANG),
    "MoE-Infinity": (("python", "-m", "moe_infinity.entrypoints.openai.api_server_v2"),
                     {"--model": True, "--offload-dir": True, "--device-memory-ratio": True}),
    "Fiddler": (("python", "src/fiddler/infer.py"), {"--model": True, "--cpu-offload": True}),
}
KT_METHODS = ("AMXINT4", "AMXINT8", "LLAMAFILE", "BF16", "FP8")


@pytest.mark.parametrize("model, hardware, batch, kept", [("qwen3-30b-a3b", "rtx4080", 1, None),
                                                          ("mixtral-8x7b", "rtx4090", 2, None),
                                                          ("qwen3-30b-a3b", "ryzen-7950x", 1, None),
                                                          ("qwen3-30b-a3b", "rtx4080", 1, ["ik_llama.cpp"])])
def test_every_command_a_plan_offers_parses_under_its_engines_options(model, hardware, batch, kept):
    """Each offered row's command is its engine's program with options it takes, each given a value where it takes
    one (and numbers where it counts), nothing else."""
    import re
    import shlex

    import moesim

    plan = moesim.plan(model, hardware, dtypes=["bf16", "q4_k"], batch=batch, engines=kept)
    assert plan.rows
    for row in plan.rows:
        words = shlex.split(row.command)
        program, options = PROGRAMS[row.engine]
        assert tuple(words[:len(program)]) == program, row.command
        rest = words[len(program):]
        while rest:
            flag = rest.pop(0)
            assert flag in options, (row.command, flag)
            if options[flag]:
                value = rest.pop(0)
                if flag == "-op":  # an op's number (-1: every op) and 0 or 1
                    assert re.fullmatch(r"-?\d+,[01]", value), row.command
                    continue
                assert not value.startswith("-"), (row.command, flag)
                if flag in ("-ngl", "--n-cpu-moe", "-t", "-c", "-np", "--kt-cpuinfer", "--kt-num-gpu-experts",
                            "--max-total-tokens"):
                    assert int(value) >= 0, (row.command, flag)
                if flag == "--kt-method":
                    assert value in KT_METHODS, row.command
