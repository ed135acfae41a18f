"""Every figure moesim draws: of a trace (activations, eviction timelines) and of results (hit rate and
TPOT against capacity, speedups, per-layer hit rates)."""

from moesim.errors import MoesimError, option

# the options each kind of figure reads; the others refuse a value, which would change nothing
READ_BY = {"baseline": ("speedup-heatmap",), "capacity": ("per-layer-hitrate", "eviction-timeline"),
           "layer": ("eviction-timeline",), "sequence": ("activation-heatmap", "eviction-timeline")}


def check_options(kind: str, **given) -> None:
    """Refuse an option (given, not None) that ``kind`` does not read."""
    for name, value in given.items():
        if value is not None and kind not in READ_BY[name]:
            raise MoesimError(f"{option(name)} is read by {', '.join(READ_BY[name])} only; a {kind} figure does "
                              "not use it")
