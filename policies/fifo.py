"""fifo: evict the expert that was loaded first; hits change nothing (LRU's list without the move).

A prefetched or preloaded expert joins the queue when it is loaded, like any load (prefetch rule).
"""

from moesim.policies.base import hooks
from moesim.policies.lru import choose_victim, make_state, on_evict, on_insert, reset

NAME = "fifo"
RESIZABLE = True  # its victim ignores the object placed and its state the capacity (serve's dynamic KV)
__all__ = ["NAME", "RESIZABLE", "make_state", "HOOKS"]


HOOKS = hooks(reset=reset, choose_victim=choose_victim, on_evict=on_evict, on_insert=on_insert)
