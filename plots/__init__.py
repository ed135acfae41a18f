"""Every figure moesim draws: of a trace (activations, eviction timelines) and of results (hit rate and
TPOT against capacity, speedups, per-layer hit rates)."""

from moesim.errors import MoesimError, named

# the options each kind of figure reads; the others refuse a value, which would change nothing
READ_BY = {"baseline": ("speedup-heatmap",), "capacity": ("per-layer-hitrate", "eviction-timeline"),
           "layer": ("eviction-timeline",), "sequence": ("activation-heatmap", "eviction-timeline")}


def check_options(kind: str, kinds: tuple, **given) -> None:
    """Refuse an option (given, not None) that ``kind`` does not read, naming those of ``kinds`` (what the caller
    draws) that do."""
    for name, value in given.items():
        if value is not None and kind not in READ_BY[name]:
            readers = [k for k in READ_BY[name] if k in kinds]
            raise MoesimError(f"{named(name)} is read by {', '.join(readers)} only; {named('kind', kind)} does "
                              "not use it")
