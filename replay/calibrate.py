"""`moesim calibrate`: measure this machine and write the hardware file the simulator reads.

CPU backend, for one model's dims (cut and scaled as the replay will run them):

- the slow tier: reads of whole experts (mean of 3 x ``repeats``) and of one 4 KiB page (median)
  at random places in expert files laid out as the replay writes them, each followed by dropping
  the pages; the page read is the latency per read, the line from it to the whole expert the
  bandwidth (the ``[link]`` the simulator's copies use), so one expert's simulated copy takes the
  measured mean;
- the expert FFN on 1 and on 8 tokens (``expert_s``, and the per-token slope ``expert_token_s``);
- one layer's attention projections and router on one token (``layer_s``).

They are the very functions the replay runs (``moesim.replay.cpu``), so the simulator times what
the replay executes. The ``[gpu]`` section is a placeholder: the ``[compute]`` table replaces the
roofline for this model.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from moesim import MoesimError
from moesim.sim.hardware import GPU, Compute, Hardware, Link
from moesim.sim.models import ModelSpec

PAGE = 4096


def _times(fn, repeats: int) -> np.ndarray:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return np.array(samples)


def _median(fn, repeats: int) -> float:
    return float(np.median(_times(fn, repeats)))


def calibrate_cpu(model: ModelSpec, repeats: int = 15, workdir: str | Path | None = None, seed: int = 0) -> Hardware:
    """Measure reads and compute for ``model`` on this machine; a Hardware with a [compute] table."""
    import os

    from moesim.replay.cpu import Compute as Work, ExpertFiles

    if repeats < 3:
        raise MoesimError(f"--repeats must be at least 3, got {repeats}")
    folder = Path(workdir) if workdir is not None else Path(tempfile.gettempdir())
    expert_bytes = 12 * model.d_model * model.d_expert
    # the expert files the replay writes (all layers, up to 4 GB), read at random (layer, expert):
    # sequential or repeated reads of a few experts are served by read-ahead and the host's caches
    layers = int(max(1, min(model.num_layers, 4e9 // (expert_bytes * model.num_experts))))
    shape = ModelSpec(model.name, "", "", layers, model.num_experts, 1, model.d_model, model.d_expert)
    tmp = Path(tempfile.mkdtemp(prefix="moesim-calibrate-", dir=folder))
    try:
        files = ExpertFiles(tmp, shape)
        files.write(seed)
        size = files.expert_bytes
        buf = np.empty(files.expert_floats, np.float32)
        fds = [os.open(files.path(layer), os.O_RDONLY) for layer in range(layers)]
        n = layers * model.num_experts
        order = np.random.default_rng(seed).permutation(np.tile(np.arange(n), 5 * repeats // n + 1))
        which = iter(order.tolist())

        def read(nbytes):
            def go():
                obj = next(which)
                fd, offset = fds[obj // model.num_experts], (obj % model.num_experts) * size
                os.preadv(fd, [memoryview(buf).cast("B")[:nbytes]], offset)
                os.posix_fadvise(fd, offset, size, os.POSIX_FADV_DONTNEED)
            return go

        try:
            # the mean, not the median: a disk's slow reads are part of what a decode step waits for
            full, page = float(_times(read(size), 3 * repeats).mean()), _median(read(PAGE), repeats)
        finally:
            for fd in fds:
                os.close(fd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    latency = min(page, full)
    bandwidth = (size - PAGE) / max(full - latency, 1e-9)
    work = Work(model, seed)
    # distinct experts in turn, as the replay runs them: one expert's weights, computed again and
    # again, would sit in the CPU's caches
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal(3 * model.d_model * model.d_expert, dtype=np.float32) for _ in range(8)]
    turn = iter(range(10 ** 9))
    x1, x8 = work.tokens(1), work.tokens(8)
    work.expert(x1, weights[0]), work.layer(x1)  # warm up
    expert_1 = _median(lambda: work.expert(x1, weights[next(turn) % 8]), repeats)
    expert_8 = _median(lambda: work.expert(x8, weights[next(turn) % 8]), repeats)
    layer = _median(lambda: work.layer(x1), repeats)
    return Hardware(
        f"cpu-{os.uname().nodename}", GPU("cpu (roofline unused: see [compute])", 1.0, 1.0),
        Link("disk reads", gbps=bandwidth / 1e9, efficiency=1.0, latency_us=latency * 1e6, engines=1),
        source="moesim calibrate --backend cpu",
        compute=Compute(model.name, layer_s=layer, expert_s=expert_1, expert_token_s=max(expert_8 - expert_1, 0.0) / 7,
                        moe_launch_s=0.0))
