"""A first run is never silent: every compilation shows on the status line from its start to its end, in this
process (numba's events) and in the simulator's worker processes (its log records)."""

import logging

import pytest

from numba import njit
from numba.core import event

from moesim.cli import console


def test_a_compilation_shows_while_it_lasts():
    console.watch_compiles()
    console.watch_compiles()  # once per process, however often the CLI starts
    seen = []

    class During(event.Listener):  # called after the notice's own listener, which was registered first
        def on_start(self, ev):
            seen.append(console._activity["compiling"])

        def on_end(self, ev):
            seen.append(console._activity["compiling"])

    listener = During()
    event.register("numba:compile", listener)
    try:
        @njit  # not cached: compiled on this first call
        def tiny_kernel_0123456789ab(x):
            return x + 1

        assert tiny_kernel_0123456789ab(1) == 2
    finally:
        event.unregister("numba:compile", listener)
        console._set("compiling", None)
    assert seen[0] == "compiling test_compile_notice.tiny_kernel for this CPU (first run only, cached on disk)"
    assert seen[-1] is None
    assert console._activity["live"] is None  # nothing else to say: the status line is gone


def test_worker_compilations_show_from_the_log():
    console.watch_compiles()
    log = logging.getLogger("moesim.sim.des")
    log.info("x", extra={"activity": "compiling the simulator for lru, 1 of 2 done"})
    assert console._activity["workers"] == "compiling the simulator for lru, 1 of 2 done"
    log.info("plain records leave it")
    assert console._activity["workers"] == "compiling the simulator for lru, 1 of 2 done"

    @njit  # this process compiling meanwhile (a plan's trace generator) shows, then the workers' note again
    def tiny_kernel_fedcba987654(x):
        return x + 2

    assert tiny_kernel_fedcba987654(1) == 3
    assert console._activity["compiling"] is None
    assert console._activity["workers"] == "compiling the simulator for lru, 1 of 2 done"
    log.info("done", extra={"activity": None})
    assert console._activity["workers"] is None and console._activity["live"] is None



def test_a_failing_block_stops_the_compiling_workers(monkeypatch):
    """``compiling`` runs the caller's block while a worker compiles; a block that fails stops the worker (it is
    not waited for), the error comes through and the status line is cleared."""
    from types import SimpleNamespace

    from moesim import workers
    from moesim.sim import des

    stopped, real = [], workers.terminate
    monkeypatch.setattr(des, "loop_for", lambda policy, build: SimpleNamespace(signatures=[]))  # cold, as it seems
    monkeypatch.setattr(des, "on_disk", lambda loop: False)
    monkeypatch.setattr(workers, "terminate", lambda pool: (stopped.append(pool), real(pool)))
    console.watch_compiles()
    during = []
    with pytest.raises(ValueError, match="a bad trace file"):
        with des.compiling([("lru", "none")], least=1):
            during.append(console._activity["workers"])
            raise ValueError("a bad trace file")
    assert during == ["compiling the simulator for lru, 0 of 1 done (first run only, cached on disk)"]
    assert len(stopped) == 1 and console._activity["workers"] is None


def test_terminate_stops_work_under_way():
    import time
    from concurrent.futures.process import BrokenProcessPool

    from moesim.workers import terminate, worker_pool

    with worker_pool(1) as pool:
        future = pool.submit(time.sleep, 600)
        while not future.running():
            time.sleep(0.01)
        terminate(pool)
    assert isinstance(future.exception(), BrokenProcessPool)


def test_a_groups_loop_is_compiled_by_the_first_run_the_tiny_trace_takes(monkeypatch):
    """A run the tiny trace cannot take (a prefetcher that needs a file) leaves the loop to the next run of the group,
    not uncompiled."""
    from moesim.sim import des
    from moesim.sim.run import WHOLE

    tried = []
    monkeypatch.setattr(des, "_tiny_run", lambda run, build: tried.append((run, build)) or run[1] != "needs-a-file")
    runs = [("lru", "needs-a-file", "hybrid"), ("static", "none", "cpu-miss"), ("lru", "none", "gpu-cache")]
    des._compile_loop(runs, WHOLE)
    assert tried == [(run, WHOLE) for run in runs[:2]]  # each in the build the group needs
