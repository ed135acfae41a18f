"""The CPU model's fit to llama.cpp timings (``moesim.replay.cpu_fit``): timings the model itself produces from
known parameters give those parameters back; the fitted file round-trips; the refusals."""

from dataclasses import replace

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.replay.cpu_fit import Run, at, barriers_per_token, decode_s, fit, fit_unpack
from moesim.replay.llamacpp_model import qwen3_moe
from moesim.sim.hardware import load_hardware, write_hardware
from moesim.sim.machine import CPU, Hardware
from moesim.tracegen.model_spec import BYTES_PER_PARAM

TRUTH = CPU("synthetic", cores=8, ghz=3.0, isa="avx512", dram_gbps=50.0, ram_gb=64.0, dram_eff=0.85, task_us=6.0,
            barrier_base_us=0.4, barrier_thread_us=0.3, unpack_gbps=(("bf16", 21.0), ("q4_0", 9.0), ("q8_0", 14.0)))
START = replace(TRUTH, dram_eff=1.0, task_us=0.0, barrier_base_us=1.15, barrier_thread_us=0.27, unpack_gbps=())


def stored(layers, experts, top_k, d, width, fmt, vocab=4096):
    """A model as its GGUF would describe it: every weight in ``fmt`` (the router too, for simplicity)."""
    spec = qwen3_moe(f"m-{fmt}", layers, experts, top_k, d, width, vocab=vocab)
    bpp = BYTES_PER_PARAM[fmt]
    return replace(spec, stored_expert_bytes=spec.expert_params * bpp, stored_other_bytes=spec.non_expert_params * bpp,
                   expert_format=fmt, other_format=fmt)


def timed(cpu, spec, threads, probe, ctx=31.5):
    """The run the model says ``cpu`` gives."""
    return Run(spec, threads, ctx, 1.0 / decode_s(spec, at(cpu, Run(spec, threads, ctx, 1.0, probe)), ctx), probe)


def synthetic(cpu, formats=("bf16", "q8_0", "q4_0", "f16")):
    probes = iter(np.linspace(38.0, 55.0, 64))
    overhead = [timed(cpu, stored(16, 8, 2, 64, 64, "q8_0", 512), t, next(probes)) for t in (1, 2, 4, 8)]
    by_format = {f: [timed(cpu, stored(*shape, f), t, next(probes))
                     for shape in ((6, 32, 8, 768, 384), (4, 8, 2, 768, 1536)) for t in (1, 2, 4, 8)]
                 for f in formats}
    return overhead, by_format


def test_the_fit_gives_back_the_parameters_that_made_the_timings():
    overhead, by_format = synthetic(TRUTH)
    cpu, rates = fit(START, overhead, by_format)
    assert rates["f16"] is None  # f16 is not unpack-bound on TRUTH (no rate of its own, none in the tables)
    assert {f: u for f, u in rates.items() if u is not None} == pytest.approx(dict(TRUTH.unpack_gbps), rel=1e-7)
    for name in ("dram_eff", "task_us", "barrier_base_us", "barrier_thread_us"):
        assert getattr(cpu, name) == pytest.approx(getattr(TRUTH, name), rel=1e-6), name
    # f16 gets the least rate that binds none of its runs, so the file predicts what the fit saw
    assert all(r.model_s(cpu) == pytest.approx(r.measured_s, rel=1e-6) for r in by_format["f16"])


def test_with_the_small_model_at_one_thread_count_its_per_thread_barrier_cost_is_kept():
    """The per-thread cost is known (the published one, here TRUTH's) and not fitted; the rest is recovered."""
    overhead, by_format = synthetic(TRUTH, ("q4_0", "q8_0"))  # q8_0: the small model's format
    start = replace(START, barrier_thread_us=TRUTH.barrier_thread_us)
    cpu, rates = fit(start, [r for r in overhead if r.threads == 2], by_format)
    assert cpu.barrier_thread_us == TRUTH.barrier_thread_us
    assert rates["q4_0"] == pytest.approx(9.0, rel=1e-6)
    assert cpu.barrier_base_us == pytest.approx(TRUTH.barrier_base_us, rel=1e-6)


def test_a_format_dram_binds_at_every_thread_count_gets_the_least_rate_that_binds_none():
    """On an AVX2 core, whose bytes-per-cycle table would bind q4_0 at 4.6 x 3 GHz = 13.8 GB/s a thread, a q4_0 that
    DRAM bound in every run gets DRAM's share per thread, not the table's figure."""
    avx2 = replace(TRUTH, isa="avx2")
    fast = replace(avx2, unpack_gbps=(("q4_0", 500.0),))
    spec = stored(4, 8, 2, 768, 1536, "q4_0")
    runs = [timed(fast, spec, t, 40.0) for t in (1, 2)]
    rate, binds = fit_unpack(replace(fast, unpack_gbps=()), "q4_0", runs)
    assert not binds and rate == pytest.approx(40.0 * TRUTH.dram_eff, rel=1e-12)
    fitted = replace(avx2, unpack_gbps=(("q4_0", rate),))
    assert all(r.model_s(fitted) == pytest.approx(r.measured_s, rel=1e-12) for r in runs)
    slow = replace(avx2, unpack_gbps=(("q4_0", 5.0),))
    rate, binds = fit_unpack(replace(slow, unpack_gbps=()), "q4_0", [timed(slow, spec, t, 40.0) for t in (1, 2)])
    assert binds and rate == pytest.approx(5.0, rel=1e-9)


def test_a_mixed_file_reads_each_format_at_its_rate_and_shares_the_flops_by_parameters():
    """Q4_K_M-like experts: 3/4 of the bytes in q4_k (4.5 bits), 1/4 in q6_k (6.5625 bits)."""
    spec = replace(stored(1, 8, 2, 256, 512, "q4_k", vocab=0), expert_mix=(("q4_k", 0.75), ("q6_k", 0.25)))
    cpu = replace(TRUTH, unpack_gbps=(("q4_k", 8.0), ("q6_k", 4.0)), matmul_gflops=(("q4_k", 50.0), ("q6_k", 20.0)),
                  task_us=0.0)
    hw = at(cpu, Run(spec, 1, 0.0, 1.0, 100.0))
    from moesim.sim.costs import cpu_expert_s

    nbytes = spec.stored_expert_bytes
    one = cpu_expert_s(hw.cpu, spec.expert_params, "q4_k", nbytes, [1.0], mix=spec.expert_mix)
    assert one[0] == pytest.approx(0.75 * nbytes / 8e9 + 0.25 * nbytes / 4e9, rel=1e-12)
    params = {"q4_k": 0.75 / BYTES_PER_PARAM["q4_k"], "q6_k": 0.25 / BYTES_PER_PARAM["q6_k"]}
    share = {f: p / sum(params.values()) for f, p in params.items()}
    flops = 2.0 * spec.expert_params * 4096
    many = cpu_expert_s(hw.cpu, spec.expert_params, "q4_k", nbytes, [4096.0], mix=spec.expert_mix)
    assert many[0] == pytest.approx(share["q4_k"] * flops / 50e9 + share["q6_k"] * flops / 20e9, rel=1e-12)


def test_q4_k_m_asked_of_a_preset_is_priced_as_its_two_formats():
    """Q4_K_M is a recipe: a sixth of the parameters (the down projections of half the layers) in Q6_K, the rest in
    Q4_K; a preset run with --dtype q4_k_m reads each part at its own unpack rate, as a file in it would be."""
    from moesim.sim.costs import cpu_expert_s
    from moesim.sim.weights import weights_of
    from moesim.tracegen.models import get_model

    spec = get_model("qwen3-30b-a3b")
    w = weights_of(None, spec, "q4_k_m", "q4_k_m")
    q4, q6 = 5 / 6 * 144 / 256, 1 / 6 * 210 / 256  # bytes per parameter of each part
    assert w.expert_bytes == pytest.approx(spec.expert_params * (q4 + q6), rel=1e-12)
    assert dict(w.expert_mix) == pytest.approx({"q4_k": q4 / (q4 + q6), "q6_k": q6 / (q4 + q6)}, rel=1e-12)
    assert w.other_mix == w.expert_mix and weights_of(None, spec, "q4_k").expert_mix == ()
    cpu = replace(TRUTH, unpack_gbps=(("q4_k", 2.0), ("q6_k", 1.0)), task_us=0.0, threads=1)
    one = cpu_expert_s(cpu, spec.expert_params, w.expert_format, w.expert_bytes, [1.0], mix=w.expert_mix)[0]
    assert one == pytest.approx(spec.expert_params * (q4 / 2e9 + q6 / 1e9), rel=1e-12)


@pytest.mark.parametrize("attn_gflops", [2.0, 500.0])
def test_decode_time_is_the_sum_of_its_parts(attn_gflops):
    """One layer without a head: attention and router weights at the slower of DRAM and their unpack rate; the
    products over the KV cache at the slower of reading it (f16) and their 4·q·ctx FLOPs at the one-row flash
    attention rate (2 GFLOP/s a thread binds; 500 does not), the second thread adding 0.6 of the first's; k experts
    of ``task`` + their bytes; 42 barriers."""
    spec = stored(1, 8, 2, 256, 512, "q8_0", vocab=0)
    spec = replace(spec, stored_other_bytes=float(spec.non_expert_params * 1.0625))
    cpu = replace(TRUTH, unpack_gbps=(("f16", 30.0), ("q8_0", 10.0)), attn_gflops=attn_gflops, attn_tiled_gflops=1.0,
                  attn_thread_eff=0.6)
    ctx, threads, probe = 100.0, 2, 40.0
    dram = probe * cpu.dram_eff * 1e9
    rate = min(dram, threads * 10e9)
    attention_router = spec.attention_params + spec.d_model * spec.num_experts
    kv = max(spec.kv_width * ctx * 2.0 / min(dram, threads * 30e9),
             4 * spec.q_dim * ctx / ((1 + 0.6 * (threads - 1)) * attn_gflops * 1e9))
    assert (kv > 1e-5) == (attn_gflops == 2.0)
    other = attention_router * 1.0625 / rate + kv
    experts = spec.top_k * (cpu.task_us * 1e-6 + spec.expert_params * 1.0625 / rate)
    barriers = barriers_per_token(spec) * (cpu.barrier_base_us + cpu.barrier_thread_us * (threads - 1)) * 1e-6
    assert barriers_per_token(spec) == 42
    got = decode_s(spec, at(cpu, Run(spec, threads, ctx, 1.0, probe)), ctx)
    assert got == pytest.approx(other + experts + barriers, rel=1e-12)


def test_a_prompt_of_64_tokens_or_more_takes_the_tiled_attention_rate():
    """The flash attention's path goes by the micro-batch's query rows (at most 512): a 63-token prompt one row at a
    time, 64 and 2,048 in tiles; its causal products are 4·q per query and earlier position."""
    from moesim.replay.cpu_fit import prefill_s

    spec = stored(1, 8, 2, 256, 512, "q8_0", vocab=0)
    fast = replace(TRUTH, attn_gflops=1e6, attn_tiled_gflops=1e6)  # the KV cache's bytes bind, not the products
    slow_one, slow_tiled = replace(fast, attn_gflops=0.01), replace(fast, attn_tiled_gflops=0.01)
    for n, tiled in ((63, False), (64, True), (2048, True)):
        base = prefill_s(spec, at(fast, Run(spec, 2, 0, 1, 40.0, n)), n)
        attention = 4 * spec.q_dim * n * (n + 1) / 2 / (2 * 0.01e9)  # seconds: 100 times the rest at least
        for cpu, binds in ((slow_one, not tiled), (slow_tiled, tiled)):
            got = prefill_s(spec, at(cpu, Run(spec, 2, 0, 1, 40.0, n)), n)
            assert got == (pytest.approx(base + attention, rel=0.01) if binds else base)


def test_the_attention_fit_gives_back_its_rates():
    """Decodes after 1,024 KV tokens tell the one-row rate (one thread) and what the second thread adds (0.55 of
    one's), 1,024-token prompts the tiled rate, the rest as given."""
    from moesim.replay.cpu_fit import fit_attention

    truth = replace(TRUTH, matmul_gflops=(("q4_0", 80.0),), attn_gflops=12.0, attn_tiled_gflops=40.0,
                    attn_thread_eff=0.55)
    spec = stored(6, 40, 8, 768, 256, "q4_0")
    runs = [timed(truth, spec, t, 40.0, ctx=1024 + 32.5) for t in (1, 2)]
    for t in (1, 2):
        run = Run(spec, t, 0.0, 1.0, 40.0, 1024)
        runs.append(replace(run, tok_s=1024 / run.model_s(truth)))
    cpu = fit_attention(replace(truth, attn_gflops=0.0, attn_tiled_gflops=0.0, attn_thread_eff=1.0), runs)
    assert (cpu.attn_gflops, cpu.attn_thread_eff, cpu.attn_tiled_gflops) == pytest.approx((12.0, 0.55, 40.0), rel=1e-7)


def test_a_fitted_cpu_round_trips_through_its_hardware_file(tmp_path):
    overhead, by_format = synthetic(TRUTH, ("q4_0",))
    cpu, _ = fit(START, overhead, by_format)
    cpu = replace(cpu, matmul_gflops=(("q4_0", 91.4),), attn_gflops=10.7, attn_tiled_gflops=30.3)
    path = tmp_path / "here.toml"
    write_hardware(Hardware("fitted", None, None, cpu=cpu), path, ("measured today", "second line"))
    text = path.read_text()
    assert text.startswith("# measured today\n# second line\n")
    assert load_hardware(path).cpu == cpu


@pytest.mark.parametrize("line, error", [
    ("unpack_gbps = {q9_9 = 3.0}", "unpack_gbps names unknown format(s) q9_9"),
    ("unpack_gbps = {q4_0 = -3.0}", "unpack_gbps.q4_0 must be a finite number > 0"),
    ("unpack_gbps = {q4_0 = nan}", "unpack_gbps.q4_0 must be a finite number > 0"),
    ("unpack_gbps = 3.0", "unpack_gbps must be a table of format = rate"),
    ("matmul_gflops = {q4_0 = 0}", "matmul_gflops.q4_0 must be a finite number > 0"),
])
def test_a_bad_unpack_table_is_refused_in_one_line(tmp_path, line, error):
    path = tmp_path / "bad.toml"
    path.write_text(f'[cpu]\nname = "x"\ncores = 2\nghz = 3.0\nisa = "avx2"\ndram_gbps = 40\nram_gb = 16\n{line}\n')
    with pytest.raises(MoesimError) as caught:
        load_hardware(path)
    assert str(caught.value).startswith(f"{path}: [cpu] {error}") and "\n" not in str(caught.value)


def test_validate_refuses_a_format_llama_cpp_files_cannot_hold_before_building_anything():
    from moesim.cli.llamacpp_cmd import llamacpp_formats

    assert llamacpp_formats(None) == ["bf16", "q8_0", "q4_k_m", "q4_0", "mxfp4"]
    assert llamacpp_formats(["q6_k", "f16"]) == ["q6_k", "f16"]
    with pytest.raises(MoesimError, match=r"^--dtype fp8, int4: llama.cpp validation writes bf16, f16, q8_0, q4_0, "
                                          r"q4_k, q4_k_m"):
        llamacpp_formats(["q8_0", "fp8", "int4"])


def test_a_fit_needs_runs():
    with pytest.raises(MoesimError, match="needs at least one run"):
        fit_unpack(START, "q4_0", [])


@pytest.mark.parametrize("args, error", [
    (("calibrate", "--engine", "vllm", "--out", "{tmp}/h.toml"), "--engine 'vllm': the engine moesim runs is llama.cpp"),
    (("calibrate", "--out", "{tmp}/h.toml"), "calibrate needs --model (the replay's model), or --engine llama.cpp"),
    (("calibrate", "--engine", "llama.cpp", "--model", "olmoe-1b-7b", "--out", "{tmp}/h.toml"),
     "--engine llama.cpp calibrates its own models on the CPU; --model is the replay's (llama.cpp's decodes are "
     "repeated --runs times)"),
    (("calibrate", "--engine", "llama.cpp", "--backend", "cuda", "--repeats", "3", "--out", "{tmp}/h.toml"),
     "--engine llama.cpp calibrates its own models on the CPU; --backend, --repeats are the replay's (llama.cpp's "
     "decodes are repeated --runs times)"),
    (("validate", "{tmp}/t.parquet", "--engine", "llama.cpp"), "--engine llama.cpp decodes models of its own; it takes "
                                                               "no trace"),
    (("validate",), "validate needs a trace (or --engine llama.cpp)"),
    (("calibrate", "--engine", "llama.cpp", "--threads", "1,1", "--out", "{tmp}/h.toml"),
     "--threads: 1 listed twice; each value is one run"),  # was run once, where every other list refuses it
    (("validate", "--engine", "llama.cpp", "--policies", "lru", "--capacity", "8", "--scale", "0.5"),
     "--engine llama.cpp takes --hardware, --force, --model, --layers, --dtype, --threads, --contexts, --prompts, "
     "--runs, --workdir, --json; not --capacity, --policies, --scale (the replay's)"),  # as typed
    (("validate", "--engine", "llama.cpp", "--backend", "cuda"), "--engine llama.cpp takes --hardware, --force, "
     "--model, --layers, --dtype, --threads, --contexts, --prompts, --runs, --workdir, --json; not --backend (the "
     "replay's)"),

])
def test_the_engine_commands_refuse_what_they_cannot_do_in_one_line(cli, tmp_path, args, error):
    code, out, err = cli(*(a.format(tmp=tmp_path) for a in args))
    assert code == 1 and err.strip() == f"moesim: error: {error}" and not list(tmp_path.iterdir())


def test_validate_engine_refuses_a_configuration_file(cli, tmp_path):
    """A file's settings (one 'sim run --save-config' wrote names every setting, dtype and threads among them) would
    be ignored by llama.cpp validation, which reads the command line: refused."""
    from moesim.sim.config import Config

    Config().to_toml(tmp_path / "run.toml")
    code, out, err = cli("validate", "--engine", "llama.cpp", "--config", tmp_path / "run.toml")
    assert code == 1 and err.strip() == (
        "moesim: error: --engine llama.cpp reads no configuration file (--config); give --hardware, --force, --model, "
        "--layers, --dtype, --threads, --contexts, --prompts, --runs, --workdir, --json on the command line")


# ---------------------------------------------------------------- the torch replay's kernels (moesim calibrate)

KERNEL_TRUTH = replace(TRUTH, cores=2, threads=2, dram_gbps=35.0, dram_eff=0.4, task_us=15.0, barrier_base_us=0.0,
                       barrier_thread_us=0.0, unpack_gbps=(("bf16", 2.0), ("fp32", 10.0)),
                       matmul_gflops=(("bf16", 90.0), ("fp32", 60.0)))


def kernel_timings(cpu, d=256, de=128):
    """The kernel runs ``calibrate`` times (two widths on one token, the wider on 64), as the model times them."""
    from moesim.replay.cpu_fit import KernelRun

    runs = {}
    for fmt, size in (("fp32", 4), ("bf16", 2)):
        for width, tokens in ((de, 1), (de // 2, 1), (de, 64)):
            for n, probe in ((1, 34.0), (2, 36.0)):
                run = KernelRun(3 * d * width, fmt, 3 * d * width * size, tokens, n, 1.0, probe)
                runs.setdefault(fmt, []).append(replace(run, seconds=run.model_s(cpu)))
    return runs


def test_the_kernel_fit_gives_back_the_rates_that_made_the_timings():
    """fp32 unpacking binds one thread (10 GB/s < 0.4 x 34) and DRAM two, bf16 unpacking both; the 64-token runs
    are compute-bound; the half-width experts tell the fixed cost."""
    from moesim.replay.calibrate_cpu import fit_kernels

    runs = kernel_timings(KERNEL_TRUTH)
    cpu = fit_kernels(replace(KERNEL_TRUTH, unpack_gbps=(), matmul_gflops=(), task_us=0.0, dram_eff=1.0), runs, 2,
                      "torch")
    assert dict(cpu.unpack_gbps) == pytest.approx(dict(KERNEL_TRUTH.unpack_gbps), rel=1e-6)
    assert dict(cpu.matmul_gflops) == pytest.approx(dict(KERNEL_TRUTH.matmul_gflops), rel=1e-6)
    assert (cpu.task_us, cpu.dram_eff) == pytest.approx((15.0, 0.4), rel=1e-6)
    assert (cpu.threads, cpu.barrier_base_us, cpu.barrier_thread_us, cpu.dram_gbps) == (2, 0.0, 0.0, 35.0)
    assert cpu.name.endswith(", torch")


def test_a_negative_fitted_time_is_refused_beyond_noise():
    from moesim.replay.calibrate_cpu import fit_cpu_layer, mean_se, nonnegative_s

    assert mean_se([1.0, 3.0]) == (2.0, 1.0)  # std 1.414 / sqrt 2
    assert nonnegative_s(5e-6, 1e-6, "x") == 5e-6
    assert nonnegative_s(-2e-6, 1e-6, "x") == 0.0    # within two standard errors
    assert nonnegative_s(-20e-6, 1e-6, "x", 1e-4) == 0.0  # an overhead within a quarter of the time it is added to
    with pytest.raises(MoesimError, match="a layer's fixed time came out at -3 us .standard error 1 us.: negative"):
        nonnegative_s(-3e-6, 1e-6, "a layer's fixed time")
    hw = Hardware("h", None, None, cpu=KERNEL_TRUTH)
    spec = stored(2, 8, 2, 64, 64, "fp32")
    fitted = fit_cpu_layer(hw, spec, lambda h, t: ([3e-3, 3e-3], [2e-3, 2e-3]), None)
    assert fitted.cpu.sync_us == pytest.approx(500.0)  # 1 ms a step over two layers
    # 0.6 ms a layer faster than the 1 ms a layer simulated: not refused yet (a tiny model's cached experts), 0
    assert fit_cpu_layer(hw, spec, lambda h, t: ([0.8e-3, 0.8e-3], [2e-3, 2e-3]), None).cpu.sync_us == 0.0
    assert fit_cpu_layer(hw, spec, lambda h, t: ([1.6e-3, 1.6e-3], [2e-3, 2e-3]), None).cpu.sync_us == 0.0
