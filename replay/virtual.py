"""The virtual backend: copies and kernels take exactly the simulator's durations, on a virtual clock.

It checks the replay's executor, not a machine: the executor drives it through the same calls as the
CPU and CUDA backends (``moesim.replay.backend``) and the same compute calls
as ``moesim.replay.compute.ComputeStream``, and every duration comes from the cost table the
discrete-event run used (``DesResult.costs``): a layer's attention and router take ``pre_s`` of its
row (and the shared experts an engine overlaps with the CPU's, ``shared_s``, from the routing time), the
dense layers and head ``row_s`` after its last layer, a copy goes through the simulator's own transfer function
from the layer's routing time, as the simulator issues it (copy engines, and the SSD and DRAM tiers when there
is one; a row's preloads from the row's start), a fused kernel and a per-expert kernel take ``moesim.sim.costs``'s
formulas; an expert run on the host CPU goes through the simulator's CPU stream (``cpu_run``) from the
routing time plus the hand-off, and the layer waits for its result. So the executor reproduces the
simulated time per token to the last bit exactly when it issues every copy at the moment the
simulator did and waits on exactly what the simulator waits on, in every strategy. No weights exist:
any model and capacity runs, with no disk or RAM for experts.
"""

from __future__ import annotations

import numpy as np

from moesim.replay.backend import Backend
from moesim.sim.costs import T_CPU_LAYER_FIXED, T_EXPERT_LAUNCH, T_LOWBIT_COPY, T_MOE_LAUNCH, expert_kernel_s, fused_kernel_s
from moesim.sim.des import DesResult
from moesim.sim.des_state import COPY_BUSY, COUNTERS, make_tiers
from moesim.sim.des_tiers import cpu_run, queue_copy, transfer


class VirtualBackend(Backend):
    """The copy engines and the compute stream of the simulated machine, on one clock (seconds)."""

    def __init__(self, sim: DesResult, num_objects: int, engines: int, dram_capacity: int | None):
        cost = sim.costs
        self.cost, self.now = cost, 0.0
        self.times = cost.scalar_times()
        self.dram_capacity = -1 if dram_capacity is None else dram_capacity
        self.tiers = make_tiers(num_objects, sim.requests.experts.shape[1], engines)
        self.counters = np.zeros(len(COUNTERS))
        self.route_at, self.cpu_back, self.current = 0.0, -1.0, 0
        self.routing = False  # between a layer's routing and the row's end: its copies start at ``route_at``

    # the backend interface
    def load(self, obj: int, buf: int) -> float:
        return transfer(self.tiers, obj, self._issue_at(), self.times, self.dram_capacity, self.counters)

    def load_lowbit(self, obj: int, buf: int) -> float:
        return queue_copy(self.tiers, self._issue_at(), self.times[T_LOWBIT_COPY])  # low-bit copies stay in DRAM

    def routed(self) -> None:
        """The layer's copies start at the routing time, beside the shared experts the GPU runs then."""
        self.route_at, self.routing = self.now, True
        self.now += self.cost.shared_s[self.current]

    def _issue_at(self) -> float:
        """When a copy issued now starts: in a layer, its routing time (as the simulator starts it), else now (a
        row's preloads)."""
        return self.route_at if self.routing else self.now

    def host(self, obj: int) -> int:
        return obj

    def resident(self, obj: int) -> None:
        return None

    def ready(self, done: float) -> None:
        self.now = max(self.now, done)

    def weights(self, buf: int):
        return None

    def clock(self) -> float:
        return self.now

    @property
    def copy_busy_s(self) -> float:
        return float(self.tiers.clocks[COPY_BUSY])

    def close(self) -> None:
        pass

    # the compute interface: the hidden state is the request row
    def row(self, row: int, tokens: int, ctx: float = 0, seqs: int = 1) -> int:
        return row

    def layer(self, row: int) -> int:
        self.now += self.cost.pre_s[row]
        self.current = row
        return row

    def scratch(self, row: int) -> None:
        return None

    def expert(self, row: int, out, weights, tokens: int) -> None:
        self.now += expert_kernel_s(self.cost.by_tokens, self.times[T_EXPERT_LAUNCH], tokens)

    def fused(self, row: int, out, run: list) -> None:
        tokens = np.array([t for _, t in run], np.int32)
        self.now += fused_kernel_s(self.cost.by_tokens, self.times[T_MOE_LAUNCH], tokens, tokens.size)

    def cpu(self, row: int, out, weights, tokens: int) -> None:
        """An expert on the host CPU: from the routing time and the hand-off, when the CPU is free; its
        result is back after the hand-off and the sync."""
        done = cpu_run(self.tiers, self.route_at + self.cost.handoff_s[row], self.cost.cpu_by_tokens[tokens])
        self.cpu_back = done + self.cost.handoff_s[row] + self.times[T_CPU_LAYER_FIXED]

    def combine(self, row: int, out) -> int:
        self.now, self.cpu_back = max(self.now, self.cpu_back), -1.0
        return row

    def finish(self, row: int) -> int:
        self.now += self.cost.row_s[row]
        self.routing = False
        return row
