"""What a replay needs before it starts (``prepare``), each refusal before any long work: the module that
puts ``moesim.replay.run`` and ``moesim.replay.calibrate`` together for the public API."""

from __future__ import annotations

import os
from pathlib import Path

from moesim.errors import MoesimError, named
from moesim.replay.calibrate import calibrate, device_memory_gb, host_memory_gb
from moesim.replay.compute import require_torch
from moesim.replay.run import check_backend, check_fits, in_backend_format, shrink
from moesim.replay.scratch import work_folder
from moesim.sim.config import Config
from moesim.sim.hardware import check_hardware, get_hardware
from moesim.sim.des import prepare_des
from moesim.sim.machine import CPU, GPU, Hardware
from moesim.sim.memory import DoesNotFit
from moesim.sim.presets import LINKS
from moesim.tracegen.models import ModelSpec, check_fits_trace
from moesim.tracegen.trace import Trace


def prepare(trace: Trace, config: Config, backend: str, hardware: str | Hardware | None = None,
            layers: int | None = None, scale: float = 1.0, workdir: str | Path | None = None,
            model: ModelSpec | None = None) -> tuple[Trace, ModelSpec, Hardware]:
    """What a replay of ``config`` needs before it starts, each refusal before any long work: the backend
    executes it, the model (``model``, else the configuration's) as the replay runs it (cut and scaled)
    fits this machine, and the machine the simulator describes. On the virtual backend that is ``sim run``'s: the
    configuration's hardware (``hardware``, a name, replacing its machine) with its link, SSD, CPU, memory sizes
    and threads, applied to ``hardware`` built in code too. A real backend needs a calibrated file of the replayed model
    (``hardware``), or, left out, calibrates this machine now (``moesim.replay.calibrate``); the configuration's
    parts of a simulated machine are not its (``moesim.replay.run.check_given`` refuses them given).
    Returns the trace, the model (uncut: ``replay`` cuts both) and the machine."""
    check_backend(config, backend)
    if isinstance(hardware, Hardware):
        check_hardware(hardware, f"hardware {hardware.name!r}", config.hardware.force)
    if model is not None:  # one built in code (a name is matched to the trace where it is looked up)
        check_fits_trace(model, trace.meta)
    spec = model if model is not None else config.model.spec(trace.meta)
    small_trace, small = shrink(trace, spec, layers, scale)
    if backend == "virtual":
        if workdir is not None:
            raise MoesimError(f"{named('workdir')}: backend virtual replays the simulator's own times and writes no "
                              "expert files, so nothing reads it")
        if isinstance(hardware, Hardware):
            return trace, spec, config.hardware.spec(hardware)
        return trace, spec, (config if hardware is None else config.replace(hardware=str(hardware))).hardware.spec()
    require_torch()  # before any expert file is written or this machine calibrated
    per_layer = config.cache.scope == "per-layer"
    capacity = config.cache.capacity if isinstance(config.cache.capacity, int) else spec.top_k
    check_fits(small, capacity * (small.num_layers if per_layer else 1), backend,
               work_folder(workdir))
    if hardware is None:
        check_memory(small_trace, config, small, backend)
        return trace, spec, calibrate(small, backend, workdir=workdir).hardware
    hw = hardware if isinstance(hardware, Hardware) else get_hardware(hardware, force=config.hardware.force)
    if hw.compute is None or hw.compute.name != small.name:
        raise MoesimError(f"{hardware if isinstance(hardware, str) else hw.name}: has no [compute] table for "
                          f"{small.name}; run 'moesim calibrate "
                          "--model ...' with the same layers and scale, or leave the hardware out")
    return trace, spec, hw


def check_memory(trace: Trace, config: Config, model: ModelSpec, backend: str) -> None:
    """Refuse, before minutes of calibration, a run the calibrated machine could not hold: the run sized (its memory
    accounted, its ``auto`` values resolved, nothing simulated) on a machine with the memory calibration will give
    it (``device_memory_gb``: on the cpu backend, host RAM holds the simulated GPU's experts) and this host's RAM
    (the strategies that compute on the CPU; its rates are not read)."""
    host = CPU("host (before calibration)", max(1, os.cpu_count() or 1), 1.0, "avx2", 1.0, host_memory_gb())
    provisional = Hardware(f"{backend} (before calibration)", GPU(backend, 1.0, 1.0, device_memory_gb(backend)),
                           LINKS["pcie4"], cpu=host)
    try:
        prepare_des(trace, in_backend_format(config, backend), model, provisional)
    except DoesNotFit as exc:
        where = "host RAM holds what the simulated GPU would" if backend == "cpu" else "the GPU holds it"
        raise MoesimError(f"backend {backend} ({where}): {exc}") from None
