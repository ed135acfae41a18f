"""Execution strategies and memory: closed forms that must come out exactly, and the memory account.

The machine is tests/dyadic.py's (every rate a power of two) with a host CPU whose rates are
powers of two too, so every duration is a dyadic rational and the engine's sums are exact.
"""

from dataclasses import replace

import numpy as np
import pytest

from moesim import simulate
from moesim.errors import MoesimError
from moesim.sim.hardware import get_hardware
from moesim.sim.machine import CPU, SSD
from moesim.sim.config import Config
from moesim.sim.memory import GIB, GPU_RESERVE_GIB, DoesNotFit, Footprint, account, resolve
from moesim.tracegen.models import get_model
from dyadic import COPY, EXPERT_BYTES, HW, LAT, LINK_BW, MEM_BW, MODEL, US, experts_s, pre_s, trace_of

DRAM_BW = 2.0 ** 32
CPU_ = CPU("test-cpu", cores=1, ghz=1.0, isa="avx2", dram_gbps=DRAM_BW / 1e9, ram_gb=1024, dram_eff=1.0, task_us=US, sync_us=US,
           barrier_base_us=0.0, barrier_thread_us=0.0,
           matmul_gflops=(("bf16", 2.0 ** 40 / 1e9),))
HWC = replace(HW, cpu=CPU_)
CPU_EXPERT = LAT + EXPERT_BYTES / DRAM_BW     # DRAM-bound: 2 * params * T / 2^40 is below it for T < 256
HANDOFF = 256 * 2 / LINK_BW                    # one token's activations, d = 256 in bf16, one way
SYNC = LAT


def steps(rows, experts=((0, 1), (2, 3))):
    return trace_of([list(map(list, experts))] * rows)


def test_all_experts_on_the_cpu_cost_the_dram_bound_time_per_layer():
    """cpu-experts with every layer on the CPU: per layer attention on the GPU, the activations to the host,
    k experts each streaming its weights from DRAM once, the results back."""
    trace = steps(4)
    r = simulate(trace, model=MODEL, hardware=HWC, strategy="cpu-experts", cpu_layers=2)
    assert EXPERT_BYTES / DRAM_BW > 2 * MODEL.expert_params / 2.0 ** 40  # DRAM-bound, not compute-bound
    for step in range(4):
        assert r.step_times[step] == 2 * (pre_s(step + 1) + HANDOFF + 2 * CPU_EXPERT + HANDOFF + SYNC)
    assert r.cpu_share == 1.0 and r.hit_rate == 0.0 and r.loads == 0 and r.bytes_h2d == 0
    assert r.cpu_s == 2 * 2 * CPU_EXPERT


def test_cpu_experts_read_from_the_ssd_what_the_page_cache_does_not_hold():
    """A model file larger than RAM, mapped as llama.cpp maps it: a CPU layer's expert the page cache (``dram_capacity``
    experts, LRU) lacks is read from the SSD when the CPU's threads reach it, then computed. None held: every expert
    is read every time, one after another with the compute; all four held: each is read once, on its first use,
    then runs as from DRAM."""
    hw = replace(HWC, ssd=SSD("test-ssd", gbps=1.073741824 / 4, latency_us=US))
    read = LAT + EXPERT_BYTES / 2.0 ** 28
    run = dict(model=MODEL, hardware=hw, strategy="cpu-experts", cpu_layers=2)
    none_held = simulate(steps(3), **run, dram_capacity=0)
    for step in range(3):
        assert none_held.step_times[step] == 2 * (pre_s(step + 1) + HANDOFF + 2 * (read + CPU_EXPERT) + HANDOFF + SYNC)
    assert none_held.bytes_ssd == 3 * 4 * EXPERT_BYTES
    held = simulate(steps(3), **run, dram_capacity=4)
    assert held.step_times[0] == none_held.step_times[0] and held.bytes_ssd == 4 * EXPERT_BYTES
    for step in (1, 2):
        assert held.step_times[step] == 2 * (pre_s(step + 1) + HANDOFF + 2 * CPU_EXPERT + HANDOFF + SYNC)
    with pytest.raises(MoesimError, match="strategy='hybrid' weighs a miss on the CPU against its copy"):
        simulate(steps(3), model=MODEL, hardware=hw, strategy="hybrid", capacity=2, dram_capacity=2)


def test_dram_capacity_auto_fills_host_ram_with_experts():
    """``auto``: the most experts host RAM holds beside what else it keeps (here 2.5 experts' room: 2); None where
    every expert fits (nothing is read from the SSD)."""
    model = get_model("olmoe-1b-7b")
    eb = model.expert_params * 2.0
    config = Config.build(strategy="cpu-experts", cpu_layers=model.num_layers, dram_capacity="auto")

    def fp(ram):
        return Footprint(model, 2.0, eb, 1024, 8, False, 0.0, ram, cpu_only=True)

    others = account(fp(0.0), config.replace(dram_capacity=0)).host
    assert resolve(fp(others + 2.5 * eb), config, model.top_k)[0].cache.dram_capacity == 2
    every = account(fp(0.0), config.replace(dram_capacity=None)).host
    assert resolve(fp(every), config, model.top_k)[0].cache.dram_capacity is None


def test_cpu_experts_places_the_first_layers_on_the_cpu_and_the_rest_on_the_gpu():
    trace = steps(3)
    r = simulate(trace, model=MODEL, hardware=HWC, strategy="cpu-experts", cpu_layers=1)
    for step in range(3):
        cpu_layer = pre_s(step + 1) + 2 * HANDOFF + 2 * CPU_EXPERT + SYNC
        assert r.step_times[step] == cpu_layer + pre_s(step + 1) + experts_s(2)  # layer 1 resident: no copy
    assert r.cpu_share == 0.5 and r.hit_rate == 0.5 and r.loads == 0


def test_compute_bound_cpu_expert_time_grows_with_its_tokens():
    """A format the CPU unpacks slowly: 2 * params * T / FLOP/s above the DRAM time, per expert's tokens."""
    slow = replace(CPU_, matmul_gflops=(("bf16", 2.0 ** 28 / 1e9),))
    trace = trace_of([[[0, 1], [2, 3]], [[0, 2], [1, 3]]] * 2)
    one = simulate(trace, model=MODEL, hardware=replace(HW, cpu=slow), strategy="cpu-experts", cpu_layers=2)
    compute = LAT + 2 * MODEL.expert_params / 2.0 ** 28
    assert compute > LAT + EXPERT_BYTES / DRAM_BW
    assert one.step_times[0] == 2 * (pre_s(1) + 2 * HANDOFF + 2 * compute + SYNC)


def test_cpu_miss_takes_the_cpu_exactly_when_it_is_faster_than_copy_plus_gpu():
    """Fiddler's rule per missed expert: the CPU iff cpu(T) < copy + gpu(T)."""
    trace = steps(3)
    fast = simulate(trace, model=MODEL, hardware=HWC, strategy="cpu-miss", capacity=0)
    assert CPU_EXPERT < COPY + EXPERT_BYTES / MEM_BW
    for step in range(3):
        assert fast.step_times[step] == 2 * (pre_s(step + 1) + 2 * HANDOFF + 2 * CPU_EXPERT + SYNC)
    assert fast.cpu_share == 1.0 and fast.loads == 0
    # a CPU a hair slower than copy + GPU loses every expert to the copy; a hair faster wins them all
    gpu_side = COPY + EXPERT_BYTES / MEM_BW
    for nudge, on_cpu in ((1 + 1e-9, False), (1 - 1e-9, True)):
        bw = EXPERT_BYTES / ((gpu_side - LAT) * nudge)
        r = simulate(trace, model=MODEL, hardware=replace(HW, cpu=replace(CPU_, dram_gbps=bw / 1e9)),
                     strategy="cpu-miss", capacity=0)
        assert (r.costs.cpu_by_tokens[1] < gpu_side) == on_cpu
        assert r.cpu_share == (1.0 if on_cpu else 0.0) and r.loads == (0 if on_cpu else trace.accesses)
    slow = simulate(trace, model=MODEL, hardware=replace(HW, cpu=replace(CPU_, dram_gbps=DRAM_BW / 2 ** 6 / 1e9)),
                    strategy="cpu-miss", capacity=0)
    assert slow.step_times.tolist() == [2 * (pre_s(s + 1) + 2 * COPY + experts_s(2)) for s in range(3)]


def test_cpu_miss_judges_each_expert_by_its_token_count():
    """A CPU that is compute-bound: one token's expert runs there, two tokens' expert is copied."""
    flops = 2 * MODEL.expert_params / (0.75 * (COPY + EXPERT_BYTES / MEM_BW))  # T=1 below, T=2 above
    cpu = replace(CPU_, matmul_gflops=(("bf16", flops / 1e9),), task_us=0.0)
    # two sequences in lockstep: layer 0 both choose {0, 1} (2 tokens each), layer 1 differ (1 token each)
    trace = trace_of([[[0, 1], [2, 3]], [[0, 1], [0, 1]]])
    trace = replace(trace, seq_ids=np.arange(2, dtype=np.int32), seq_offsets=np.array([0, 1, 2]),
                    steps=np.zeros(2, np.int32))
    r = simulate(trace, model=MODEL, hardware=replace(HW, cpu=cpu), strategy="cpu-miss", capacity=0, batch=2)
    cpu_s = r.costs.cpu_by_tokens
    assert cpu_s[1] < COPY + EXPERT_BYTES / MEM_BW < cpu_s[2]
    assert r.cpu_share == 4 / 6 and r.loads == 2  # layer 0's two experts copied, layer 1's four on the CPU


def test_fiddler_pins_popular_experts_and_runs_a_hit_beside_a_cpu_miss():
    """cpu-miss + static + popular preload is Fiddler: the GPU runs the pinned expert while the CPU runs the
    miss; the layer ends when both are done. A pin whose copy is still in flight when its layer routes runs on
    the CPU where the CPU hands it back before the copy lands and the GPU runs it (the four preloads queue on the one
    engine, 733 us each, landing 0.73-2.93 ms into the run): a step waits on no copy the CPU beats."""
    trace = trace_of([[[0, 1], [0, 1]]] * 6 + [[[0, 2], [0, 2]]])
    r = simulate(trace, model=MODEL, hardware=HWC, policy="static", capacity=2, strategy="cpu-miss",
                 prefetch="popular", decisions=True)
    cpu_part = 2 * HANDOFF + CPU_EXPERT + SYNC
    assert cpu_part > experts_s(1) and COPY > cpu_part + CPU_EXPERT
    assert r.step_times[0] == 2 * (pre_s(1) + cpu_part + CPU_EXPERT)  # every pin in flight: both on the CPU
    assert r.step_times[6] == 2 * (pre_s(7) + cpu_part)  # the pins landed: a hit beside a CPU miss
    on_cpu = r.decisions[r.decisions[:, 2] == 4]  # EV_CPU: (row, layer, event, expert, slot)
    assert on_cpu[on_cpu[:, 0] == 0, 3].tolist() == [0, 1, 4, 5] and r.loads == 0
    assert r.hits + len(on_cpu) == 28 and r.cpu_share == len(on_cpu) / 28


def test_a_cache_nothing_fills_is_refused():
    """On the dyadic machine the CPU beats a copy at one token, so cpu-miss runs every decode miss there: with no
    prefetcher its cache never fills (it was charged GPU memory and changed nothing); with the popular preload,
    Fiddler's own, the pins come in."""
    with pytest.raises(MoesimError, match="strategy cpu-miss runs every miss of this run on the CPU .* the cache of "
                                          "capacity=2 never fills"):
        simulate(steps(3), model=MODEL, hardware=HWC, policy="lru", capacity=2, strategy="cpu-miss")
    pinned = simulate(steps(3), model=MODEL, hardware=HWC, policy="static", capacity=2, strategy="cpu-miss",
                      prefetch="popular")
    assert pinned.prefetch_loads == 4 and simulate(steps(3), model=MODEL, hardware=HWC, capacity=0,
                                                   strategy="cpu-miss").cpu_share == 1.0
    light = steps(3)  # every miss light: low-bit copies into scratch, no CPU; not the CPU strategies' refusal
    light.weights = np.full((3, 2, 2), 0.5, np.float32)
    assert simulate(light, model=MODEL, hardware=HW, capacity=2, strategy="lowbit-miss", lowbit_threshold=1.0,
                    lowbit_dtype="int4").lowbit_share == 1.0


def test_a_late_hit_is_decided_once_the_layers_misses_are_queued_on_the_cpu():
    """Layer 1 routes experts 2 and 3: 2 was prefetched and its copy is still in flight, 3 missed. The miss must run
    on the CPU; the prefetched expert goes there only if the CPU, behind the miss, would hand it back before its
    copy lands and the GPU runs it. Here it would not: it waits on the GPU beside the CPU's miss (decided before
    the miss was queued, it went to the CPU and the miss queued behind it: a slower layer)."""
    cpu = LAT + EXPERT_BYTES / (DRAM_BW / 2)  # a CPU half as fast: an expert 367 us, a copy 733 us
    slow_cpu = replace(HWC, cpu=replace(CPU_, dram_gbps=DRAM_BW / 2 / 1e9))
    trace = trace_of([[[0, 1], [2, 3]]] * 4, spec=[[[2, 0], [0, 1]]] * 4)  # spec[row, l]: layer l + 1's guess
    r = simulate(trace, model=MODEL, hardware=slow_cpu, policy="lru", capacity=2, strategy="hybrid",
                 prefetch="speculative", decisions=True)
    layer0 = pre_s(1) + 2 * HANDOFF + 2 * cpu + SYNC  # both of layer 0's misses on the CPU
    route1 = layer0 + pre_s(1)
    cpu_back = route1 + 2 * HANDOFF + cpu + SYNC  # expert 3
    # the engine: layer 0's fill of expert 0, then the prefetches of layer 1's 2 and 0, from layer 0's routing
    gpu_done = max(route1, pre_s(1) + 2 * COPY) + experts_s(1)
    assert route1 + 2 * HANDOFF + 2 * cpu + SYNC > gpu_done > cpu_back  # behind the miss the CPU is later
    assert r.step_times[0] == gpu_done
    first_row_layer1 = r.decisions[(r.decisions[:, 0] == 0) & (r.decisions[:, 1] == 1)]
    assert first_row_layer1[:, 2:4].tolist() == [[4, 7], [0, 6]]  # the miss on the CPU, then the hit on the GPU


def test_cpu_miss_shows_the_policy_the_misses_it_runs_on_the_cpu():
    """Fiddler's rule keeps a miss run on the CPU out of the cache, but the policy sees it (``on_miss``), as in every
    strategy: ARC's target T1 size p moves only when a miss finds its expert in a ghost list. At batch 1 on an RTX
    4090 every miss runs on the CPU (no demand load), and the history prefetcher's copies evict into the ghosts."""
    from moesim.sim.des import prepare_des
    from moesim.tracegen.io import load_trace

    prepared = prepare_des(load_trace("bundled"), Config.build(dtype="q4_k", other_dtype="q4_k", strategy="cpu-miss",
                                                               policy="arc", capacity=2, prefetch="history"),
                           get_model("mixtral-8x7b"), get_hardware("rtx4090"))
    r = prepared.simulate()
    arc = next(st for st in prepared.run.policy_state if hasattr(st, "p"))
    assert r.loads == 0 and r.prefetch_loads > 0 and r.cpu_share > 0.5
    assert arc.p.max() > 0  # a CPU miss found its expert in B1 (0 everywhere when the policy did not see them)


def test_hybrid_computes_misses_on_the_cpu_and_fills_the_cache_behind():
    """Misses run on the CPU; a fill starts only on a copy engine idle at the layer's routing time, so a layer's
    second miss, behind the first one's copy on the one engine, stays on the CPU and is filled a step later (fills
    queued behind one another made later hits wait on them: more GPU memory gave fewer tokens/s). With copies
    shorter than a CPU layer (a link 4x the dyadic one's) every layer's first miss is filled."""
    link_bw = 4 * LINK_BW
    fast = replace(HWC, link=replace(HWC.link, gbps=HWC.link.gbps * 4))
    handoff = 256 * 2 / link_bw
    assert LAT + EXPERT_BYTES / link_bw < pre_s(1) + 2 * handoff + 2 * CPU_EXPERT + SYNC  # a copy fits a layer
    r = simulate(steps(6), model=MODEL, hardware=fast, policy="lru", capacity=2, strategy="hybrid", decisions=True)
    assert r.step_times[0] == 2 * (pre_s(1) + 2 * handoff + 2 * CPU_EXPERT + SYNC)  # waits for no copy
    fills = r.decisions[r.decisions[:, 2] == 6]  # EV_FILL: (row, layer, event, expert, slot)
    assert fills[:, :2].tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]  # one a layer a step, two steps
    assert fills[:, 3].tolist() == [0, 6, 1, 7]  # each layer's first miss, then its second
    assert r.fills == 4 and r.loads == 0 and r.hits == 2 + 4 * 4  # a hit a layer in step 1, all of them after
    assert r.step_times[5] == 2 * (pre_s(6) + experts_s(2))  # once landed, a step is GPU only
    # on the dyadic link a copy (733 us) outlasts a CPU layer (378 us): the engine is still busy at the next
    # layer's routing, whose misses stay on the CPU; never a queue of fills
    slow = simulate(steps(6), model=MODEL, hardware=HWC, policy="lru", capacity=2, strategy="hybrid", decisions=True)
    assert slow.step_times[0] == 2 * (pre_s(1) + 2 * HANDOFF + 2 * CPU_EXPERT + SYNC)
    assert (slow.decisions[:, 2] == 6).sum() == slow.fills == 4 and slow.fills < 2 * 4 + 1
    # the oracle's copies of layer 1's experts are still in flight at its routing, and the CPU beats them: they run
    # there, and the step is the step without a prefetcher (it waited on the copies before 2026-11-27)
    oracle = simulate(steps(6), model=MODEL, hardware=HWC, policy="lru", capacity=2, strategy="hybrid",
                      prefetch="oracle", decisions=True)
    assert oracle.decisions[:8, 2].tolist() == [4, 6, 4, 2, 2, 4, 4, 2]  # cpu, fill, cpu, 2 prefetches, 2 cpu, ...
    assert oracle.step_times[0] == slow.step_times[0] and oracle.step_times.sum() < slow.step_times.sum()


def test_hybrid_with_more_slots_is_never_slower_on_the_bundled_trace():
    """Mixtral at Q4_K on an RTX 4090, LRU: 0, 2, 3, 4 and 6 slots a layer (with fills queued behind one another,
    2 slots gave 6.2 tokens/s against 8.8 with none)."""
    from moesim.tracegen.io import load_trace

    trace = load_trace("bundled")
    rates = [simulate(trace, hardware="rtx4090", dtype="q4_k", strategy="hybrid", policy="lru", capacity=c).tokens_per_s
             for c in (0, 2, 3, 4, 6)]
    assert rates == sorted(rates), rates


def test_hybrid_with_a_static_cache_copies_the_pins_once():
    """Each pin is copied once, as the one engine frees (a copy outlasts a CPU layer here: a layer's pins land a
    step apart), and never again; a pin still in flight runs on the CPU while that is sooner; once they are in, a
    step is GPU only."""
    r = simulate(steps(10), model=MODEL, hardware=HWC, policy="static", capacity=2, strategy="hybrid", decisions=True)
    fills = r.decisions[r.decisions[:, 2] == 6]
    assert r.fills == 4 and sorted(fills[:, 3].tolist()) == [0, 1, 6, 7]
    assert r.step_times[9] == 2 * (pre_s(10) + experts_s(2))


def test_lowbit_miss_fetches_the_low_precision_copy_of_a_light_expert():
    trace = steps(3)
    trace.weights = np.tile(np.array([[0.875, 0.125]], np.float32), (3, 2, 1))
    r = simulate(trace, model=MODEL, hardware=HW, policy="lru", capacity=0, strategy="lowbit-miss",
                 lowbit_threshold=0.25, lowbit_dtype="int4")
    int4 = (4 + 16 / 128) / 8  # bytes a parameter: 4-bit values and an fp16 scale per group of 128, 33/64
    lowbit = LAT + MODEL.expert_params * int4 / LINK_BW
    for step in range(3):
        assert r.step_times[step] == 2 * (pre_s(step + 1) + COPY + lowbit + experts_s(2))
    assert r.lowbit_share == 0.5 and r.lowbit_weight == 0.125
    assert r.bytes_h2d == 6 * EXPERT_BYTES + 6 * MODEL.expert_params * int4
    with pytest.raises(MoesimError, match="no weights"):
        simulate(steps(2), model=MODEL, hardware=HW, capacity=0, strategy="lowbit-miss")


def test_strategies_refuse_what_they_cannot_do():
    with pytest.raises(MoesimError, match="no \\[cpu\\]"):
        simulate(steps(2), model=MODEL, hardware=HW, strategy="hybrid", capacity=2)
    with pytest.raises(MoesimError, match="no cache for a prefetcher"):
        simulate(steps(2), model=MODEL, hardware=HWC, strategy="cpu-experts", cpu_layers=1, prefetch="oracle")
    with pytest.raises(MoesimError, match="takes no parameter 'cpu_layers'"):
        simulate(steps(2), model=MODEL, hardware=HWC, strategy="hybrid", cpu_layers=1)
    with pytest.raises(MoesimError, match="more than the model's 2"):
        simulate(steps(2), model=MODEL, hardware=HWC, strategy="cpu-experts", cpu_layers=3)


# ---- memory ----

def test_mixtral_parameters_add_up_to_the_published_count():
    """46,702,792,704: Mixtral-8x7B's parameter count (its model card); experts plus everything else."""
    m = get_model("mixtral-8x7b")
    assert m.num_layers * m.num_experts * m.expert_params + m.non_expert_params == 46_702_792_704


def test_a_cache_that_does_not_fit_is_refused_with_the_numbers(mixtral):
    with pytest.raises(MoesimError, match=r"needs 46\.0 GiB of GPU memory \(42\.0 experts .* the GPU has 24\.0 GiB"):
        simulate(mixtral, policy="lru", capacity=4, hardware="rtx4090", dtype="bf16")


def test_capacity_auto_is_the_most_slots_that_fit(mixtral):
    m = get_model("mixtral-8x7b")
    vram = 24 * GIB
    fixed = m.non_expert_params * 2 + GPU_RESERVE_GIB * GIB + m.kv_bytes(int(np.diff(mixtral.seq_offsets).max()))
    for dtype, per_param in (("int4", (4 + 16 / 128) / 8), ("fp8", 1.0)):  # int4: an fp16 scale per 128 weights
        eb = m.expert_params * per_param
        r = simulate(mixtral, policy="lru", capacity="auto", hardware="rtx4090", dtype=dtype)
        c = r.capacity
        assert fixed + c * 32 * eb <= vram < fixed + (c + 1) * 32 * eb
        assert r.vram_gb == pytest.approx((fixed + c * 32 * eb) / GIB) and r.vram_limit_gb == 24
        assert r.ram_gb == pytest.approx((256 * eb) / GIB + 4)
    assert simulate(mixtral, policy="lru", capacity="auto", hardware="rtx4090", dtype="bf16").capacity == 0


@pytest.mark.parametrize("scope", ["per-layer", "global"])
@pytest.mark.parametrize("width, policy, prefetcher", [(8, "lru", "none"), (20, "lru", "none"), (20, "gamma", "none"),
                                                       (20, "lru", "speculative")])
def test_capacity_auto_is_the_largest_capacity_that_fits_by_a_full_scan(scope, width, policy, prefetcher):
    """resolve's capacity equals a scan of every capacity from the widest down to top-k, then 0, keeping the first
    that fits, on machines whose GPU memory lands on every step of the account (the scratch buffer of a cache
    narrower than a request row included)."""
    model, top_k = get_model("qwen3-30b-a3b"), 8
    config = Config.build(policy=policy, prefetch=prefetcher, scope=scope, capacity="auto")
    most = model.num_experts if scope == "per-layer" else model.num_layers * model.num_experts
    choices = list(range(most, top_k - 1, -1)) + [0]

    def fp(vram):
        return Footprint(model, 2.0, model.expert_params * 2.0, 1024, width, False, vram, 0.0)

    gpu = {c: account(fp(1.0), config.replace(capacity=c)).gpu for c in choices}
    edges = sorted({g + d for g in gpu.values() for d in (-1.0, 0.0)})[::7] + [gpu.get(width - 1, 1.0), gpu[width] - 1]
    for vram in edges:
        want = next((c for c in choices if gpu[c] <= vram), None)
        if want is None:
            with pytest.raises(DoesNotFit):
                resolve(fp(vram), config, top_k)
        else:
            assert resolve(fp(vram), config, top_k)[0].cache.capacity == want


def test_cpu_layers_auto_is_the_fewest_that_fit(mixtral):
    m = get_model("mixtral-8x7b")
    r = simulate(mixtral, strategy="cpu-experts", hardware="rtx4090", dtype="bf16", cpu_layers="auto")
    n = r.config.execution.params["cpu_layers"]
    fixed = m.non_expert_params * 2 + GPU_RESERVE_GIB * GIB + m.kv_bytes(int(np.diff(mixtral.seq_offsets).max()))
    eb = m.expert_params * 2
    assert fixed + (32 - n) * 8 * eb <= 24 * GIB < fixed + (33 - n) * 8 * eb
    assert r.cpu_share == pytest.approx(n / 32)


def test_vram_and_ram_overrides(mixtral):
    r = simulate(mixtral, policy="lru", capacity=4, hardware="rtx4090", vram=48)
    assert r.vram_limit_gb == 48 and r.tpot_s > 0
    with pytest.raises(MoesimError, match="host RAM"):
        simulate(mixtral, policy="lru", capacity=4, hardware="rtx4090", vram=48, ram=64)
    assert get_hardware("rtx4090", vram=12).gpu.hbm_gb == 12


def test_a_strategy_is_one_module_registered():
    """A strategy written as its own module — a placement, the actions of its misses — runs once it is in
    the registry, with no other change: here one that computes every miss on the host CPU. Its misses run
    as cpu-miss's CPU misses do (the same engine action), so where cpu-miss sends every miss to the CPU
    (its rule: the CPU is faster) the two give the same times."""
    from moesim.sim.strategies import STRATEGIES
    from moesim.sim.strategies.base import A_CPU, StrategySpec, all_cached

    spec = StrategySpec("every-miss-on-cpu", "a test's", all_cached,
                        lambda cells, params: np.full(cells.tokens.shape, A_CPU, np.int8), (A_CPU,), cache=True,
                        cpu=True, prefetch=True)
    trace = steps(4, experts=((0, 1), (2, 3)))
    fast_cpu = replace(HWC, cpu=replace(CPU_, dram_gbps=2.0 ** 40 / 1e9))  # the CPU beats copy + GPU
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(STRATEGIES, spec.name, spec)
        mine = simulate(trace, model=MODEL, hardware=fast_cpu, strategy=spec.name, capacity=0)
    fiddler = simulate(trace, model=MODEL, hardware=fast_cpu, strategy="cpu-miss", capacity=0)  # (a cache: refused)
    assert fiddler.cpu_share == 1.0 and fiddler.loads == 0  # every miss on the CPU under Fiddler's rule too
    assert mine.step_times.tolist() == fiddler.step_times.tolist() and mine.cpu_share == 1.0


def test_a_strategys_actions_are_checked_against_what_it_declares():
    """A strategy whose ``miss_actions`` gives an action it does not declare is refused, naming it."""
    from moesim.sim.strategies import STRATEGIES
    from moesim.sim.strategies.base import A_CPU_FILL, A_LOAD, StrategySpec, all_cached

    spec = StrategySpec("says-one", "a test's", all_cached,
                        lambda cells, params: np.full(cells.tokens.shape, A_CPU_FILL, np.int8), (A_LOAD,), cache=True,
                        cpu=True, prefetch=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(STRATEGIES, spec.name, spec)
        with pytest.raises(MoesimError, match="strategy says-one: its miss_actions"):
            simulate(steps(2), model=MODEL, hardware=HWC, strategy=spec.name, capacity=2)


@pytest.mark.parametrize("allowed", [(0,), (0, 1), (2,), (0, 3), (1, 2), (0, 1, 2, 3)])
def test_the_actions_check_agrees_with_a_membership_test(allowed):
    """``run._all_in`` (a range check where it suffices) says what element-by-element membership says."""
    from moesim.sim.run import _all_in

    rng = np.random.default_rng(7)
    cases = [np.array([], np.int8), np.array([0.5]), np.array([1.0, 2.0]), np.array([-2 ** 62, 2 ** 62]),
             np.array([0, 300], np.int64)]
    cases += [rng.choice(np.array(values, np.int8), size=(5, 3, 2)) for values in ((0,), (0, 1), (0, 3), (1, 2, 3),
                                                                                  (2,), (0, 1, 2, 3), (-1, 0))]
    for values in cases:
        assert _all_in(values, allowed) == bool(np.isin(values, allowed).all()), (values, allowed)
