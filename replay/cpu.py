"""The CPU backend: experts in files on disk, read into RAM slots by a reader thread, computed with torch.

This is the machine the simulator is checked against on any computer. The slow tier is the disk:
one file per layer holds that layer's experts (float32, random values with the model's shapes);
after every read the pages are dropped from the page cache (``posix_fadvise(DONTNEED)``) so the
next read of the same expert goes to the disk again, as an expert fetched from the slow tier does.
The fast tier is RAM: C slot buffers per layer (or C in one pool). One reader thread is the copy
stream (FIFO, like the simulator's copy engine); the main thread is the compute stream: per layer
the attention projections and the router on the step's tokens, then every executed expert's
SwiGLU FFN once its weights are in its slot.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim import MoesimError
from moesim.sim.models import ModelSpec


def require_torch():
    try:
        import torch
    except ImportError:
        raise MoesimError("replay computes with torch: pip install 'moesim[torch]'") from None
    torch.set_num_threads(1)  # the compute stream is one thread; the reader is the other
    return torch


@dataclass
class ExpertFiles:
    """One file per layer, each holding its E experts back to back: w1, w3 (d x de) and w2 (de x d)."""

    folder: Path
    model: ModelSpec

    @property
    def expert_floats(self) -> int:
        return 3 * self.model.d_model * self.model.d_expert

    @property
    def expert_bytes(self) -> int:
        return 4 * self.expert_floats

    def path(self, layer: int) -> Path:
        return self.folder / f"layer{layer:03d}.bin"

    def write(self, seed: int = 0) -> None:
        """Random weights (scaled like an initialised FFN), written, synced and dropped from the page cache."""
        rng = np.random.default_rng(seed)
        scale = np.float32(1.0 / np.sqrt(self.model.d_model))
        for layer in range(self.model.num_layers):
            with open(self.path(layer), "wb") as f:
                for _ in range(self.model.num_experts):
                    (rng.standard_normal(self.expert_floats, dtype=np.float32) * scale).tofile(f)
                f.flush()
                os.fsync(f.fileno())
            drop_cache(self.path(layer))


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class Reader:
    """The copy stream: a thread reading experts from their layer files into buffers, in order."""

    def __init__(self, files: ExpertFiles):
        self.files = files
        self.fds = [os.open(files.path(layer), os.O_RDONLY) for layer in range(files.model.num_layers)]
        self.jobs: queue.Queue = queue.Queue()
        self.busy_s = 0.0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="moesim-reader", daemon=True)
        self.thread.start()

    def submit(self, layer: int, expert: int, into: np.ndarray) -> threading.Event:
        done = threading.Event()
        self.jobs.put((layer, expert, into, done))
        return done

    def _run(self) -> None:
        size = self.files.expert_bytes
        while True:
            job = self.jobs.get()
            if job is None:
                return
            layer, expert, into, done = job
            try:
                start = time.perf_counter()
                fd, offset = self.fds[layer], expert * size
                got = os.preadv(fd, [memoryview(into).cast("B")], offset)
                if got != size:
                    raise OSError(f"{self.files.path(layer)}: short read of expert {expert} ({got} of {size} bytes)")
                os.posix_fadvise(fd, offset, size, os.POSIX_FADV_DONTNEED)
                self.busy_s += time.perf_counter() - start
            except BaseException as exc:  # surfaced to the main thread by wait()
                self.error = exc
            done.set()

    def wait(self, done: threading.Event) -> None:
        done.wait()
        if self.error is not None:
            raise MoesimError(f"reading experts failed: {self.error}")

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(timeout=60)
        for fd in self.fds:
            os.close(fd)


class Compute:
    """The compute stream's work for one layer: attention projections and router (resident weights),
    and the SwiGLU FFN of an expert whose weights sit in a slot buffer."""

    def __init__(self, model: ModelSpec, seed: int = 0):
        self.torch = torch = require_torch()
        d, q, kv = model.d_model, model.q_dim or model.d_model, model.kv_dim or model.d_model
        gen = torch.Generator().manual_seed(seed)
        shapes = [(d, q), (d, kv), (d, kv), (q, d), (d, model.num_experts)]
        self.dense = [torch.randn(s, generator=gen) / s[0] ** 0.5 for s in shapes]
        self.d, self.de = d, model.d_expert

    def layer(self, x):
        """Attention projections (q, k, v, o) and the router on x [T, d]; returns the new x."""
        wq, wk, wv, wo, router = self.dense
        q = x @ wq
        (x @ wk), (x @ wv), (x @ router)
        return x + q @ wo * 0.01

    def expert(self, x, weights: np.ndarray):
        """SwiGLU: (silu(x W1) * x W3) W2 with the expert's flat float32 weights."""
        torch, d, de = self.torch, self.d, self.de
        w = torch.from_numpy(weights)
        w1, w3, w2 = w[:d * de].view(d, de), w[d * de:2 * d * de].view(d, de), w[2 * d * de:].view(de, d)
        return (torch.nn.functional.silu(x @ w1) * (x @ w3)) @ w2

    def tokens(self, n: int):
        return self.torch.randn(max(int(n), 1), self.d, generator=self.torch.Generator().manual_seed(1)) * 0.1
