"""libCacheSim as an independent oracle: feed it the same sequential stream, read back its misses.

The stream is written as an oracleGeneral binary trace (the format that carries next-access times,
which libCacheSim's Belady needs) and run through libCacheSim's own C loop (``process_trace``).
"""

from __future__ import annotations

from pathlib import Path

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
