"""The CUDA backend: every expert in pinned host memory, GPU buffers, a copy stream and the compute stream.

It runs the decisions as an offloading engine would: the router's choice is read back to the host
(the compute stream is synchronised once per layer, ``routed``); copies are queued on one copy
stream in the simulator's order, each a single ``non_blocking`` DMA from pinned memory followed by
an event the compute stream waits on before the expert that reads it; a copy into a buffer first
waits for the event recorded after the last compute that read that buffer. Weights are bf16,
random and seeded. The backend interface: ``moesim.replay.backend``.
"""

from __future__ import annotations

from moesim.errors import MoesimError, named
from moesim.host import available_ram
from moesim.replay.backend import Backend
from moesim.replay.compute import require_torch
from moesim.tracegen.models import ModelSpec

BYTES = 2  # bf16


def require_cuda():
    torch = require_torch()
    if not torch.cuda.is_available():
        raise MoesimError(f"{named('backend', 'cuda')} needs a CUDA GPU and a CUDA build of torch; torch "
                          f"{torch.__version__} sees none here: use {named('backend', 'cpu')}")
    return torch


def check_fits(model: ModelSpec, n_buffers: int) -> str | None:
    """Why the pinned experts or the GPU buffers would not fit (None: they fit)."""
    torch = require_cuda()
    expert = BYTES * 3 * model.d_model * model.d_expert
    host = expert * model.num_experts * model.num_layers
    free_ram = available_ram()
    # the buffers, and one layer's experts while the random weights are made
    on_gpu = expert * (n_buffers + model.num_experts)
    free_gpu = torch.cuda.mem_get_info()[0]
    if free_ram is not None and host > 0.5 * free_ram:
        return f"its experts take {host / 1e9:.1f} GB of pinned host memory, {free_ram / 1e9:.1f} GB is available"
    if on_gpu > 0.8 * free_gpu:
        return (f"{n_buffers} GPU buffers need {on_gpu / 1e9:.1f} GB, {torch.cuda.get_device_name()} has "
                f"{free_gpu / 1e9:.1f} GB free")
    return None


class CudaBackend(Backend):
    def __init__(self, model: ModelSpec, n_buffers: int, seed: int = 0):
        self.torch = torch = require_cuda()
        numel, e = 3 * model.d_model * model.d_expert, model.num_experts
        self.host = torch.empty((model.num_layers * e, numel), dtype=torch.bfloat16, pin_memory=True)
        gen = torch.Generator(device="cuda").manual_seed(seed)
        for layer in range(model.num_layers):
            block = torch.randn((e, numel), generator=gen, device="cuda", dtype=torch.bfloat16)
            self.host[layer * e:(layer + 1) * e].copy_(block.mul_(model.d_model ** -0.5))
        del block
        self.buffers = torch.zeros((max(n_buffers, 1), numel), dtype=torch.bfloat16, device="cuda")
        self.copy_stream = torch.cuda.Stream()
        self.freed: list = [None] * self.buffers.shape[0]
        self.copies: list = []  # (start, end) events of every copy, for the copy stream's busy time
        torch.cuda.synchronize()

    def load(self, obj: int, buf: int):
        torch, stream = self.torch, self.copy_stream
        start, done = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            if self.freed[buf] is not None:
                stream.wait_event(self.freed[buf])
            start.record(stream)
            self.buffers[buf].copy_(self.host[obj], non_blocking=True)
            done.record(stream)
        self.copies.append((start, done))
        return done

    def ready(self, handle) -> None:
        self.torch.cuda.current_stream().wait_event(handle)

    def weights(self, buf: int):
        return self.buffers[buf]

    def release(self, buf: int) -> None:
        event = self.torch.cuda.Event()
        event.record(self.torch.cuda.current_stream())
        self.freed[buf] = event

    def routed(self) -> None:
        self.torch.cuda.current_stream().synchronize()

    def finish_step(self) -> None:
        self.torch.cuda.current_stream().synchronize()

    def copy_mark(self) -> int:
        """The copies issued so far, counted (their busy time would wait for the copy stream)."""
        return len(self.copies)

    def copy_busy_since(self, mark: int) -> float:
        self.copy_stream.synchronize()
        return sum(start.elapsed_time(end) for start, end in self.copies[mark:]) / 1e3

    def close(self) -> None:
        self.torch.cuda.synchronize()
        self.host = self.buffers = None
        self.freed, self.copies = [], []
        self.torch.cuda.empty_cache()
