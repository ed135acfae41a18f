"""The CPU backend: experts in files on disk, read into RAM buffers by a reader thread, computed with torch.

This is the machine the simulator is checked against on any computer. The slow tier is the disk:
one file per layer holds that layer's experts (float32, random values with the model's shapes);
after every read the pages are dropped from the page cache (``posix_fadvise(DONTNEED)``) so the
next read of the same expert goes to the disk again, as an expert fetched from the slow tier does.
The fast tier is RAM buffers (the slots, and scratch). One reader thread is the copy stream (FIFO,
like the simulator's copy engine); the main thread is the compute stream (``moesim.replay.compute``).
The experts of the layers a strategy places whole (on the host CPU or on the GPU) sit in RAM instead,
written once before the clock starts, and are computed from there by the same thread, so a CPU layer
and a GPU layer never overlap (which is what such a strategy does, as llama.cpp's --n-cpu-moe).
"""

from __future__ import annotations

import os
import queue
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError, named
from moesim.host import available_ram
from moesim.replay.backend import Backend
from moesim.replay.compute import require_torch
from moesim.replay.scratch import kills_held, scratch_folder
from moesim.tracegen.models import ModelSpec

# the reader needs the GIL back after each read: at Python's default 5 ms switch interval the compute
# thread's Python code would hold every read's completion up by milliseconds
GIL_SWITCH_S = 1e-4


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


def _gb(nbytes: float) -> str:
    """Bytes in GB as a sentence gives them: one decimal, or three figures below 1 GB (a cut model's files)."""
    return f"{nbytes / 1e9:,.1f}" if nbytes >= 1e9 else f"{nbytes / 1e9:.3g}"


def check_fits(model: ModelSpec, n_buffers: int, folder: Path, host_layers: int = 0) -> str | None:
    """Why the expert files or the RAM buffers (and the host-memory experts of ``host_layers`` layers)
    would not fit on this machine (None: they fit)."""
    expert = 4 * 3 * model.d_model * model.d_expert
    on_disk = expert * model.num_experts * model.num_layers
    in_ram = expert * (n_buffers + model.num_experts * (1 + host_layers))
    free_disk = shutil.disk_usage(folder).free
    free_ram = available_ram()
    if free_disk == 0:  # /proc, /sys, a full disk: no model is small enough
        raise MoesimError(f"{folder}: no free space for the expert files; give {named('workdir')} a folder with free "
                          "space")
    if on_disk > 0.8 * free_disk:
        return f"its experts take {_gb(on_disk)} GB on disk, {folder} has {_gb(free_disk)} GB free"
    if free_ram is not None and in_ram > 0.5 * free_ram:
        return f"{n_buffers} buffers need {_gb(in_ram)} GB of RAM, {_gb(free_ram)} GB is available"
    return None


class CpuBackend(Backend):
    """Experts in files under a temporary folder in ``folder``, ``n_buffers`` RAM buffers, the reader
    thread as the copy stream, torch on the CPU as the compute stream (synchronous: the interface's
    defaults, ``moesim.replay.backend``), and the first ``host_layers`` layers' experts in RAM
    from the start (the layers a strategy places whole, on the CPU or on the GPU)."""

    def __init__(self, model: ModelSpec, n_buffers: int, folder: Path, seed: int = 0, host_layers: int = 0):
        self.torch = require_torch()
        self.tmp: Path | None = None
        self.reader: Reader | None = None
        self.switch = sys.getswitchinterval()
        try:
            with kills_held():
                self.tmp = scratch_folder(folder, "replay")
            self.files = ExpertFiles(self.tmp, model)
            self.files.write(seed)
            # written once before the clock starts, so no read pays for faulting its buffer's pages
            # in (the RAM counterpart of the pinned buffers a GPU replay copies into)
            self.buffers = np.empty((max(n_buffers, 1), self.files.expert_floats), np.float32)
            self.buffers.fill(0.0)
            rng = np.random.default_rng(seed + 1)
            scale = np.float32(1.0 / np.sqrt(model.d_model))
            self.host_pool = (rng.standard_normal((host_layers * model.num_experts, self.files.expert_floats),
                                                  dtype=np.float32) * scale)
            sys.setswitchinterval(GIL_SWITCH_S)
            self.reader = Reader(self.files)
        except BaseException:
            self.close()
            raise

    def load(self, obj: int, buf: int) -> threading.Event:
        e = self.files.model.num_experts
        return self.reader.submit(obj // e, obj % e, self.buffers[buf])

    def host(self, obj: int):
        return self.torch.from_numpy(self.host_pool[obj])

    resident = host  # a layer placed whole: its experts in RAM as the CPU's are (the same memory here)

    def ready(self, handle: threading.Event) -> None:
        self.reader.wait(handle)

    def weights(self, buf: int):
        return self.torch.from_numpy(self.buffers[buf])

    @property
    def copy_busy_s(self) -> float:
        return self.reader.busy_s

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        sys.setswitchinterval(self.switch)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
