"""`moesim trace ...`: import, synthesise and describe routing traces."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from moesim.cli.console import console, emit_json, progress_bar, table, warn, working
from moesim.cli.options import PATH, TRACE, Force, TracePath
from moesim.errors import MoesimError
from moesim.files import check_output
from moesim.tracegen.models import get_model
from moesim.tracegen.fit import compare, fit_locality
from moesim.tracegen.schema import FORMATS, TraceMeta
from moesim.tracegen.stats import summary, trace_stats
from moesim.tracegen.synth import Locality, synth_trace
from moesim.tracegen.trace import trace_file

app = typer.Typer(help="Import, synthesise and describe routing traces.", no_args_is_help=True,
                  rich_markup_mode="markdown")


@app.command("import")
def import_(
    src: Annotated[Path, typer.Argument(metavar="SRC", click_type=PATH, help="Routing log to convert.")],
    out: Annotated[Path, typer.Option("--out", "-o", click_type=PATH, help="Trace file to write (Parquet).")],
    fmt: Annotated[str, typer.Option("--format", "-f", help=f"Input format: {', '.join(FORMATS)}.")] = "vllm-jsonl",
    model: Annotated[Optional[str], typer.Option(help="Model preset whose dims fill the metadata (see 'moesim models').")] = None,
    force: Force = False,
) -> None:
    """Convert a serving-engine routing log or a CSV table into a trace file.

    Example: moesim trace import gsm8k_2_routing.jsonl --format vllm-jsonl --model mixtral-8x7b --out t.parquet
    """
    from moesim.tracegen.importers import import_trace

    check_output(out, "trace", force=force, inputs=(src,), suffixes=(".parquet",))
    trace, dropped = import_trace(src, fmt, out, model)
    if dropped:
        warn(f"{src}: dropped {dropped} incomplete token(s) that lacked some layer's record")
    console.print(f"wrote {out}: {trace.num_sequences} sequences, {trace.num_rows} steps, "
                  f"{trace.accesses} expert accesses")


@app.command()
def record(
    model: Annotated[str, typer.Option("--model", "-m", help="Model folder (save_pretrained layout, read offline); a tiny preset: "
                                       "tiny-mixtral, tiny-olmoe, tiny-qwen2moe, tiny-qwen3moe, tiny-deepseek, tiny-deepseek-v2, tiny-phimoe, tiny-gptoss; "
                                       "or random-<model preset> (a preset's dims, random weights).")],
    prompts: Annotated[Path, typer.Option(click_type=PATH, help="Prompts: a text file with one per line, or JSONL with a 'prompt' field (and an optional 'id').")],
    out: Annotated[Path, typer.Option("--out", "-o", click_type=PATH, help="Trace file to write (Parquet).")],
    max_new_tokens: Annotated[int, typer.Option(help="Tokens to generate per prompt.")] = 64,
    batch_size: Annotated[int, typer.Option(help="Prompts per generate() call (left-padded).")] = 1,
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N.")] = "cpu",
    dtype: Annotated[str, typer.Option(help="auto (the checkpoint's), float32, bfloat16, float16 or float64.")] = "auto",
    probs: Annotated[bool, typer.Option("--probs", help="Also record the full router distribution (softmax of the logits).")] = False,
    speculate: Annotated[bool, typer.Option("--speculate", help="Also record spec: the experts layer l+1's router picks from layer l's router input.")] = False,
    chat: Annotated[bool, typer.Option("--chat", help="Wrap each prompt in the tokenizer's chat template as a user turn.")] = False,
    temperature: Annotated[float, typer.Option(help="0 decodes greedily; above 0 samples (seeded).")] = 0.0,
    top_p: Annotated[Optional[float], typer.Option(help="Nucleus sampling threshold when sampling (--temperature "
                                                   "above 0). [default: 1, no cutoff]")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed of the sampler (--temperature above 0): same seed and "
                                                "batch size, same trace. [default: 0]")] = None,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Always generate --max-new-tokens tokens.")] = False,
    force: Force = False,
) -> None:
    """Record routing traces by running a transformers MoE model on prompts.

    Example: moesim trace record --model tiny-olmoe --prompts prompts.txt --max-new-tokens 16 --speculate --out t.parquet
    """
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn

    from moesim.tracegen.record import RecordOptions, record_trace

    opts = RecordOptions(max_new_tokens=max_new_tokens, batch_size=batch_size, device=device, dtype=dtype, probs=probs,
                         speculate=speculate, chat=chat, temperature=temperature, top_p=top_p, seed=seed,
                         ignore_eos=ignore_eos)
    check_output(out, "trace", force=force, inputs=(prompts, model), suffixes=(".parquet",))
    with progress_bar(TextColumn("recording"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()) as bar:
        task = bar.add_task("record", total=None)
        summary = record_trace(model, prompts, out, opts,
                               progress=lambda done, total: bar.update(task, completed=done, total=total))
    m = summary.meta
    console.print(f"wrote {out}: {summary.sequences} sequences, {summary.prefill_rows} prefill + {summary.decode_rows} "
                  f"decode steps, {m.num_layers} MoE layers x top-{m.top_k} of {m.num_experts} experts "
                  f"({summary.seconds:.1f} s)")


SYNTH_MODEL = "olmoe-1b-7b"  # the model a synthetic trace is of where nothing says which


@app.command()
def synth(
    out: Annotated[Path, typer.Option("--out", "-o", click_type=PATH, help="Trace file to write (Parquet).")],
    layers: Annotated[Optional[int], typer.Option(help="MoE layers L [default: --model's / --like's].")] = None,
    experts: Annotated[Optional[int], typer.Option(help="Experts per layer E [default: --model's / --like's].")] = None,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Experts per token k [default: --model's / --like's].")] = None,
    sequences: Annotated[Optional[int], typer.Option(help="Sequences [default: 8, or --like's].")] = None,
    tokens: Annotated[Optional[int], typer.Option(help="Decode tokens per sequence [default: 256, or --like's mean].")] = None,
    prompt_tokens: Annotated[int, typer.Option(help="Prefill tokens per sequence.")] = 0,
    seed: Annotated[int, typer.Option(help="Seed: same arguments, same trace.")] = 0,
    model: Annotated[Optional[str], typer.Option(help="Take L, E, k and dims from a preset, a config.json or a "
                                                      f".gguf file [default: {SYNTH_MODEL}, where no dimension or "
                                                      "--like is given].")] = None,
    layer_alpha: Annotated[Optional[float], typer.Option(help="Dirichlet alpha of per-layer popularity (lower: more skew). "
                                                   f"[default: {Locality.layer_alpha:g}; --like fits it]")] = None,
    seq_alpha: Annotated[Optional[float], typer.Option(help="Dirichlet alpha of per-sequence preference (lower: more skew). "
                                                   f"[default: {Locality.seq_alpha:g}; --like fits it]")] = None,
    reuse: Annotated[Optional[float], typer.Option(help="Chance a slot repeats an expert of the previous token. "
                                                   f"[default: {Locality.reuse:g}; --like fits it]")] = None,
    cross_layer: Annotated[Optional[float], typer.Option(help="Chance a slot follows the previous layer's expert map. "
                                                   f"[default: {Locality.cross_layer:g}; --like fits it]")] = None,
    like: Annotated[Optional[Path], typer.Option(callback=trace_file, click_type=TRACE, help="Fit the locality knobs "
                                                 "(and dims) to this real trace (bundled: the shipped one) and report.")] = None,
    force: Force = False,
) -> None:
    """Generate a synthetic trace with controlled locality, or one fitted to a real trace (--like).

    Example: moesim trace synth --model olmoe-1b-7b --sequences 100 --tokens 512 --seed 1 --out olmoe-synth.parquet
    """
    from moesim.tracegen.io import load_trace, write_trace

    check_output(out, "trace", force=force, inputs=(like,), suffixes=(".parquet",))
    knobs = {"layer-alpha": layer_alpha, "seq-alpha": seq_alpha, "reuse": reuse, "cross-layer": cross_layer}
    fitted = [f"--{k}" for k, v in knobs.items() if v is not None] + (["--model"] if model else [])
    if like and fitted:  # --like fits the knobs and takes the model's dimensions from the trace
        them = "it" if len(fitted) == 1 else "them"
        raise MoesimError(f"{', '.join(fitted)}: --like fits the locality knobs to {like} and takes its model, so "
                          f"nothing reads {them}; leave {them} out, or --like")
    # nothing says which model: an OLMoE-shaped one, with the widths a simulation times it by without --model
    if like is None and model is None and layers is None and experts is None and top_k is None:
        model = SYNTH_MODEL
    real = None
    if like:
        with working(f"reading {like}"):
            real = load_trace(like)
    if real:
        meta = real.meta.replace(model=f"synthetic-like-{real.meta.model}")
    elif model:
        spec = get_model(model)
        meta = spec.trace_meta(model=f"synthetic-{spec.name}")
        contradicting = [f"--{flag} {given} (its {have})" for flag, given, have in
                         (("layers", layers, spec.num_layers), ("experts", experts, spec.num_experts),
                          ("top-k", top_k, spec.top_k)) if given is not None and given != have]
        if contradicting:
            raise MoesimError(f"model {spec.name} is not {', '.join(contradicting)}: leave them out to take the "
                              "model's, or leave --model out for a trace of your own dimensions")
    else:
        meta = TraceMeta(num_layers=16, num_experts=64, top_k=8, model="synthetic")
    if real:
        console.print(f"fitting locality to {like} ...")
        with working(f"fitting locality to {like}: synthetic traces at candidate settings, compared with it"):
            locality = fit_locality(real, seed)
        console.print("fitted: " + ", ".join(f"{k}={v:.3g}" for k, v in locality.as_dict().items()))
        sequences = real.num_sequences if sequences is None else sequences
        tokens = max(1, real.decode_steps // real.num_sequences) if tokens is None else tokens
    else:
        locality = Locality(**{k.replace("-", "_"): v for k, v in knobs.items() if v is not None})
    def given(value, default):
        return default if value is None else value

    with working(f"generating and writing {out}"):
        trace = synth_trace(given(layers, meta.num_layers), given(experts, meta.num_experts), given(top_k, meta.top_k),
                            given(sequences, 8), given(tokens, 256), seed, locality, prompt_tokens=prompt_tokens,
                            meta=meta)
        write_trace(trace, out)
    console.print(f"wrote {out}: {trace.num_sequences} sequences, {trace.num_rows} steps, "
                  f"{trace.accesses} expert accesses")
    if real:
        with working("comparing the two traces' statistics"):
            real_stats = trace_stats(real)
            rows = compare(real_stats, trace_stats(trace, tuple(real_stats.lru_hit_rate)))
        table(f"{like.name} vs the synthetic trace", ["statistic", "real", "synthetic"], [list(r) for r in rows])


# the table's names for ``summary``'s fields (its JSON keeps the keys), with their units
INFO_LABELS = {"top_k": "experts per token (top-k)", "prefill_steps": "prefill steps", "decode_steps": "decode steps",
               "accesses": "expert accesses", "dropped_tokens": "incomplete tokens dropped on import",
               "bytes_per_param": "bytes per parameter", "expert_bytes": "bytes per expert",
               "shared_experts": "shared experts", "d_shared": "d_shared (their intermediate size)",
               "has": "optional columns", "mean_reuse_distance": "mean reuse distance (tokens)",
               "concentration": "top E/8 experts' share of a sequence's activations",
               "cross_layer_predictability": "next-layer expert = this layer's most frequent companion"}


@app.command()
def info(
    trace_path: TracePath,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Describe a trace: model, dimensions, steps, accesses, expert popularity skew, reuse.

    Example: moesim trace info t.parquet --json
    """
    from moesim.tracegen.io import load_trace, stored_columns

    with working(f"reading {trace_path} and counting its statistics"):
        info_ = summary(load_trace(trace_path), stored_columns(trace_path))
    if as_json:
        emit_json(info_)
        return
    skew = info_.pop("layer_skew_gini")
    hist = info_.pop("reuse_histogram")
    rows = [[INFO_LABELS.get(k, k), "-" if v is None or v == "" or v == [] else
             ", ".join(v) if isinstance(v, list) else f"{v / 1e6:.1f} MB" if k == "expert_bytes" else v]
            for k, v in info_.items()]
    rows.append(["layer skew (Gini) min / mean / max", f"{min(skew):.3f} / {sum(skew) / len(skew):.3f} / {max(skew):.3f}"])
    rows.append(["reuse distance histogram", "  ".join(f"{k}:{v:.3f}" for k, v in hist.items())])
    table(str(trace_path), ["field", "value"], rows)
