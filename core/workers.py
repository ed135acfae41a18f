"""Worker processes: one pool type for every part of moesim that runs work on several cores."""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def worker_pool(workers: int, **kwargs) -> Iterator[ProcessPoolExecutor]:
    """A process pool of ``workers`` (``kwargs``: ``initializer``, ...) that works where it is called from.

    Its processes are spawned, not forked: a fork copies polars' and numba's thread pools with their locks held.
    A spawned process imports the caller's main module again to find what it unpickles, which runs a script's
    top-level code once more: a script that calls ``moesim.sweep`` without ``if __name__ == "__main__":`` would
    start a sweep in every worker and break the pool. moesim's workers unpickle only moesim's own functions and
    plain data, so while the pool lives the main module does not say where it came from (its ``__file__`` and
    ``__spec__``), and workers start without it. The pool is shut down on the way out (waiting for the running
    work, cancelling what has not started).
    """
    main = sys.modules.get("__main__")
    hidden = {k: main.__dict__.pop(k) for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    if main is not None and "__spec__" in hidden:
        main.__spec__ = None  # the attribute must exist: multiprocessing reads it
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), **kwargs)
    try:
        yield pool
    finally:
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        finally:
            if main is not None:
                main.__dict__.update(hidden)
