"""Worker processes: one pool type for every part of moesim that runs work on several cores."""

from __future__ import annotations

import multiprocessing
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Iterator


_HIDING = threading.Lock()
_hidden: dict = {}  # what the main module gave up while pools live, and how many do (``depth``)


@contextmanager
def worker_pool(workers: int, **kwargs) -> Iterator[ProcessPoolExecutor]:
    """A process pool of ``workers`` (``kwargs``: ``initializer``, ...) that works where it is called from.

    Its processes are spawned, not forked: a fork copies polars' and numba's thread pools with their locks held.
    A spawned process imports the caller's main module again to find what it unpickles, which runs a script's
    top-level code once more: a script that calls ``moesim.sweep`` without ``if __name__ == "__main__":`` would
    start a sweep in every worker and break the pool. moesim's workers unpickle only moesim's own functions and
    plain data, so while any pool lives the main module does not say where it came from (no ``__file__``, a
    ``__spec__`` of None; code that reads them meanwhile sees that), and workers start without it. Pools in
    several threads share that: the last one out puts it back. The pool is shut down on the way out (waiting
    for the running work, cancelling what has not started).
    """
    main = sys.modules.get("__main__")
    with _HIDING:
        if main is not None and not _hidden.get("depth"):
            _hidden.update(saved={k: main.__dict__.pop(k) for k in ("__file__", "__spec__") if k in main.__dict__})
            main.__spec__ = None  # the attribute must exist: multiprocessing reads it
        _hidden["depth"] = _hidden.get("depth", 0) + 1
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), **kwargs)
    try:
        yield pool
    finally:
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        finally:
            with _HIDING:
                _hidden["depth"] -= 1
                if main is not None and not _hidden["depth"]:
                    main.__dict__.pop("__spec__", None)
                    main.__dict__.update(_hidden.pop("saved", {}))


def terminate(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool``'s processes now, losing their running work (what a failure elsewhere leaves unwanted).
    Python 3.14's executor does it itself; before it, its processes are reached through ``_processes``."""
    if hasattr(pool, "terminate_workers"):
        pool.terminate_workers()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
