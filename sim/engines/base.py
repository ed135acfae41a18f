"""What an engine is to moesim: the program a user runs a placement with, what of it changes durations, which
models and formats it runs, and the command that runs a placement with it. One module per engine
(``moesim.sim.engines``) holds one ``EngineSpec``."""

from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from moesim.sim.accuracy import PROMPT_GROWTH, measured
from moesim.sim.cpu_rates import EXPERT_BARRIERS, expert_barriers
from moesim.sim.machine import ONE_POOL, VENDORS

# the expert formats a GGUF holds (llama.cpp's types), and a transformers checkpoint's 16-bit ones
GGUF_FORMATS = ("fp32", "bf16", "f16", "q8_0", "q6_k", "q5_k", "q4_k", "q4_k_m", "q4_0", "iq4_xs", "iq4_nl", "q3_k",
                "q2_k", "mxfp4")
CHECKPOINT_FORMATS = ("bf16", "f16")


def every_setting(config) -> bool:
    """An engine's ``takes`` where it runs its placements under any settings."""
    return True


@dataclass(frozen=True)
class Launch:
    """What an engine's command is written from: the ``model`` and its experts' format (``fmt``), the run's
    ``config``, the layers whose experts it keeps on the CPU (``cpu_layers``: the placing strategy's parameter, 0 where
    none), and what of the machine and the run the command sets: a GPU or none, the CPU ``threads`` the run computes
    with and its ``sockets``, the KV tokens per sequence memory was sized for (``context``), the share of the
    GPU's memory the run uses (``vram_share``), and on several GPUs the layers each holds (``split``), or each one's
    share of every layer and the engine's flag that splits them so (``split_mode``); over several sockets, the layout
    of its threads and weights (``numa``)."""

    model: object
    fmt: str
    config: object
    cpu_layers: int
    gpu: bool
    threads: int
    sockets: int
    context: int
    vram_share: float
    split: tuple = ()  # several GPUs: the layers each holds, the output layer counted (``moesim.sim.layer_split``),
    # or with ``split_mode`` each one's share of every layer (``moesim.sim.tensor_split``)
    vendor: str = "nvidia"  # the GPUs' maker (``moesim.sim.machine.VENDORS``)
    split_mode: str = ""  # the engine's --split-mode where it splits every layer ("": whole layers, its default)
    numa: str = ""  # how its CPU threads and weights are laid out over the sockets ("": the engine's own ``numa``)

    @property
    def batch(self) -> int:
        return self.config.workload.batch

    @property
    def gguf(self) -> str:
        """The GGUF a llama.cpp-family command loads: the model file planned for, else one named for the model and the
        format (the user's own file of that format goes there), quoted for a shell."""
        model = self.model
        if model.file.endswith(".gguf") and self.config.model.dtype is None:
            return shlex.quote(model.file)
        return f"{(model.hf_id.rsplit('/', 1)[-1] or model.name)}-{self.fmt.upper()}.gguf"

    @property
    def checkpoint(self) -> str:
        """The transformers checkpoint a Python engine loads: the config.json's folder, else the Hugging Face id."""
        model = self.model
        if model.file and not model.file.endswith(".gguf"):
            return shlex.quote(str(Path(model.file).parent))
        return model.hf_id or model.name

    @property
    def capacity(self) -> int:
        """The GPU's expert slots (per layer, or in the pool), 0 without a cache."""
        capacity = self.config.cache.capacity
        return sum(capacity) if isinstance(capacity, tuple) else int(capacity)


@dataclass(frozen=True)
class EngineSpec:
    """An engine: its ``name`` as its users write it, ``summary`` and ``source`` (where it is published); the
    placements it runs (``runs``: strategy names, ``moesim.sim.strategies``) and, of those runs, the settings it
    has the mechanism for (``takes(config)``: a prefetcher, a cache that changes); the model families
    (``families``: transformers ``model_type``s, ``ModelSpec.family``) and expert formats (``formats``) it runs, and
    whether it loads a GGUF file as it is, whatever types its tensors hold (``loads_gguf``);
    ``release``: where a user gets it ("" for research code with no release a user can run); what it does that
    changes durations, each with where the figure comes from (``sources``: (field, source) pairs):

    - ``numa``: how it spreads CPU work over sockets unless told (``moesim.sim.machine.ONE_POOL``: one thread pool
      reading one socket's DRAM; ``PER_SOCKET``: a pool and a copy of the experts per socket; ``DISTRIBUTE``: every
      socket reading its share of one copy), and ``numa_options`` the other layouts a run may set (``numa``), its
      command writing the flag of each;
    - ``shared_overlap``: it computes the shared experts on the GPU while the CPU computes the routed ones;
    - ``cpu_ops``: thread barriers a CPU layer's routed experts take, ``a + b · top_k`` (``expert_barriers``);
    - ``offload_min_tokens``: a row of at least this many tokens has its CPU layers' experts copied to the GPU and
      run there (None: never); with ``offload_per_expert``, this many tokens for each expert on average, so a row of
      ``offload_tokens(E, k)``;
    - ``kernel``: the kind of GPU expert kernel it runs (``fused``, ``per-expert``; None: the run's setting), which a
      run named for it takes (a plan's row, ``--engine NAME``; ``auto`` keeps the run's setting);
    - ``threads``: the CPU threads it computes with whatever a user sets (0: the machine's, or ``--threads``), at
      most one a core, which a run named for it takes;
    - ``gpus``: the most GPUs it places a model's layers over (``moesim.sim.layer_split``; 1: one GPU);
    - ``tensor_mode``: its ``--split-mode`` for every layer split over the GPUs (``moesim.sim.tensor_split``; "": it
      has none), and ``tensor_families`` the model families it splits so;
    - ``vendors``: the makers of the GPUs its GPU backend runs on (``moesim.sim.machine.VENDORS``);
    - ``layer_us``: its framework's time per MoE layer and row, beyond the operations moesim times (interpreter,
      dequantisation, launches it does not overlap), which no spec sheet gives: learned from published points by
      cross-validation only (``moesim.experiments.crossval``), with its provenance in ``sources``;
    - ``layer_loop``: what runs its layers one after another: ``compiled`` (a C++ graph: the llama.cpp family) or
      ``python`` (a PyTorch model's forward). The cross-validation judges the Python engines' framework times
      together, as one cause, the interpreter, makes them (``moesim.experiments.crossval``'s pools);
    - ``gpu_layer_us``: (GPU maker, µs) pairs: its framework time per MoE layer where its GPU backend runs on that
      maker's GPUs (llama.cpp's Metal, ROCm and Vulkan, SYCL builds), in place of ``layer_us``; learned the same way
      (``on``);
    - ``prompt_growth``: a prompt's time as it runs it, over the prompt's operations moesim times, less one: one
      fraction for every engine's prefill (``moesim.sim.accuracy.PROMPT_GROWTH``, learned from published prompts by
      cross-validation only), which a run timed as its engine (``as_engine``) takes;

    and ``command(launch)``: the whole command (or configuration) that runs a placement with it (``Launch``), or
    "none: why" where none does."""

    name: str
    summary: str
    source: str
    runs: tuple
    command: Callable
    families: tuple = ()
    formats: tuple = ()
    loads_gguf: bool = False
    release: str = ""
    takes: Callable = every_setting
    numa: str = ONE_POOL
    numa_options: tuple = ()
    shared_overlap: bool = False
    cpu_ops: tuple = EXPERT_BARRIERS
    offload_min_tokens: int | None = None
    offload_per_expert: bool = False
    kernel: str | None = None
    threads: int = 0
    gpus: int = 1
    tensor_mode: str = ""
    tensor_families: tuple = ()
    vendors: tuple = tuple(VENDORS)
    layer_us: float = 0.0
    layer_loop: str = "compiled"
    gpu_layer_us: tuple = ()
    prompt_growth: float = PROMPT_GROWTH
    sources: tuple = ()

    @property
    def layouts(self) -> tuple:
        """The layouts over the sockets it runs: its own (``numa``), then those a run may set (``numa_options``)."""
        return (self.numa, *self.numa_options)

    def machine(self, hw):
        """``hw`` as this engine uses it: its CPU computing on the engine's own ``threads`` where it fixes them."""
        if not self.threads or hw.cpu is None:
            return hw
        cpu = dataclasses.replace(hw.cpu, threads=min(self.threads, hw.cpu.cores * hw.cpu.sockets))
        return dataclasses.replace(hw, cpu=cpu)

    def on(self, hw):
        """This engine as it runs on ``hw``: its framework time per layer that of its build on the machine's GPU maker
        where one was learned (``gpu_layer_us``; the cross-validation fits the whole time on those points); on a
        machine that carries measured rates (``moesim calibrate``'s), its prompts as measured, not grown."""
        learned = dict(self.gpu_layer_us).get(hw.gpu.vendor) if hw.gpu is not None else None
        changes = {} if learned is None else {"layer_us": learned}
        if measured(hw):
            changes["prompt_growth"] = 0.0
        return dataclasses.replace(self, **changes) if changes else self

    def expert_barriers(self, top_k: int) -> int:
        """The thread barriers of one CPU layer's routed experts."""
        return expert_barriers(top_k, self.cpu_ops)

    def offload_tokens(self, num_experts: int, top_k: int) -> float:
        """The fewest tokens of a row whose CPU layers' experts the engine runs on the GPU (inf: never)."""
        if self.offload_min_tokens is None:
            return float("inf")
        return math.ceil(self.offload_min_tokens * num_experts / top_k) if self.offload_per_expert \
            else self.offload_min_tokens

    def gpu_refusal(self, vendor: str | None) -> str:
        """Why this engine's GPU backend does not run on a GPU made by ``vendor`` ("" where it does, or no GPU)."""
        if vendor is None or vendor in self.vendors:
            return ""
        return f"{self.name} runs on {', '.join(self.vendors)} GPUs only, not {vendor}'s"

    def refuses(self, model, fmt: str, own_gguf: bool = False, vendor: str | None = None) -> str:
        """Why a user cannot run ``model`` with its experts in ``fmt`` on this engine ("" where they can): it has no
        release (or, the stand-in for none, runs nothing), its GPU backend does not run on the machine's GPU (made by ``vendor``; None: no GPU used), or it runs
        neither the model's family nor the format (``own_gguf``: ``fmt`` is a GGUF file's own storage, which an
        engine that ``loads_gguf`` runs as it is)."""
        if not self.runs:  # ``moesim.sim.engines.UNNAMED``
            return "no engine runs this placement with these settings"
        if not self.release:
            return "research code with no release to run"
        if self.gpu_refusal(vendor):
            return self.gpu_refusal(vendor)
        if model.family not in self.families:
            return f"{self.name} runs no {model.family} model (it runs {', '.join(self.families)})"
        if fmt not in self.formats and not (own_gguf and self.loads_gguf):
            return f"{self.name} runs experts in {', '.join(self.formats)} only"
        return ""
