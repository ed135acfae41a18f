"""Memory: what a configuration keeps in GPU memory and host RAM, whether it fits, and ``auto`` sizes.

GPU memory holds, in every strategy:

- every weight but the routed experts (``ModelSpec.non_expert_params`` at the non-expert precision);
- the KV cache of the batch: batch x (context + the trace's longest sequence) tokens, bf16;
- a reserve of ``GPU_RESERVE_GIB`` for the CUDA context, library workspaces and activations;
- the routed experts the strategy keeps there (``moesim.sim.strategies``): the cache's slots (C per
  cached layer, or C in a global pool) and every expert of the layers placed on the GPU;
- scratch buffers for one layer's experts (the widest request row) where an expert can run on the GPU
  without a slot: no cache (twice with a next-layer prefetcher, whose copies wait staged), a policy
  that declines misses (``bypasses``), a batch union wider than the cache, low-bit copies, and
  llama.cpp's offload of prefill rows.

Host RAM holds every expert that is not placed on the GPU, in the expert precision (with an SSD tier,
only the DRAM cache's experts), once per socket for an engine with a thread pool per socket (kTransformers' NUMA
build copies the experts to each socket's DRAM: its DeepSeek-V3 Q4_K_M tutorial needs 382 GB on one socket, 1 TB
on two), the low-bit copies a strategy keeps (``lowbit_dtype``), and ``HOST_RESERVE_GIB`` for the
operating system and the runtime. A machine without a GPU holds everything in its RAM, once: every weight, the KV
cache and the reserve. A size of 0 (a machine without that memory) is not checked.

Several GPUs each hold their own layers (``moesim.sim.layer_split``): each its layers' weights, KV cache and experts,
a reserve on every GPU, the scratch on the first, and each must fit its own memory. A GPU that shares the host's
memory (``unified``) holds what it holds within its share of that memory, and it counts against the RAM too.

``resolve`` turns ``capacity = "auto"`` into the most slots that fit and a placing strategy's ``auto`` layers
(``cpu_layers``) into the fewest CPU layers with which everything fits; a configuration that does not fit is refused
with the numbers. Sizes are GiB (2^30 bytes).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from moesim.errors import MoesimError, named
from moesim.policies import get_policy
from moesim.sim.config import AUTO, run_params
from moesim.sim.engines import engine_for
from moesim.sim.layer_split import as_given, balance, layer_bytes
from moesim.sim.machine import PER_SOCKET
from moesim.sim.strategies import CACHED, ON_CPU, ON_GPU, get_strategy, lowbit_dtype
from moesim.sim.tensor_split import held, shares_of
from moesim.tracegen.models import BYTES_PER_PARAM, ModelSpec

GIB = 2 ** 30
GPU_RESERVE_GIB = 1.0    # CUDA context (~0.3-0.5 GiB), cuBLAS workspace, activations at decode batch sizes
HOST_RESERVE_GIB = 4.0   # the operating system, Python and the engine's own code


@dataclass(frozen=True)
class Memory:
    """Bytes a configuration keeps on the GPU and on the host, and what each has (0: unknown)."""

    weights: float       # non-expert weights on the GPU
    kv: float            # KV cache
    reserve: float       # CUDA context, workspaces, activations
    experts: float       # routed experts resident on the GPU
    scratch: float       # buffers for experts run on the GPU without a slot
    host_experts: float  # experts (and low-bit copies) in host RAM
    host_reserve: float
    vram: float          # the GPU's memory
    ram: float           # the host's RAM
    host_other: float = 0.0  # a machine without a GPU: its other weights and KV cache
    host_copies: int = 1     # copies of the host's experts (one per socket for a NUMA engine)
    # several GPUs (``moesim.sim.layer_split``): the layers each holds, the bytes it holds and its memory; ``vram``
    # their sum
    split: tuple = ()
    shares: tuple = ()  # or each one's share of every layer (``moesim.sim.tensor_split``)
    per_gpu: tuple = ()
    gpu_limits: tuple = ()
    unified: bool = False    # the GPU's memory is the host's: what it holds counts against the RAM too

    @property
    def gpu(self) -> float:
        return self.weights + self.kv + self.reserve + self.experts + self.scratch

    @property
    def host(self) -> float:
        return self.host_experts + self.host_other + self.host_reserve + (self.gpu if self.unified else 0.0)

    @property
    def gpu_short(self) -> float:
        """Bytes of GPU memory missing (0 where it fits): on each GPU, with several."""
        if self.per_gpu:
            return sum(max(used - has, 0.0) for used, has in zip(self.per_gpu, self.gpu_limits))
        return max(self.gpu - self.vram, 0.0) if self.vram else 0.0

    @property
    def fits(self) -> bool:
        return not self.gpu_short and (not self.ram or self.host <= self.ram)

    def fields(self) -> dict:
        """What a result reports: GiB used and available (None where the machine does not say)."""
        return {"vram_gb": self.gpu / GIB, "ram_gb": self.host / GIB,
                "vram_limit_gb": self.vram / GIB or None, "ram_limit_gb": self.ram / GIB or None}

    def check(self, model: str, placement: str, hint: str, ram_hint: str) -> None:
        """Refuse, with the numbers, ``model`` with ``placement`` (in words) where it does not fit (``hint``: what
        to change where the GPU's memory is short, ``ram_hint`` where the host's RAM is)."""
        if self.gpu_short:
            raise DoesNotFit(f"{model} with {placement}", placement, self.gpu_parts(), hint, self)
        if self.ram and self.host > self.ram:
            raise DoesNotFit(f"{model} with {placement}", placement, self.host_parts(), ram_hint, self)

    def gpu_parts(self) -> str:
        """GPU memory needed, part by part, and what the GPU has."""
        g = lambda x: f"{x / GIB:.1f}"  # noqa: E731
        parts = (f"{g(self.gpu)} GiB of GPU memory ({g(self.experts)} experts + {g(self.weights)} other weights + "
                 f"{g(self.kv)} KV cache + {g(self.scratch)} scratch + {g(self.reserve)} reserve)")
        if self.per_gpu:
            held = ([f"{n} layers, the output layer counted" for n in self.split] if self.split else
                    [f"{share:.0%} of every layer" for share in self.shares])
            return parts + ", over its GPUs " + ", ".join(
                f"CUDA{i} {g(used)} of {g(has)} GiB ({what})"
                for i, (what, used, has) in enumerate(zip(held, self.per_gpu, self.gpu_limits)))
        return parts + f", the GPU has {g(self.vram)} GiB"

    def host_parts(self) -> str:
        """Host RAM needed, part by part, and what the host has."""
        return (f"{self.host / GIB:.1f} GiB of host RAM ({self.host_experts / GIB:.1f} experts"
                + (f" ({self.host_copies} copies, one per socket)" if self.host_copies > 1 else "") + " + "
                + (f"{self.host_other / GIB:.1f} other weights and KV cache + " if self.host_other else "")
                + (f"{self.gpu / GIB:.1f} the GPU's, in the same memory + " if self.unified else "")
                + f"{self.host_reserve / GIB:.1f} reserve), the host has {self.ram / GIB:.1f} GiB")

    def short(self) -> float:
        """GiB missing, GPU and host together (0 where it fits)."""
        return self.gpu_short / GIB + (max(self.host - self.ram, 0.0) if self.ram else 0.0) / GIB


class DoesNotFit(MoesimError):
    """A model with a placement (``placement``, in words) that does not fit the machine: ``parts`` is the memory it
    needs part by part and what the machine has, ``memory`` the numbers; the message adds ``hint``, what to
    change."""

    def __init__(self, what: str, placement: str, parts: str, hint: str, memory: Memory):
        super().__init__(f"{what} needs {parts}; {hint}")
        self.placement, self.parts, self.memory = placement, parts, memory
        self._args = (what, placement, parts, hint, memory)

    def __reduce__(self):  # it crosses process boundaries (a sweep's workers) whole
        return type(self), self._args


@dataclass(frozen=True)
class Footprint:
    """What the memory of a run depends on besides its configuration."""

    model: ModelSpec
    weight_bytes: float   # bytes per non-expert parameter
    expert_bytes: float   # one routed expert
    kv_tokens: float      # tokens the KV cache holds
    width: int            # the widest request row: one layer's experts at once
    prompt_rows: bool     # the trace has prefill rows (llama.cpp offloads them to the GPU)
    vram: float           # bytes (0: no GPU)
    ram: float
    cpu_only: bool = False  # no GPU: every weight on the host CPU
    sockets: int = 1        # the host CPU's sockets
    gpus: tuple = ()        # several GPUs: each one's memory, bytes, in device order (``vram`` their sum)
    unified: bool = False   # the GPU's memory is the host's (``vram``: the share of ``ram`` it may map)


def account(fp: Footprint, config) -> Memory:
    """The memory of ``config`` (its ``auto`` values resolved) on the machine ``fp`` describes."""
    model, eb = fp.model, fp.expert_bytes
    strategy = get_strategy(config.execution.strategy)
    params = run_params(strategy, config.execution.params)
    place = strategy.placement(model.num_layers, params)
    cached, on_gpu = int((place == CACHED).sum()), int((place == ON_GPU).sum())
    per_part = config.cache.slots(model.num_layers) if cached else np.zeros(1, np.int64)
    if config.cache.scope == "per-layer" and cached:
        per_part = per_part[place == CACHED]
    capacity, slots = int(per_part.min()), int(per_part.sum())  # the smallest partition's, and all
    lowbit = lowbit_dtype(strategy, params)
    if model.kind == "mole":  # lookup tables of vocab x d values per expert, on the host
        table = model.vocab * model.d_model * fp.weight_bytes
        return Memory(model.non_expert_params * fp.weight_bytes, model.kv_bytes(fp.kv_tokens), GPU_RESERVE_GIB * GIB,
                      0.0, 0.0, model.num_layers * model.num_experts * table, HOST_RESERVE_GIB * GIB, fp.vram, fp.ram)
    scratch = 0.0
    if cached:
        bypass = capacity == 0 or fp.width > capacity or get_policy(config.cache.composed).bypasses
        if bypass:
            twice = capacity == 0 and config.prefetch.prefetcher != "none"
            scratch = fp.width * eb * (2 if twice else 1)
        if lowbit is not None:
            scratch += fp.width * model.expert_params * BYTES_PER_PARAM[lowbit]
    if (place == ON_CPU).any() and fp.prompt_rows and not strategy.cache:
        scratch = max(scratch, fp.width * eb)
    copies = fp.sockets if engine_for(config).numa == PER_SOCKET else 1
    if fp.cpu_only:  # every expert in DRAM, or those an SSD tier's DRAM cache holds (the page cache of a mapped file)
        held = model.num_layers * model.num_experts if config.cache.dram_capacity is None else config.cache.dram_capacity
        return Memory(weights=0.0, kv=0.0, reserve=0.0, experts=0.0, scratch=0.0,
                      host_experts=copies * held * eb,
                      host_reserve=HOST_RESERVE_GIB * GIB, vram=0.0, ram=fp.ram,
                      host_other=model.non_expert_params * fp.weight_bytes + model.kv_bytes(fp.kv_tokens),
                      host_copies=copies)
    host_layers = model.num_layers - on_gpu
    if config.cache.dram_capacity is not None:
        host = config.cache.dram_capacity * eb
    else:
        host = host_layers * model.num_experts * eb
    host *= copies
    if lowbit is not None:
        host += cached * model.num_experts * model.expert_params * BYTES_PER_PARAM[lowbit]
    memory = Memory(weights=model.non_expert_params * fp.weight_bytes, kv=model.kv_bytes(fp.kv_tokens),
                    reserve=GPU_RESERVE_GIB * GIB, experts=(slots + on_gpu * model.num_experts) * eb, scratch=scratch,
                    host_experts=host, host_reserve=HOST_RESERVE_GIB * GIB, vram=fp.vram, ram=fp.ram,
                    host_copies=copies, unified=fp.unified)
    if len(fp.gpus) < 2:
        return memory
    if config.hardware.split_mode == "tensor":
        return _tensor_split(fp, memory, config.hardware.tensor_split)
    return _over_gpus(fp, memory, np.r_[np.zeros(model.dense_layers, bool), place == ON_GPU],
                      config.hardware.tensor_split)


def _tensor_split(fp: Footprint, memory: Memory, shares: tuple | None) -> Memory:
    """``memory`` of every layer split over several GPUs (``moesim.sim.tensor_split``): each GPU's share of what the
    GPUs hold, a reserve on every GPU, the scratch on the first."""
    split = shares_of(len(fp.gpus), shares)
    used = held(split, memory.weights + memory.kv + memory.experts, memory.reserve, memory.scratch)
    return replace(memory, reserve=memory.reserve * len(fp.gpus), shares=tuple(split.tolist()),
                   per_gpu=tuple(used.tolist()), gpu_limits=fp.gpus)


def _over_gpus(fp: Footprint, memory: Memory, gpu_experts: np.ndarray, shares: tuple | None) -> Memory:
    """``memory`` of whole layers placed over several GPUs (``moesim.sim.layer_split``; ``gpu_experts``: each layer's
    experts on the GPU, the dense layers first): the split that fills each to the same share of its memory, or the
    one a ``-ts`` of ``shares`` gives, what each holds (its layers' own weights, ``layer_weights``), and a reserve on
    every GPU."""
    model = fp.model
    items = layer_bytes(layer_weights(model) * fp.weight_bytes, memory.kv, gpu_experts,
                        model.num_experts * fp.expert_bytes)
    if shares is None:
        split, used = balance(items, np.array(fp.gpus), memory.reserve, memory.scratch)
    else:
        split, used = as_given(items, shares, memory.reserve, memory.scratch)
    return replace(memory, reserve=memory.reserve * len(fp.gpus), split=tuple(split.tolist()),
                   per_gpu=tuple(used.tolist()), gpu_limits=fp.gpus)


def layer_weights(model: ModelSpec) -> np.ndarray:
    """float64 [D + L + 1]: the weights but the routed experts of each dense layer, each MoE layer and the output
    layer, in parameters (``ModelSpec.non_expert_parts``): every layer's attention and norms; a dense layer's FFN, a
    MoE layer's router and shared experts; the input embeddings with the first layer (llama.cpp keeps them on the CPU;
    a run on one GPU counts them on it too), the output head and the final norm with the output layer."""
    parts, d = model.non_expert_parts, model.d_model
    dense, layers = model.dense_layers, model.dense_layers + model.num_layers
    head = model.vocab * d
    out = np.full(layers + 1, (parts["attention"] + parts["norms"] - d) / layers)
    out[dense:layers] += (parts["routers"] + parts["shared experts"]) / model.num_layers
    if dense:
        out[:dense] += parts["dense FFNs"] / dense
    out[0] += parts["embeddings"] - head
    out[-1] = head + d
    return out


def resolve(fp: Footprint, config, top_k: int):
    """``config`` with its ``auto`` values sized from memory, and its Memory; refuses what does not fit."""
    model = fp.model
    strategy = get_strategy(config.execution.strategy)
    places = strategy.places  # the parameter that places whole layers on the CPU: auto, the fewest that fit
    in_dram = config.cache.dram_capacity  # auto: sized last, from what the GPU's placement leaves in host RAM
    config = config.replace(dram_capacity=0) if in_dram == AUTO else config
    if places and run_params(strategy, config.execution.params)[places] == AUTO:
        # every layer split over several GPUs keeps every expert on them (``moesim.sim.tensor_split``): none, or it
        # does not fit
        tensor = config.hardware.split_mode == "tensor" and len(fp.gpus) > 1
        n = 0 if tensor else next((n for n in range(model.num_layers + 1) if not fp.cpu_only
                                   and account(fp, config.replace(**{places: n}, capacity=0)).fits), model.num_layers)
        config = config.replace(**{places: n})
    if not strategy.cache and config.cache.capacity != 0:
        config = config.replace(capacity=0)  # no cache: the layers are placed whole
    if config.cache.capacity == "auto":
        config = config.replace(capacity=0 if fp.cpu_only else _most_slots(fp, config, top_k))
    if in_dram == AUTO:
        config = config.replace(dram_capacity=_most_in_dram(fp, config))
    memory = account(fp, config)
    hint = (f"use {named('capacity', 'auto')}, a smaller {named('dtype')} or another {named('strategy')} (see "
            f"'moesim plan')" if strategy.cache or not places
            else f"put more layers on the CPU ({named(places)}), or use a smaller {named('dtype')}")
    # an SSD tier backs a GPU cache's misses, and the experts of the layers placed whole on the CPU (sim.run refuses
    # it elsewhere)
    ssd = not (strategy.cache and strategy.cpu) and (strategy.cpu or not fp.cpu_only)
    ram_hint = (f"use a smaller {named('dtype')} or {named('ram')}"
                + (f", or an SSD tier ({named('ssd')} with {named('dram_capacity')})" if ssd else ""))
    memory.check(model.name, _describe(config, model), hint, ram_hint)
    return config, memory


def _most_in_dram(fp: Footprint, config) -> int | None:
    """``dram_capacity`` ``auto``: the most experts host RAM holds beside everything else the run keeps there (each
    once per copy the engine keeps), at least 0 (then the host's shortfall is refused as any other); None where
    every expert a tier in front of the SSD could hold fits (nothing is read from the SSD)."""
    none, every = account(fp, config.replace(dram_capacity=0)), account(fp, config.replace(dram_capacity=None))
    per = fp.expert_bytes * none.host_copies
    if per <= 0 or every.host <= fp.ram:
        return None
    return min(max(0, int((fp.ram - none.host) // per)), round(every.host_experts / per))


def _most_slots(fp: Footprint, config, top_k: int) -> int:
    """The largest capacity from ``top_k`` up to every expert (per layer, or of the pool) that fits, else 0.

    The GPU memory grows with the capacity except where it reaches the widest request row (below it, misses
    bypass the cache through a row-wide scratch buffer), so each side of that step is searched by bisection."""
    most = fp.model.num_experts if config.cache.scope == "per-layer" else fp.model.num_layers * fp.model.num_experts
    fits = functools.cache(lambda c: account(fp, config.replace(capacity=c)).fits)
    for lo, hi in ((max(top_k, fp.width), most), (top_k, min(fp.width - 1, most))):
        if lo <= hi and fits(lo):
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
            return lo
    return 0


def _describe(config, model: ModelSpec) -> str:
    strategy = get_strategy(config.execution.strategy)
    held = config.cache.dram_capacity
    tier = "" if held is None else f", {held:,} experts in host RAM in front of the SSD"
    if not strategy.cache:
        return strategy.describe(run_params(strategy, config.execution.params), model.num_layers) + tier
    capacity = config.cache.capacity
    if isinstance(capacity, tuple):
        return (f"{sum(capacity)} experts over {len(capacity)} layers ({min(capacity)} to {max(capacity)} per layer) "
                f"on the GPU ({config.execution.strategy}){tier}")
    scope = "per layer" if config.cache.scope == "per-layer" else "in one pool"
    return f"{capacity} experts {scope} on the GPU ({config.execution.strategy}){tier}"
