"""libCacheSim as an independent oracle: feed it the same sequential stream, read back its misses.

The stream is written as an oracleGeneral binary trace (the format that carries next-access times,
which libCacheSim's Belady needs) and run through libCacheSim's own C loop (``process_trace``).
"""

from __future__ import annotations

from pathlib import Path

import time

import libcachesim as lcs
import numpy as np

ORACLE_GENERAL = np.dtype([("time", "<u4"), ("obj", "<u8"), ("size", "<u4"), ("next", "<i8")])
CACHES = {"lru": lcs.LRU, "fifo": lcs.FIFO, "arc": lcs.ARC, "belady": lcs.Belady, "lfu": lcs.LFU,
          "lecar": lcs.LeCaR}


def write_oracle_general(objs: np.ndarray, path: Path) -> Path:
    """One request per entry of ``objs`` (ids >= 0), unit size, with next-access positions."""
    n = len(objs)
    rec = np.zeros(n, ORACLE_GENERAL)
    rec["time"] = np.arange(n) + 1
    rec["obj"] = objs.astype(np.uint64) + 1
    rec["size"] = 1
    nxt = np.full(n, -1, np.int64)
    order = np.lexsort((np.arange(n), objs))
    same = objs[order][1:] == objs[order][:-1]
    nxt[order[:-1][same]] = order[1:][same] + 1
    rec["next"] = nxt
    rec.tofile(path)
    return path


def misses(policy: str, objs: np.ndarray, capacity: int, path: Path) -> int:
    write_oracle_general(objs, path)
    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, _ = CACHES[policy](cache_size=capacity).process_trace(reader)
    return int(round(miss_ratio * len(objs)))


def stream(experts: np.ndarray, num_experts: int, layer: int | None = None) -> np.ndarray:
    """The sequential request order: rows, then layers, then rank; objects are layer * E + expert."""
    rows, layers, k = experts.shape
    objs = (np.arange(layers)[None, :, None] * num_experts + experts.astype(np.int64))
    return objs.reshape(-1) if layer is None else objs[:, layer, :].reshape(-1)


def oracle_misses(policy: str, experts: np.ndarray, num_experts: int, capacity: int, scope: str,
                  tmp: Path) -> int:
    """Misses libCacheSim counts: one cache per layer (per-layer scope) or one for all (global)."""
    if scope == "global":
        return misses(policy, stream(experts, num_experts), capacity, tmp / "global.bin")
    return sum(misses(policy, stream(experts, num_experts, layer), capacity, tmp / f"layer{layer}.bin")
               for layer in range(experts.shape[1]))


# the benchmarks' workload: OLMoE's router (64 experts, top-8) at 32 layers
BENCH_LAYERS, BENCH_EXPERTS, BENCH_K = 32, 64, 8


def benchmark_trace(accesses: int, sequences: int = 64, seed: int = 0, experts: int = BENCH_EXPERTS,
                    top_k: int = BENCH_K):
    """A synthetic trace of the benchmarks' shape (or ``experts`` and ``top_k`` of another router)
    with about ``accesses`` accesses."""
    from moesim.tracegen.synth import synth_trace

    tokens = max(1, accesses // (BENCH_LAYERS * top_k * sequences))
    return synth_trace(BENCH_LAYERS, experts, top_k, sequences, tokens, seed)


def timed_per_layer(policy: str, paths: list[Path], capacity: int, per_layer_accesses: int) -> tuple[float, int]:
    """libCacheSim's own loop over each layer's oracleGeneral file, one cache each: (seconds of
    ``process_trace``, summed), misses)."""
    seconds, total = 0.0, 0
    for path in paths:
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        cache = CACHES[policy](cache_size=capacity)
        start = time.perf_counter()
        miss_ratio, _ = cache.process_trace(reader)
        seconds += time.perf_counter() - start
        total += int(round(miss_ratio * per_layer_accesses))
    return seconds, total
