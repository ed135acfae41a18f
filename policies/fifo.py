"""fifo: evict the expert that was loaded first; hits change nothing (LRU's list without the move)."""

from moesim.policies.base import no_access, no_miss, no_step
from moesim.policies.lru import choose_victim, make_state, on_evict, on_insert, reset
from moesim.sim.engine import hooks

NAME = "fifo"
__all__ = ["NAME", "make_state", "HOOKS"]


HOOKS = hooks(reset=reset, on_step=no_step, on_hit=no_access, on_miss=no_miss,
              choose_victim=choose_victim, on_evict=on_evict, on_insert=on_insert)
