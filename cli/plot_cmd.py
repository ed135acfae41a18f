"""`moesim plot`: figures from sweep results, or from a trace."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from moesim.cli.console import console
from moesim.cli.options import PATH


def plot(
    source: Annotated[Path, typer.Argument(metavar="INPUT", click_type=PATH, help="Results file from 'moesim sweep' (Parquet), or a "
                                                                 "trace for activation-heatmap / eviction-timeline.")],
    kind: Annotated[str, typer.Option(help="hitrate-vs-capacity, tpot-vs-capacity, speedup-heatmap, "
                                           "per-layer-hitrate (results); latency-vs-throughput, hitrate-vs-batch "
                                           "(results of a serve sweep); activation-heatmap, eviction-timeline "
                                           "(trace).")],
    out: Annotated[Path, typer.Option("--out", "-o", click_type=PATH, help="Figure to write: .png, .svg or .pdf.")],
    baseline: Annotated[Optional[str], typer.Option(help="speedup-heatmap: the policy others are compared with "
                                                         "(default lru).")] = None,
    capacity: Annotated[Optional[int], typer.Option(help="per-layer-hitrate: which capacity (default: the middle "
                                                         "one); eviction-timeline: GPU slots per layer (default 4).")] = None,
    layer: Annotated[Optional[int], typer.Option(help="eviction-timeline: the layer shown (default 0).")] = None,
    sequence: Annotated[Optional[int], typer.Option(help="Trace plots: which sequence (index, default 0 = "
                                                         "first).")] = None,
) -> None:
    """Draw a figure from sweep results or from a trace.

    Example: moesim plot fig6.parquet --kind hitrate-vs-capacity --out fig6.png
    """
    from moesim.errors import MoesimError
    from moesim.files import check_output
    from moesim.plots import check_options
    from moesim.plots.results import RESULT_KINDS, kind_of_file, plot_results, read_results
    from moesim.plots.serving import SERVE_KINDS, plot_serving
    from moesim.plots.trace import SUFFIXES, TRACE_KINDS, check_index, plot_activations, plot_eviction_timeline
    from moesim.tracegen.io import load_trace

    kinds = RESULT_KINDS + SERVE_KINDS + TRACE_KINDS
    if kind not in kinds:
        raise MoesimError(f"unknown plot kind {kind!r}; choose from {', '.join(kinds)}")
    check_options(kind, kinds, baseline=baseline, capacity=capacity, layer=layer, sequence=sequence)
    check_output(out, "figure", inputs=(source,), suffixes=SUFFIXES)
    baseline, layer, sequence = baseline or "lru", layer or 0, sequence or 0
    if kind in TRACE_KINDS:
        if kind_of_file(source) == "results":  # named as such (else ``load_trace`` says what the file is not)
            raise MoesimError(f"{source}: a sweep's results, not a trace; its figures are "
                              f"{', '.join(RESULT_KINDS + SERVE_KINDS)}")
        trace = load_trace(source)
        # named as typed (--sequence, --layer), with the range the file has, before a figure is opened
        check_index(sequence, trace.num_sequences, "sequence", "sequences", str(source))
        if kind == "eviction-timeline":
            check_index(layer, trace.meta.num_layers, "layer", "layers", str(source))
        if kind == "activation-heatmap":
            path = plot_activations(trace, out, seq_index=sequence)
        else:
            path = plot_eviction_timeline(trace, out, 4 if capacity is None else capacity, layer, sequence)
    elif kind in SERVE_KINDS:
        path = plot_serving(read_results(source), kind, out, str(source))
    else:
        path = plot_results(read_results(source), kind, out, baseline, capacity, str(source))
    console.print(f"wrote {path}")
