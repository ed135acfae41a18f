"""A plan's row: a placement in a format as its engine runs it, what it gives, and how to run it."""

from __future__ import annotations

from dataclasses import dataclass, fields

from moesim.sim.accuracy import Estimate


@dataclass(frozen=True)
class PlanRow:
    """``capacity``: the GPU slots (per layer, or of the pool; a tuple where a split gives each layer its own), None
    without a cache; ``cpu_layers``: the layers whose experts a placing strategy keeps on the CPU, else None;
    ``tokens_per_s``: decode tokens/s at the plan's batch with its 80% interval, ``ttft_s`` the prompt's TTFT with
    its own; ``command``: the engine's whole command (or configuration) that runs the row, "none: why" where none
    does; ``apart``: why no engine a user can run gives the row (research code with no release, a family or format
    the engine does not run), "" for an answer; ``tied``: a row after the first whose tokens/s the published pairs
    do not tell apart from the first's (``moesim.sim.accuracy.tied``); ``learned``: its pins or its prefetcher learn
    from the trace simulated (no other given), so its tokens/s is an upper bound on other prompts; ``same_as``: an
    ``all-on-gpu`` row's candidates folded into it; ``rank``: 1 for the fastest answer."""

    model: str               # the model planned (several are ranked together: ``moesim.experiments.plan.ranked``)
    strategy: str
    dtype: str | None        # the experts' format as configured (None: the model file's own storage)
    format: str              # its name in the table
    storage: str
    policy: str | None
    prefetch: str | None
    capacity: object
    scope: str | None
    cpu_layers: int | None
    layers: int
    tokens_per_s: Estimate
    tpot_s: float
    ttft_s: Estimate | None  # seconds to the first token with its 80% interval (None: no prompt prefilled)
    vram_gb: float
    ram_gb: float
    hit_rate: float
    cpu_share: float
    engine: str
    command: str
    apart: str
    learned: bool
    framework_us: float      # the engine's framework time per MoE layer in the figure (0: none learned)
    side: str                # the side of its run, whose published band its interval is (``moesim.sim.accuracy.side``)
    gpu: bool = True         # it uses the machine's GPU (False: llama.cpp with the GPU left out, -ngl 0)
    from_ssd: str = ""       # where it reads experts from the SSD (a model file larger than RAM, mapped): in words
    on_gpus: str = ""        # several GPUs: the layers each holds, in words (``moesim.sim.layer_split.describe``)
    split_mode: str = ""     # several GPUs: layer (whole layers on each) or tensor (every layer split over them)
    same_as: tuple = ()
    rank: int = 0
    tied: bool = False       # the first answer's tokens/s is less than TIE_RATIO times this one's: not told apart

    def as_dict(self) -> dict:
        """The row as JSON gives it: its rank first, each estimate and its interval as ``tokens_per_s``,
        ``tokens_per_s_low`` and ``tokens_per_s_high`` where the estimate stands (``ttft_s`` likewise), ``same_as`` a
        list."""
        out = {"rank": self.rank}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("tokens_per_s", "ttft_s"):
                value = value or Estimate(None)
                out.update({f.name: value.mid, f"{f.name}_low": value.low, f"{f.name}_high": value.high})
            elif f.name == "same_as":
                out["same_as"] = list(value)
            elif f.name != "rank":
                out[f.name] = value
        return out
