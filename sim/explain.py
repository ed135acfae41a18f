"""A run's decode step, part by part, as a spreadsheet user would check it (``moesim plan --explain N``, ``moesim
sim run --explain``; ``--json`` carries the same).

The GPU's stream runs each layer's attention and router (with the shared experts, unless the engine overlaps them
with the CPU's routed experts), the engine's framework time, the experts' kernels, then once a step the embeddings,
dense layers and output head; where an expert's copy or the CPU's experts are not back when the stream needs them,
it waits. Those parts, the means over the measured decode steps of what the discrete-event loop added up
(``moesim.sim.des_loop``), sum to the step's time (TPOT) exactly, up to rounding. Beside the stream the host link
copies experts and the CPU computes its experts: their busy seconds a step, what they moved, and which of the three
binds (the stream's own work, where it never waited; else the busier of the link and the CPU). Then the constants
the durations came from, each with its source: the machine's (its spec sheet, and the shares of it a kernel reaches,
docs/hardware.md), the engine's (``moesim.sim.engines``), each expert's durations (``moesim.sim.costs``), and the
tokens/s interval (``moesim.sim.accuracy``: the published points' spread, or a validated machine's own; no constant
has an interval of its own).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from moesim.sim.accuracy import band, measured, prefill_band
from moesim.sim.des import DesResult, measured_decode
from moesim.sim.engines import ENGINES, UNNAMED
from moesim.sim.layer_split import shares_text
from moesim.sim.machine import VENDORS, Hardware
from moesim.sim.tensor_split import ALLREDUCE_US
from moesim.tracegen.models import ModelSpec

SHEET = "the machine's spec sheet: its preset or hardware file"
REACHED = "the share a kernel reaches (docs/hardware.md)"
FIGURE = "the machine's figure (docs/hardware.md: its default and source)"


@dataclass(frozen=True)
class Line:
    what: str
    value: float
    unit: str
    source: str = ""

    def __post_init__(self):
        object.__setattr__(self, "value", float(self.value))  # numpy's means become Python's (JSON)


@dataclass(frozen=True)
class Explanation:
    """``step``: the GPU stream's parts of a decode step (ms), which add up to ``tpot_ms``; ``beside``: the host
    link's and the CPU's work a step; ``binds``: what limits the step; ``constants``: what the durations came from."""

    tpot_ms: float
    step: tuple
    beside: tuple
    binds: str
    constants: tuple

    def as_dict(self) -> dict:
        return asdict(self)


def explain(r: DesResult, model: ModelSpec) -> Explanation:
    """``r``'s decode step part by part, on ``model`` (the one it was simulated on) and the machine as it was
    simulated (``DesResult.machine``: the engine's own threads, a drive a plan assumed)."""
    cost, layers, hw = r.costs, model.num_layers, r.machine
    rows = measured_decode(r.requests, r.config.workload.warmup)
    # (a measured [compute] table's layer time is the engine's own: no framework time is added to it)
    framework = r.framework_us * 1e-3 * layers if hw.compute is None else 0.0
    before = cost.pre_s[rows].mean() * layers * 1e3 - framework
    shared = cost.shared_s[rows].mean() * layers * 1e3
    once = cost.row_s[rows].mean() * 1e3
    compute, stall = r.compute_s * 1e3, r.stall_s * 1e3
    steps = max(r.decode_steps, 1)
    beside_cpu = bool(model.shared_experts) and bool(shared)  # the engine runs them beside the CPU's routed ones
    step = (Line("attention and router" + (", shared experts" if model.shared_experts and not beside_cpu else "")
                 + (", two all-reduces between GPUs" if hw.shares else ""), before, "ms", "every layer"),
            Line(f"{r.timed_as}'s framework time", framework, "ms", f"{framework / layers * 1e3:g} us a layer"),
            Line("shared experts beside the CPU's routed ones", shared, "ms", "every layer"),
            Line("expert kernels" + (" on the GPU" if hw.gpu is not None else ""),
                 max(0.0, compute - before - framework - shared - once), "ms",  # (0 to rounding where none ran)
                 f"{(1 - r.cpu_share) * r.accesses / steps:.1f} experts a step"),
            Line("embeddings, dense layers, output head" + (", the logits gathered" if hw.shares else
                                                             ", activations between GPUs" if hw.more_gpus else ""),
                 once, "ms", "once a step"),
            Line("waiting on copies, the CPU's experts or the SSD's reads", stall, "ms", ""))
    link, cpu = r.copy_s * 1e3, r.cpu_s * 1e3
    reads = r.bytes_ssd / cost.expert_bytes / steps if r.bytes_ssd else 0.0  # experts read from the SSD a step
    ssd = reads * cost.ssd_s * 1e3
    beside = (Line("host link busy", link, "ms", f"{r.loads / steps:.1f} experts copied on demand a step, "
                                                 f"{cost.expert_bytes / 1e6:.1f} MB each"),
              Line("host CPU computing experts", cpu, "ms", f"{r.cpu_share * r.accesses / steps:.1f} experts a step"),
              *((Line("SSD reading experts", ssd, "ms", f"{reads:.1f} experts read a step"),) if reads else ()))
    if stall <= 1e-3 * r.tpot_s * 1e3:
        binds = "the GPU's own work: nothing waited on a copy or the CPU"
    else:
        binds = max(((link, "the host link's copies"), (cpu, "the CPU's experts"), (ssd, "the SSD's reads")))[1]
    return Explanation(r.tpot_s * 1e3, step, beside, binds, _constants(r, model, hw))


def _constants(r: DesResult, model: ModelSpec, hw: Hardware) -> tuple:
    cost, out = r.costs, []
    for g, link in dict.fromkeys(hw.gpus):  # each kind of GPU once
        # (a GPU that shares the host's memory: its "link" is a copy within that memory)
        rate = "a copy within the shared memory: half its bandwidth" if g.unified else SHEET
        out += [Line(f"{g.name} memory bandwidth", g.hbm_gbps, "GB/s", SHEET),
                Line("... of it reached", g.mem_eff, "share", REACHED),
                Line(f"{g.name} dense bf16", g.tflops, "TFLOP/s", SHEET),
                Line("... of it reached", g.flop_eff, "share", REACHED),
                Line("a kernel launch", g.launch_us, "us", FIGURE),
                Line(f"{link.name} link", link.gbps, "GB/s", rate),
                Line("... of it a pinned copy reaches", link.efficiency, "share", REACHED),
                Line("... latency of a copy", link.latency_us, "us", FIGURE)]
    shares = r.config.hardware.tensor_split
    for i, layers in enumerate(hw.split):  # several GPUs: the layers each holds
        out.append(Line(f"{VENDORS[hw.gpu.vendor]}{i}'s layers (-ts), the output layer counted", layers, "layers",
                        "moesim.sim.layer_split: each GPU filled to the same share of its memory" if shares is None
                        else f"--tensor-split {shares_text(shares)}, placed as llama.cpp places it"))
    for i, share in enumerate(hw.shares):  # every layer split over them: each one's share of every matrix
        out.append(Line(f"{VENDORS[hw.gpu.vendor]}{i}'s share of every layer", share, "share",
                        "moesim.sim.tensor_split: an even share, as llama.cpp's without -ts" if shares is None
                        else f"--tensor-split {shares_text(shares)}"))
    if hw.shares:
        out.append(Line("an all-reduce of a row's activations", ALLREDUCE_US, "us", "moesim.sim.tensor_split: the "
                        "median of four published NCCL all-reduces on PCIe"))
    on_cpu = hw.cpu is not None and (r.cpu_share > 0 or hw.gpu is None)
    if on_cpu:
        c = hw.cpu
        out += [Line(f"{c.name} DRAM, a socket", c.dram_gbps, "GB/s", SHEET),
                Line("... of it a streaming read reaches", c.dram_eff, "share", REACHED),
                Line("threads computing", c.workers, "threads", "--threads, else every core"),
                Line("a barrier of those threads", c.barrier_s() * 1e6, "us", FIGURE),
                Line("a layer handed to the CPU", c.sync_us, "us", FIGURE)]
    engine = ENGINES.get(r.timed_as, UNNAMED)
    sources = dict(engine.sources)
    if r.framework_us and hw.compute is None:
        maker = hw.gpu is not None and hw.gpu.vendor in dict(engine.gpu_layer_us)
        out.append(Line(f"{engine.name}'s framework time a layer" + (f" on {hw.gpu.vendor}'s GPUs" if maker else ""),
                        r.framework_us, "us", sources["gpu_layer_us" if maker else "layer_us"]))
    if on_cpu:
        out.append(Line(f"{engine.name}'s barriers a CPU layer", engine.expert_barriers(model.top_k), "barriers",
                        sources.get("cpu_ops", "llama.cpp's figure")))
    out.append(Line("an expert's weights", cost.expert_bytes / 1e6, "MB", "the format's bits a weight"))
    if hw.gpu is not None:
        out.append(Line("an expert on the GPU, one token", cost.by_tokens[1] * 1e6, "us",
                        "its bytes at the memory rate, its FLOPs at the compute rate, the slower"))
    if hw.link is not None:
        out.append(Line("an expert's copy", cost.copy_s * 1e6, "us", "latency + bytes at the link's rate"))
    if hw.ssd is not None and r.bytes_ssd:
        out += [Line(f"SSD {hw.ssd.name}: its read rate", hw.ssd.gbps, "GB/s",
                     SHEET + " (the rate a read reaches: docs/hardware.md)"),
                Line("an expert's read from the SSD", cost.ssd_s * 1e6, "us", "latency + bytes at the drive's rate")]
    if on_cpu:
        out.append(Line("an expert on the CPU, one token", cost.cpu_by_tokens[1] * 1e6, "us",
                        "its bytes at the DRAM or unpack rate, the slower"))
    if r.tokens_per_s_low is not None:
        on = r.side
        low, high, held = band(hw, r.as_engine, on)
        out.append(Line(f"tokens/s, its 80% interval x{low:.2f} to x{high:.2f} of it", r.tokens_per_s, "tokens/s",
                        ("this machine's validation" if measured(hw) else f"the published {on}-side points' spread "
                         "(docs/fidelity.md)") + f", held out; such intervals held {held:.0%}"))
    if r.ttft_s_low is not None:
        low, high, held = prefill_band(r.prompt_growth > 0)
        grown = f"moesim's prompt time x{1 + r.prompt_growth:.2f} as its engine runs it; " if r.prompt_growth else ""
        out.append(Line(f"TTFT, its 80% interval x{1 / high:.2f} to x{1 / low:.2g} of it", r.ttft_s, "s",
                        f"{grown}the published prompts' spread (docs/fidelity.md, TTFT), held out; such intervals "
                        f"held {held:.0%}"))
    return tuple(out)
