"""The host CPU model in closed form (moesim.sim.cpu_rates, machine.CPU, costs): DRAM-bound against unpack-bound
and the thread count where one becomes the other, sockets as each engine uses them, thread barriers, the
hand-off; machines without a GPU; the work done once per row (dense layers, output head) and the shared
experts kTransformers overlaps with the CPU's."""

from dataclasses import replace

import numpy as np
import pytest

from dyadic import HW, LAT, LINK_BW, MEM_BW, MODEL, US, pre_s, trace_of
from moesim import simulate
from moesim.errors import MoesimError
from moesim.sim.cost_model import cost_model
from moesim.sim.costs import cpu_expert_s, cpu_layer_s, kv_reads
from moesim.sim.cpu_rates import CPU_LAYER_BARRIERS, WEIGHT_BYTES_PER_CYCLE
from moesim.sim.engines import ENGINES
from moesim.sim.machine import DISTRIBUTE, ONE_POOL, PER_SOCKET, CPU, Hardware
from moesim.sim.weights import Weights
from moesim.tracegen.models import ModelSpec

GIB = 2 ** 30
# the engines as a sim run times them: their operations, no framework time learned for them
LLAMA_CPP, KTRANSFORMERS = (replace(ENGINES[name], layer_us=0.0) for name in ("llama.cpp", "kTransformers"))


def row_costs(model, hw, tokens, ctx, weights, engine, *rest, **named):
    """A row's costs from the machine's cost model (``moesim.sim.cost_model``)."""
    return cost_model(model, hw, weights, engine).row_costs(tokens, ctx, *rest, **named)


def cpu(**fields) -> CPU:
    base = dict(name="c", cores=16, ghz=2.0, isa="avx512-256", dram_gbps=64.0, ram_gb=64.0, dram_eff=1.0,
                task_us=0.0, sync_us=0.0, barrier_base_us=0.0, barrier_thread_us=0.0)
    return CPU(**{**base, **fields})


def test_the_unpack_rates_are_the_sources_measurements():
    """bytes per cycle = GiB of the model x tokens/s / threads / clock (ik_llama.cpp #164: 7950X at 5.7 GHz with
    2 threads, M2 Max at 3.5 GHz with 4)."""
    x86, arm = WEIGHT_BYTES_PER_CYCLE["x86"], WEIGHT_BYTES_PER_CYCLE["arm"]
    for fmt, gib, tps in (("q8_0", 7.95, 4.95), ("q4_0", 4.35, 11.23), ("q4_k", 4.36, 9.57), ("q6_k", 6.14, 7.62),
                          ("iq4_xs", 4.13, 8.15), ("q2_k", 2.78, 11.33)):
        assert x86[fmt] == round(gib * GIB * tps / 2 / 5.7e9, 2)
    for fmt, gib, tps in (("q4_k", 4.36, 17.55), ("q6_k", 6.14, 11.62), ("iq4_xs", 4.13, 16.03)):
        assert arm[fmt] == round(gib * GIB * tps / 4 / 3.5e9, 2)
    assert x86["mxfp4"] == x86["iq4_nl"] and x86["int8"] == x86["q8_0"] and "bf16" not in x86


def test_an_expert_is_unpack_bound_below_the_crossover_thread_count_and_dram_bound_above():
    """q4_k on x86: 3.93 B a cycle a core at 2 GHz; DRAM 64 GB/s: the crossover is 64e9 / 7.86e9 = 8.14 threads."""
    nbytes, params = 3 * 2048 * 768 * 4.5 / 8, 3 * 2048 * 768
    per_thread = 2.0e9 * 3.93
    for threads, want in ((1, nbytes / per_thread), (8, nbytes / (8 * per_thread)), (9, nbytes / 64e9),
                          (16, nbytes / 64e9)):
        c = cpu(threads=threads)
        assert cpu_expert_s(c, params, "q4_k", nbytes, [1])[0] == pytest.approx(want, rel=1e-12)
    # a 16-bit float is never unpack-bound: two threads read its bytes at the DRAM's rate (its FLOPs take half)
    bf16 = 2.0 * params
    assert 2 * params / (2 * 2.0e9 * 64 * 0.5) < bf16 / 64e9 < bf16 / (2 * per_thread)
    assert cpu_expert_s(cpu(threads=2), params, "bf16", bf16, [1])[0] == pytest.approx(bf16 / 64e9, rel=1e-12)
    # many tokens: the arithmetic (4-bit: 64 FLOP a cycle a core on Zen 4, x kernel_eff 0.5)
    c = cpu(threads=16)
    many = 2 * params * 4096 / (16 * 2.0e9 * 64 * 0.5)
    assert cpu_expert_s(c, params, "q4_k", nbytes, [4096])[0] == pytest.approx(many, rel=1e-12)


def test_sockets_count_where_each_reads_its_own_dram():
    """llama.cpp's one pool reads one socket's DRAM whatever its threads; kTransformers' pools, and llama.cpp's
    threads spread by --numa distribute, read every socket's."""
    two = cpu(sockets=2, dram_gbps=100.0, cores=32)
    assert two.workers == 64 and two.dram_bw(ONE_POOL) == 100e9
    assert two.dram_bw(PER_SOCKET) == two.dram_bw(DISTRIBUTE) == 200e9
    assert cpu(sockets=4, dram_gbps=100.0).dram_bw(DISTRIBUTE) == 400e9
    nbytes = 1e9
    assert cpu_expert_s(two, 1, "bf16", nbytes, [1], ONE_POOL)[0] == pytest.approx(nbytes / 100e9, rel=1e-12)
    assert cpu_expert_s(two, 1, "bf16", nbytes, [1], PER_SOCKET)[0] == pytest.approx(nbytes / 200e9, rel=1e-12)
    assert cpu(threads=100).workers == 16 and cpu(threads=0).workers == 16 and cpu(threads=4).workers == 4


def test_the_threads_read_dram_at_most_a_core_each():
    """``core_gbps`` 3 GB/s a core under 64 GB/s of DRAM: 4 threads read a bf16 expert at 12 GB/s, 16 at 48 GB/s,
    and with two sockets' pools 32 threads reach 96 of their 128 GB/s; without it (0) every count reads at the
    DRAM's rate."""
    nbytes = 1e9
    for threads, sockets, numa, want in ((4, 1, ONE_POOL, 12e9), (16, 1, ONE_POOL, 48e9), (32, 2, PER_SOCKET, 96e9),
                                         (32, 2, ONE_POOL, 64e9)):
        c = cpu(threads=threads, sockets=sockets, core_gbps=3.0)
        assert c.dram_bw(numa) == want
        assert cpu_expert_s(c, 1, "bf16", nbytes, [1], numa)[0] == pytest.approx(nbytes / want, rel=1e-12)
    assert cpu(threads=4).dram_bw() == 64e9


def test_a_copy_of_the_experts_per_socket_only_where_each_pool_keeps_one():
    """kTransformers' archived NUMA build (``per-socket``) holds every host expert once per socket; kt-kernel's split of
    each expert over the nodes (its default), one pool, and llama.cpp's layouts hold them once."""
    trace = trace_of([[[0, 1], [2, 3]]] * 2)
    experts = 2 * 4 * 3 * 256 * 512 * 2 / GIB  # every routed expert, bf16
    hybrid, llama = ("hybrid", dict(capacity=0)), ("cpu-experts", dict(cpu_layers=2))
    one = replace(HW, cpu=cpu(sockets=1))
    for strategy, settings in (hybrid, llama):
        assert simulate(trace, model=MODEL, hardware=one, strategy=strategy, **settings).ram_gb == \
            pytest.approx(experts + 4.0, rel=1e-12)
    two = replace(HW, cpu=cpu(sockets=2))
    for (strategy, settings), numa, copies in ((hybrid, "auto", 1), (hybrid, ONE_POOL, 1), (hybrid, PER_SOCKET, 2),
                                               (llama, "auto", 1), (llama, DISTRIBUTE, 1)):
        assert simulate(trace, model=MODEL, hardware=two, strategy=strategy, numa=numa, **settings).ram_gb == \
            pytest.approx(copies * experts + 4.0, rel=1e-12), (strategy, numa)
    small = replace(HW, cpu=cpu(sockets=2, ram_gb=4.0 + 1.5 * experts))
    with pytest.raises(MoesimError, match="2 copies, one per socket"):
        simulate(trace, model=MODEL, hardware=small, strategy="hybrid", capacity=0, numa=PER_SOCKET)
    # without a GPU too: every other weight and the KV cache once, the experts once per socket where each keeps a copy
    others = (MODEL.non_expert_params * 2 + MODEL.kv_bytes(2)) / GIB
    alone = Hardware("cpu-only", None, None, cpu=cpu(sockets=2))
    for numa, copies in ((PER_SOCKET, 2), ("auto", 1)):
        r = simulate(trace, model=MODEL, hardware=alone, strategy="hybrid", capacity=0, numa=numa)
        assert r.ram_gb == pytest.approx(copies * experts + others + 4.0, rel=1e-12)


def test_a_cpu_layer_costs_its_barriers_and_with_a_gpu_the_hand_off():
    """(5 + k) barriers for llama.cpp's routed experts, 3 for kTransformers', each 1.15 + 0.27 x (threads - 1) us."""
    c = cpu(threads=8, barrier_base_us=1.15, barrier_thread_us=0.27, sync_us=113.0)
    barrier = (1.15 + 0.27 * 7) * 1e-6
    assert c.barrier_s() == pytest.approx(barrier, rel=1e-12)
    with_gpu = replace(HW, cpu=c)
    no_gpu = Hardware("cpu-only", None, None, cpu=c)
    assert cpu_layer_s(with_gpu, LLAMA_CPP, 8) == pytest.approx(13 * barrier + 113e-6, rel=1e-12)
    assert cpu_layer_s(no_gpu, LLAMA_CPP, 8) == pytest.approx(13 * barrier, rel=1e-12)
    assert cpu_layer_s(with_gpu, KTRANSFORMERS, 8) == pytest.approx(3 * barrier + 113e-6, rel=1e-12)


DRAM = 2.0 ** 32  # B/s: every duration below a dyadic rational
BARRIER = US * 1e-6  # 2^-20 s
ATTN = 2.0 ** 30  # FLOP/s of attention over the KV cache at decode: slower than reading the cache, so it binds


def cpu_only_machine() -> Hardware:
    c = cpu(cores=1, ghz=1.0, isa="avx2", dram_gbps=DRAM / 1e9, barrier_base_us=US, matmul_gflops=(("bf16", 2.0 ** 40 / 1e9),),
            attn_gflops=ATTN / 1e9)
    return Hardware("cpu-only", None, None, cpu=c)


def test_a_machine_without_a_gpu_runs_every_layer_on_its_cpu():
    """Per layer: attention and router read from DRAM, the products over the KV cache (4·q·ctx FLOPs at the
    flash attention's decode rate, slower here than reading the cache), the layer's barriers besides its experts',
    k experts each streaming its weights, their 5 + k barriers; no hand-off, no GPU memory."""
    hw = cpu_only_machine()
    trace = trace_of([[[0, 1], [2, 3]]] * 3)
    r = simulate(trace, model=MODEL, hardware=hw, strategy="cpu-experts")
    d, q, kv, e = 256, 256, 64, 4
    expert = 3 * 256 * 512 * 2 / DRAM
    for step in range(3):
        kv_read, kv_products = 2 * kv * (step + 1) * 2 / DRAM, 4 * q * (step + 1) / ATTN
        assert kv_products > kv_read
        attn = (d * q + 2 * d * kv + q * d) * 2 / DRAM + kv_products + d * e * 2 / DRAM
        layer = attn + (CPU_LAYER_BARRIERS - 7) * BARRIER + 2 * expert + 7 * BARRIER
        assert r.step_times[step] == pytest.approx(2 * layer, rel=1e-12)
    assert r.cpu_share == 1.0 and r.vram_gb == 0.0 and r.loads == 0
    weights = MODEL.non_expert_params * 2 + 2 * 4 * 3 * 256 * 512 * 2
    # every weight, the KV cache of the 3 tokens and the 4 GiB reserve, once, in RAM
    assert r.ram_gb == pytest.approx((weights + MODEL.kv_bytes(3)) / GIB + 4.0, rel=1e-12)


def test_a_machine_without_a_gpu_refuses_what_needs_one():
    hw = cpu_only_machine()
    trace = trace_of([[[0, 1], [2, 3]]] * 2)
    with pytest.raises(MoesimError, match="no GPU"):
        simulate(trace, model=MODEL, hardware=hw, strategy="gpu-cache", capacity=2)
    with pytest.raises(MoesimError, match="every layer's experts are on its CPU"):
        simulate(trace, model=MODEL, hardware=hw, strategy="cpu-experts", cpu_layers=1)
    with pytest.raises(MoesimError, match="no GPU"):
        simulate(trace, model=MODEL, hardware=hw, strategy="hybrid", capacity=2)
    r = simulate(trace, model=MODEL, hardware=hw, strategy="hybrid", capacity="auto")
    assert r.capacity == 0 and r.cpu_share == 1.0


def test_the_output_head_and_the_dense_layers_are_timed_once_per_row():
    """A model that states its vocabulary reads V x d head weights (and T embedding rows) after its last layer;
    each dense layer is an attention and a dense FFN."""
    trace = trace_of([[[0, 1], [2, 3]]] * 2)
    base = simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=4)
    vocab = 4096
    with_head = simulate(trace, model=replace(MODEL, vocab=vocab), hardware=HW, policy="lru", capacity=4)
    head = (vocab * 256 * 2 + 256 * 2) / MEM_BW + 2 * LAT
    assert with_head.step_times[0] - base.step_times[0] == pytest.approx(head, rel=1e-9)
    dense = replace(MODEL, dense_layers=1, d_dense=1024)
    with_dense = simulate(trace, model=dense, hardware=HW, policy="lru", capacity=4)
    ffn = 3 * 256 * 1024 * 2 / MEM_BW + 3 * LAT
    for step in range(2):
        attn = pre_s(step + 1) - (256 * 4 * 2 / MEM_BW + 2 * LAT)  # without the router
        assert with_dense.step_times[step] - base.step_times[step] == pytest.approx(attn + ffn, rel=1e-9)


def test_row_costs_put_the_shared_experts_beside_the_cpu_where_the_engine_overlaps_them():
    shared = replace(MODEL, shared_experts=1, d_shared=512)
    w = Weights(2.0, 3 * 256 * 512 * 2.0, "bf16", "bf16")
    serial = row_costs(shared, HW, 1.0, 1.0, w, LLAMA_CPP)
    overlap = row_costs(shared, HW, 1.0, 1.0, w, KTRANSFORMERS)
    ffn = 3 * 256 * 512 * 2 / MEM_BW + 3 * LAT
    assert float(overlap.shared) == pytest.approx(ffn, rel=1e-12) and float(serial.shared) == 0.0
    assert float(serial.pre) == pytest.approx(float(overlap.pre) + ffn, rel=1e-12)


def test_hybrid_hides_the_shared_experts_behind_the_cpus_routed_ones():
    """kTransformers: a layer is attention + router, then the longer of the shared experts on the GPU and the
    routed experts' round trip to the CPU."""
    c = cpu(cores=1, ghz=1.0, isa="avx2", dram_gbps=DRAM / 1e9, sync_us=US, matmul_gflops=(("bf16", 2.0 ** 40 / 1e9),))
    hw = replace(HW, cpu=c)
    shared = replace(MODEL, shared_experts=1, d_shared=512)
    trace = trace_of([[[0, 1], [2, 3]]] * 2)
    r = simulate(trace, model=shared, hardware=hw, strategy="hybrid", capacity=0)
    handoff, expert = 256 * 2 / LINK_BW, 3 * 256 * 512 * 2 / DRAM
    shared_s = 3 * 256 * 512 * 2 / MEM_BW + 3 * LAT
    cpu_trip = 2 * handoff + 2 * expert + LAT
    for step in range(2):
        layer = pre_s(step + 1) + max(shared_s, cpu_trip)
        assert r.step_times[step] == pytest.approx(2 * layer, rel=1e-12)
    assert shared_s < cpu_trip  # hidden: the same time as without shared experts
    plain = simulate(trace, model=MODEL, hardware=hw, strategy="hybrid", capacity=0)
    assert np.allclose(r.step_times, plain.step_times, rtol=1e-12)


def test_a_models_formats_choose_the_cpus_unpack_rate():
    """Where one thread unpacks slower than DRAM reads, each format takes its bytes at its own rate: Q8_0 has 1.9x
    Q4_K's bytes and takes 2.0x its time (3.71 against 3.93 B a cycle)."""
    model = ModelSpec("m", "", "mixtral", num_layers=1, num_experts=4, top_k=2, d_model=256, d_expert=512)
    c = cpu(threads=1, ghz=1.0, dram_gbps=1000.0)
    q4, q8 = model.expert_params * 4.5 / 8, model.expert_params * 8.5 / 8
    assert cpu_expert_s(c, model.expert_params, "q4_k", q4, [1])[0] == pytest.approx(q4 / 3.93e9, rel=1e-12)
    assert cpu_expert_s(c, model.expert_params, "q8_0", q8, [1])[0] == pytest.approx(q8 / 3.71e9, rel=1e-12)


def test_formats_are_named_as_engines_write_them_in_either_case():
    from moesim import Config

    assert Config.build(dtype="Q4_K_M", other_dtype="BF16").model.dtype == "q4_k_m"
    with pytest.raises(MoesimError, match="dtype must be one of .*, got 'Q4_K_X'"):
        Config.build(dtype="Q4_K_X")


def test_the_dram_fraction_is_the_median_of_the_published_reads_and_holds_a_cpus_own_out():
    """Sorted: 0.27 0.41 0.42 0.50 0.61 0.73 0.87 0.90 0.94 0.97 1.09 (docs/hardware.md). Without the 7950X's
    0.94 the middle two of ten are 0.61 and 0.73; without the three EPYC 9355 reads 0.50 and 0.73."""
    from moesim.sim.cpu_rates import DRAM_EFF, DRAM_READS, dram_eff_without

    assert sorted(f for _, f in DRAM_READS) == [0.27, 0.41, 0.42, 0.50, 0.61, 0.73, 0.87, 0.90, 0.94, 0.97, 1.09]
    assert DRAM_EFF == 0.73 == CPU("c", 1, 1.0, "avx2", 1.0, 1.0).dram_eff
    assert dram_eff_without("Ryzen 9 7950X") == 0.67
    assert dram_eff_without("EPYC 9355") == 0.615
    assert dram_eff_without("Xeon 6980P (1 of 2 sockets)") == 0.67
    assert dram_eff_without("Xeon Gold 6454S") == 0.73


def test_the_flash_attention_path_goes_by_a_sequences_query_rows():
    """On a CPU, attention over the KV cache takes 4·q·ctx FLOPs at the one-row rate for a decode row, however many
    sequences it batches (64 here), and at the tiled rate for a prompt of 64 tokens or more (two of 70 here)."""
    from moesim.sim.weights import weights_of

    c = cpu(cores=1, attn_gflops=1e-3, attn_tiled_gflops=4e-3)  # slow enough that the products bind
    hw = Hardware("cpu-only", None, None, cpu=c)
    w = weights_of(None, MODEL, "bf16")
    tokens, outputs, ctx = np.array([64.0, 140.0]), np.array([64.0, 2.0]), np.array([1e4, 1e4])
    slow = row_costs(MODEL, hw, tokens, ctx, w, LLAMA_CPP, outputs=outputs).pre
    fast = row_costs(MODEL, replace(hw, cpu=replace(c, attn_gflops=1e9, attn_tiled_gflops=1e9)), tokens, ctx, w,
                     LLAMA_CPP, outputs=outputs).pre
    products = 4 * MODEL.q_dim * ctx
    assert (slow - fast) == pytest.approx(products / np.array([1e6, 4e6]), rel=1e-4)  # less the cache's read


def test_a_prompt_reads_the_kv_cache_once_a_tile_of_query_rows():
    """ctx sums what each query row attends to; flash attention streams the cache once per tile of up to 64 query
    rows of a sequence (a 32k-token prompt's TTFT was 87.8 s on an RTX 4090, every row re-reading the cache). With
    FLOPs free, the attention's extra time over ctx = 0 is the cache's bytes over the rows that share a read: a
    decode row's sequences each read their own (1), a 32-token prompt's rows share (32), a 128-token prompt's
    tiles of 64; on a CPU, ggml's one-row path below 64 rows reads per row. A served step that mixes decodes
    with a prompt chunk divides only the chunk's share: adding the chunk never makes the step cheaper."""
    from moesim.sim.machine import GPU, Link
    from moesim.sim.weights import weights_of

    gpu = GPU("g", 1000.0, 1e9, 80.0, mem_eff=1.0)  # FLOPs free: the bytes bind
    hw = Hardware("g", gpu, Link("l", 32.0))
    w = weights_of(None, MODEL, "bf16")
    tokens, outputs = np.array([4.0, 32.0, 128.0]), np.array([4.0, 1.0, 1.0])
    ctx, prompt_ctx, rows = np.full(3, 4e6), np.array([0.0, 4e6, 4e6]), np.array([1.0, 32.0, 128.0])

    def extra(machine, *prompt):
        return row_costs(MODEL, machine, tokens, ctx, w, LLAMA_CPP, outputs, *prompt).pre - \
            row_costs(MODEL, machine, tokens, 0 * ctx, w, LLAMA_CPP, outputs).pre

    cache = MODEL.kv_width * 4e6 * 2.0
    assert extra(hw, prompt_ctx, rows) == pytest.approx(cache / np.array([1.0, 32.0, 64.0]) / 1e12, rel=1e-9)
    assert extra(hw) == pytest.approx(np.full(3, cache / 1e12), rel=1e-9)  # not a prompt's: every row reads
    c = cpu(cores=1, attn_gflops=1e12, attn_tiled_gflops=1e12)  # the products free: the read binds
    on_cpu = extra(Hardware("cpu-only", None, None, cpu=c), prompt_ctx, rows)
    reads = cache / min(c.dram_bw(), c.unpack_bw("f16"))
    assert on_cpu == pytest.approx(reads / np.array([1.0, 1.0, 64.0]), rel=1e-9)
    # 31 decodes reading 8,000 KV tokens each, then with a 64-token prompt beside them (its triangle, 2,080)
    decodes = row_costs(MODEL, hw, 31.0, 31 * 8000.0, w, LLAMA_CPP, 31.0).pre
    mixed = row_costs(MODEL, hw, 95.0, 31 * 8000.0 + 2080.0, w, LLAMA_CPP, 32.0, 2080.0, 64.0).pre
    assert mixed >= decodes
    assert kv_reads(hw, 31 * 8000.0 + 2080.0, 2080.0, 64.0) == 31 * 8000.0 + 2080.0 / 64
