"""A first run is never silent: every compilation shows on the status line from its start to its end, in this
process (numba's events) and in the simulator's worker processes (its log records)."""

import logging

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
    assert console._activity["compiling"] == "compiling the simulator for lru, 1 of 2 done"
    log.info("plain records leave it")
    assert console._activity["compiling"] == "compiling the simulator for lru, 1 of 2 done"
    log.info("done", extra={"activity": None})
    assert console._activity["compiling"] is None and console._activity["live"] is None
