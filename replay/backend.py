"""The interface the replay's executor (``moesim.replay.run``) drives, the same on every backend.

- ``load(obj, buf)``: queue the copy of expert ``obj`` (layer * E + expert) into buffer ``buf``;
  returns a handle for ``ready``; ``load_lowbit(obj, buf)``: the same for its low-bit copy (the
  ``A_LOWBIT`` action);
- ``ready(handle)``: the compute stream waits for that copy;
- ``weights(buf)``: the buffer as a flat tensor for ``ComputeStream.expert``;
- ``host(obj)``: expert ``obj``'s weights in host memory, for ``ComputeStream.cpu`` (the experts of the
  layers a strategy keeps on the CPU); ``resident(obj)``: its weights in fast memory, placed there before
  decoding (the layers a strategy keeps whole on the GPU);
- ``release(buf)``: the compute queued so far is all that reads ``buf``; a later copy into it
  waits for that;
- ``routed()``: returns once the router's choice is known on the host;
- ``finish_step()``: returns once the compute stream is idle;
- ``clock()``: the time now, in seconds;
- ``copy_mark()``: a mark of the copies issued so far, taken without waiting for any, and ``copy_busy_since(mark)``:
  the copy stream's busy time on the copies issued after it (by default from ``copy_busy_s``, its busy time so far);
- ``close()``: everything freed, files removed.

The defaults below suit a backend whose compute stream runs synchronously on the host (the CPU's):
nothing to release, route or drain, and the wall clock.
"""

from __future__ import annotations

import time


class Backend:
    def release(self, buf: int) -> None:
        pass

    def routed(self) -> None:
        pass

    def load_lowbit(self, obj: int, buf: int):
        raise NotImplementedError("this backend holds no low-bit copies")

    def host(self, obj: int):
        raise NotImplementedError("this backend keeps no experts in host memory for the CPU to compute")

    def resident(self, obj: int):
        raise NotImplementedError("this backend places no layer's experts before decoding")

    def finish_step(self) -> None:
        pass

    def copy_mark(self):
        return self.copy_busy_s

    def copy_busy_since(self, mark) -> float:
        return self.copy_busy_s - mark

    def clock(self) -> float:
        return time.perf_counter()
