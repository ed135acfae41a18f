"""The memory tiers experts are copied through: FIFO copy engines over the host link, and optionally
an SSD (one queue, in order) behind a DRAM cache of D experts whose slots are LRU; and the host CPU,
one more FIFO resource, for experts computed there.

A copy starts when its source is ready and the engine that frees first is free; an expert not in
DRAM is first read from the SSD into DRAM. ``dram_capacity = -1`` keeps every expert in DRAM.
Every duration is ``moesim.sim.costs``'s (``times[T_COPY]``, ``times[T_SSD]``, a MoLE row's
lookup copy). The discrete-event loop and the virtual replay backend share these functions, so a
replayed copy lands when the simulated one did.
"""

from __future__ import annotations

from numba import njit, uint64

from moesim.policies.base import list_push_head, list_remove, list_tail, list_to_head
from moesim.sim.costs import T_COPY, T_SSD
from moesim.sim.des_state import C_SSD_READS, COPY_BUSY, CPU_FREE, DRAM_USED, SSD_FREE


@njit(cache=True, inline="always")
def queue_copy(tiers, at, duration):
    """Queue a copy of ``duration`` at time ``at`` on the engine that frees first; when it is done."""
    eng_free = tiers.eng_free
    best = uint64(0)  # an unsigned index (``moesim.policies.base``, "Unsigned indices")
    for e in range(1, eng_free.shape[0]):
        if eng_free[e] < eng_free[best]:
            best = uint64(e)
    start = max(at, eng_free[best])
    eng_free[best] = start + duration
    tiers.clocks[COPY_BUSY] += duration
    return eng_free[best]


@njit(cache=True, inline="always")
def cpu_run(tiers, at, duration):
    """Run an expert of ``duration`` on the host CPU from time ``at`` or when it is free; when it is done."""
    clocks = tiers.clocks
    clocks[CPU_FREE] = max(at, clocks[CPU_FREE]) + duration
    return clocks[CPU_FREE]


@njit(cache=True, inline="always")
def transfer(tiers, obj, at, times, dram_capacity, counters):
    """Bring expert ``obj`` to the GPU, from DRAM or through it from the SSD; when it arrives."""
    source_ready = at if dram_capacity < 0 else through_dram(tiers, obj, at, times, dram_capacity, counters)
    return queue_copy(tiers, source_ready, times[T_COPY])


@njit(cache=True, _nrt=False, no_cfunc_wrapper=True)
def through_dram(tiers, obj, at, times, dram_capacity, counters):
    """When expert ``obj`` is ready in DRAM: at once where it is there (a use: its slot moves to the front), else
    once the SSD has read it (the LRU slot is given to it). Called, not inlined: the discrete-event loop copies
    at four sites, and the SSD tier is the rare case."""
    clocks, lists = tiers.clocks, tiers.dram_lists
    if tiers.in_dram[obj]:
        list_to_head(lists, 0, 0, obj)
        return at
    clocks[SSD_FREE] = max(at, clocks[SSD_FREE]) + times[T_SSD]
    counters[C_SSD_READS] += 1
    if dram_capacity > 0:
        if clocks[DRAM_USED] >= dram_capacity:
            gone = list_tail(lists, 0, 0)
            list_remove(lists, 0, gone)
            tiers.in_dram[gone] = False
        else:
            clocks[DRAM_USED] += 1
        list_push_head(lists, 0, 0, obj)
        tiers.in_dram[obj] = True
    return clocks[SSD_FREE]
