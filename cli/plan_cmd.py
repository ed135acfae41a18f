"""`moesim plan`: each execution strategy for a model on a machine, ranked by tokens/s within its memory."""

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from moesim.cli.console import console, emit_json, slots_text, table, with_interval, working
from moesim.cli.explain_view import show
from moesim.cli.options import PATH, TRACE
from moesim.cli.settings import Asked, takes
from moesim.errors import MoesimError, first_line, named, render
from moesim.experiments.plan import ALL_ON_GPU, DTYPES, PLAN_PROMPT, PLAN_SETTINGS, candidate, read_by
from moesim.experiments.plan import plan as run_plan
from moesim.experiments.plan_row import PlanRow
from moesim.files import atomic_output, check_output
from moesim.sim.accuracy import PROMPT_GROWTH, TIE_RATIO, interval_words, ttft_words
from moesim.sim.engines import ENGINES
from moesim.sim.config import DTYPES as FORMATS
from moesim.sim.engines.ktransformers import EXPERT_COUNTS
from moesim.tracegen.trace import trace_file


@takes([*PLAN_SETTINGS, "dtype", "engine"], listed=("model", "dtype", "engine"),
       defaults={"prompt": str(PLAN_PROMPT)},
       helps={"model": "Model to plan for: a preset (see 'moesim models') or its Hugging Face id, or a model file "
                       "(config.json, GGUF); required. Comma-separated: each planned, their rows ranked together.",
              "prompt": "Prompt tokens: prefilled for the time to first token, then held in the KV cache.",
              "dtype": f"Weight formats to plan (every weight in each) beside a model file's own storage, "
                       f"comma-separated: {', '.join(FORMATS)}. Default: the model file's storage, else "
                       f"{','.join(DTYPES)}.",
              "engine": "The engines you have, comma-separated (see 'moesim engines'): only the placements they run "
                        "are planned. Default: every engine."},
       aliases={"prompt": ("--context",)})
def plan(
    trace: Annotated[Optional[Path], typer.Option(callback=trace_file, click_type=TRACE,
                                                  help="Routing trace to simulate (default: the bundled one for "
                                                       "mixtral-8x7b, else a synthetic trace of the model).")] = None,
    plot: Annotated[Optional[Path], typer.Option(click_type=PATH, help="Also draw tokens/s against GPU memory per strategy "
                                                      "(PNG, SVG or PDF).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: {\"rows\": [...], \"skipped\": [...]}.")]
    = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column: policy, prefetch, slots, CPU layers, TPOT, the "
                                                     "CPU's share, the engine and its settings.")] = False,
    explain: Annotated[Optional[int], typer.Option(help="Every step of row N's time per token: the parts that add "
                                                        "up to its TPOT, what the link and the CPU did beside them, "
                                                        "what binds, and the constants behind them with their "
                                                        "sources.", min=1)] = None,
    expert_counts: Annotated[Optional[Path], typer.Option(click_type=PATH, help="Write the trace's routing counts "
                                                          "per layer and expert here (JSON), the file a kTransformers "
                                                          "row's --init-expert-location reads.")] = None,
    *,
    asked: Asked,
) -> None:
    """What to put where: each execution strategy as engines deploy it, in every format,
    sized to this machine's memory, simulated on a trace and ranked by decode tokens/s, with the engine
    settings that reproduce each.

    Example: moesim plan --model mixtral-8x7b --hardware rtx4090 --plot plan.png
    """
    from moesim.experiments.plan import curves

    if plot is not None:
        from moesim.plots.trace import SUFFIXES

        check_output(plot, "figure", inputs=() if trace is None else (trace,), suffixes=SUFFIXES)
    if expert_counts is not None:
        check_output(expert_counts, "expert counts file", inputs=() if trace is None else (trace,),
                     suffixes=(".json",))
    formats = asked.each.pop("dtype", None)  # not typed: a configuration file's, else the plan's
    engines = asked.each.pop("engine", None)
    models = asked.each.pop("model", [])
    config = asked.config("plan").replace(**({"model": models[0]} if models else {}))
    # a file's prompt of 0 (every configuration's default, what a saved run holds) asks for none, as in the API
    asked_prompt = "prompt" in asked.typed or ("prompt" in asked.given and config.workload.prompt != 0)
    if not asked_prompt:
        config = config.replace(prompt=PLAN_PROMPT)
    if len(models) > 1:
        one = [flag for flag, given in (("--trace", trace), ("--plot", plot), ("--wide", wide or None),
                                        ("--expert-counts", expert_counts)) if given]
        if one:
            raise MoesimError(f"{one[0]} is one model's: with several models (--model A,B) each plans on its own "
                              "synthetic or bundled trace, in one table; plan one at a time")
        several([config.replace(model=m) for m in models], formats, engines, asked_prompt, asked.typed, explain,
                as_json)
        return
    with working("simulating each strategy (the first run compiles each policy)"):
        # the default prompt gives way to a trace's own prompts; one asked for here or in the file is checked
        result = run_plan(config, trace, formats, prompt_asked=asked_prompt, given=asked.typed, engines=engines)
    if explain is not None and explain > len(result.rows):
        raise MoesimError(f"--explain {explain}: the plan has {len(result.rows)} row(s)")
    if plot is not None:
        from moesim.plots.plan import plot_plan

        plot_plan(result, curves(result), plot)
    if expert_counts is not None:
        from moesim.experiments.plan import expert_counts as counts_of

        with atomic_output(expert_counts) as tmp:
            tmp.write_text(json.dumps({"logical_count": counts_of(result)}) + "\n")
    explained = None
    if explain is not None:
        from moesim.sim.explain import explain as explain_row

        chosen = result.results[explain - 1]
        explained = explain_row(chosen, result.spec)
    if as_json:
        emit_json({**result.as_dict(), **({"explain": explained.as_dict()} if explained else {})})
        return
    prompt = (f"its own prompts ({result.prompt} tokens, the median)" if result.prompt_recorded
              else f"prompt {result.prompt} tokens")
    title = (f"{result.model} on {result.hardware}: {result.machine}; {result.trace}; batch {result.batch}, "
             f"{prompt}. Ranked by decode tokens/s (equal: by TTFT); TTFT in s, memory in GiB")
    if wide:
        for rows, heading in ((result.rows, title), (result.apart, APART)):
            if rows:
                last = "command" if rows is result.rows else "why"
                table(heading, ["#", "engine", "strategy", "format", "policy", "prefetch", "C", "CPU layers", "tok/s",
                                "TPOT ms", "TTFT", "VRAM", "RAM", "on CPU", last],
                      [[r.rank or "-", r.engine, r.strategy, shown(r.format, r.dtype), r.policy or "-",
                        r.prefetch or "-", "-" if r.capacity is None
                        else slots_text(r.capacity) + (" in all" if r.scope == "global" else ""),
                        "-" if r.cpu_layers is None else f"{r.cpu_layers}/{r.layers}", rate(r), r.tpot_s * 1e3,
                        ttft(r), r.vram_gb, r.ram_gb, r.cpu_share, r.command if rows is result.rows else r.apart]
                       for r in rows])
    elif result.rows:
        table(title, ["#", "engine", "format", "experts on GPU", "tok/s", "TTFT", "VRAM", "RAM"],
              [[r.rank, r.engine, shown(r.format, r.dtype), placed(r), rate(r), ttft(r), three(r.vram_gb),
                three(r.ram_gb)] for r in result.rows])
    else:
        console.print(f"{title}\nno engine you can run gives a placement of {result.model} that fits: "
                      f"{'those you named do not' if engines else 'see below'}", soft_wrap=True)
    interval_note(result.rows + result.apart, result.machine_spec)
    # the model file's own storage, in words
    if any(r.dtype is None for r in result.rows) or any(s["dtype"] is None for s in result.skipped):
        console.print(f"{OWN} {result.spec.storage_text}", soft_wrap=True)
    rank_notes(result.rows, result.trace)
    if not wide:
        for r in result.rows:
            console.print(f"#{r.rank}: {r.command}", soft_wrap=True)
    if any(f"--init-expert-location {EXPERT_COUNTS}" in r.command for r in result.rows):
        console.print(f"--init-expert-location {EXPERT_COUNTS}: the routing counts of the plan's trace per layer and "
                      f"expert, SGLang's expert-distribution file (--expert-counts {EXPERT_COUNTS} writes it)",
                      soft_wrap=True)
    numa_note(result, asked.typed)
    if any(r.command.startswith("llama-server") for r in result.rows):
        console.print(f"-m: a GGUF of the row's format (--model FILE.gguf writes its path); -c: the "
                      f"{result.context} tokens a sequence memory was sized for"
                      + (f", times the {result.batch} sequences (-np)" if result.batch > 1 else "")
                      + " (--prompt N plans a longer one)", soft_wrap=True)
    if not wide:
        groups: dict = {}  # the placements set apart, one line per engine and candidate: the fastest, every reason
        for r in result.apart:
            groups.setdefault((r.engine, candidate(r)), []).append(r)
        for (engine, which), rows in groups.items():
            why = "; ".join(dict.fromkeys(r.apart for r in rows))
            console.print(f"not offered: {engine}, {which}: {why}; {rate(rows[0])} tok/s at best ({rows[0].format})",
                          soft_wrap=True)
    for name, value in (("split", config.cache.split), ("threads", config.hardware.threads),
                        ("numa", config.hardware.numa)):
        readers = read_by(result, name) if name in asked.typed else []
        if 0 < len(readers) < len(result.rows):  # read by some rows only (by none: refused by the plan)
            which = ", ".join(f"#{rank}" for rank in readers)
            console.print(render(f"{named(name, value)}: read by {'row' if len(readers) == 1 else 'rows'} {which} "
                                 f"only, {READ_BY[name]}"), soft_wrap=True)
    unrun: dict = {}  # candidates of a format refused for the same reason: one line, each strategy once
    for s in result.skipped:
        chosen = " + ".join(v for v in (s["policy"], s["prefetch"]) if v and v != "none")
        unrun.setdefault((shown(s["format"], s["dtype"]), s["reason"]), {}).setdefault(s["strategy"], []).append(chosen)
    lines: dict = {}  # the same candidates refused for the same reason in several formats: one line
    for (name, reason), strategies in unrun.items():
        which = ", ".join(f"{strategy} ({'; '.join(n for n in settings if n)})" if any(settings) else strategy
                          for strategy, settings in strategies.items())
        lines.setdefault((which, reason), []).append(name)
    for (which, reason), names in lines.items():
        console.print(f"not run in {', '.join(names)}: {which}: {reason}", soft_wrap=True)
    if explained is not None:
        row = result.rows[explain - 1]
        show(f"#{explain} {row.engine}, {row.format}, {placed(row)}", explained)
    if plot is not None:
        console.print(f"wrote {plot}")


ON_CPU_ROWS = "those that compute experts on the host CPU (the others compute none there)"
READ_BY = {"split": "those that keep a per-layer expert cache (the others keep none, or every expert on the GPU)",
           "threads": ON_CPU_ROWS, "numa": ON_CPU_ROWS}
APART = "Placements no engine you can run gives on this model and format (research code with no release, or an " \
        "engine that runs neither)"
LEARNED = "^"  # marks a row whose figure is an upper bound: learned from the trace it is timed on
OWN = "*"  # marks the model file's own storage (a --dtype of the same name is every weight in that format)


def numa_note(result, typed) -> None:
    """On several sockets, where no layout was asked and a row's engine could be told another: what the rows read, and
    the flag that plans the other."""
    hw = result.machine_spec
    if hw is None or hw.cpu is None or hw.cpu.sockets < 2 or "numa" in typed:
        return
    on_cpu = set(read_by(result, "numa"))
    others = {r.engine: ENGINES[r.engine].numa_options for r in result.rows
              if r.rank in on_cpu and r.engine in ENGINES and ENGINES[r.engine].numa_options}
    if others:
        console.print(f"{hw.cpu.sockets} sockets: each row runs its engine's own layout of the CPU threads over them "
                      f"({', '.join(f'{e}: {ENGINES[e].numa}' for e in others)}); "
                      + "; ".join(f"--numa {' or '.join(o)} plans {e} laid out so" for e, o in others.items())
                      + " (docs/hardware.md, 'Sockets and engines')", soft_wrap=True)


def interval_note(rows: list, hw) -> None:
    """Where the rows' intervals come from and how often such intervals held; on another maker's GPU than NVIDIA's
    where no row's engine learned a time a layer there, that its rows are upper bounds."""
    maker = hw.gpu.vendor if hw.gpu is not None else "nvidia"
    if maker != "nvidia" and not any(maker in dict(ENGINES[r.engine].gpu_layer_us) for r in rows if r.gpu
                                     and r.engine in ENGINES):
        console.print(f"{maker}'s GPUs: no time a layer has been learned for these rows' engines on them, and the "
                      "published llama.cpp runs on such GPUs decoded below moesim's prediction (docs/fidelity.md): take "
                      "the rows on the GPU as upper bounds", soft_wrap=True)
    if any(r.tokens_per_s.low is not None for r in rows):
        console.print("tok/s: as the row's engine runs it, the framework time learned for it from published points "
                      "included (sim run --engine NAME gives the same); " + (
                          interval_words(hw, {(True, r.side) for r in rows})),
                      soft_wrap=True)
    if any(r.ttft_s is not None and r.ttft_s.low is not None for r in rows):
        console.print(ttft_words(PROMPT_GROWTH), soft_wrap=True)


def rank_notes(rows: list, trace: str) -> None:
    """Which rows the published pairs do not tell apart from #1, and which learned from the trace they are timed on."""
    close = [f"#{r.rank}" for r in rows if r.tied]
    if close:
        console.print(f"{', '.join(close)}: within x{TIE_RATIO:g} of #1's tokens/s; held out, moesim ordered wrong "
                      "pairs of settings on one machine it predicted up to that far apart (docs/fidelity.md), so these "
                      "are not ranked apart from #1", soft_wrap=True)
    if any(r.learned for r in rows):
        console.print(f"{LEARNED} its GPU experts or its prefetcher learned from {trace}: an upper bound on other "
                      "prompts", soft_wrap=True)
    for r in rows:  # a model larger than RAM: the engine maps its file and reads the rest from the SSD
        if r.from_ssd:
            console.print(f"#{r.rank} ({SSD_MARK}): {r.from_ssd}", soft_wrap=True)
    for r in rows:  # several GPUs: the layers each holds
        if r.on_gpus:
            console.print(f"#{r.rank} on the GPUs: {r.on_gpus}", soft_wrap=True)


def several(configs: list, formats, engines, asked_prompt: bool, typed, explain: int | None, as_json: bool) -> None:
    """Each model of ``configs`` planned on the same machine, their rows ranked together (``ranked``): which model,
    format and placement to run."""
    from moesim.experiments.plan import rank_key, ranked

    plans, failed = [], []
    with working(f"planning {len(configs)} models (the first run compiles each policy)"):
        for c in configs:
            try:
                plans.append(run_plan(c, None, formats, prompt_asked=asked_prompt, given=typed, engines=engines))
            except MoesimError as exc:  # (nothing fits it, say: the other models still answer)
                failed.append(f"{c.model.name}: {first_line(exc)}")
    if not plans:
        raise MoesimError("; ".join(failed))
    by_row = sorted(((r, p, res) for p in plans for r, res in zip(p.rows, p.results)), key=lambda t: rank_key(t[0]))
    rows = ranked([r for r, _, _ in by_row])
    if explain is not None and explain > len(rows):
        raise MoesimError(f"--explain {explain}: the plans have {len(rows)} row(s)")
    explained = None
    if explain is not None:
        from moesim.sim.explain import explain as explain_row

        _, p, result = by_row[explain - 1]
        explained = explain_row(result, p.spec)
    if as_json:
        emit_json({"rows": [r.as_dict() for r in rows], "plans": [p.as_dict() for p in plans], "failed": failed,
                   **({"explain": explained.as_dict()} if explained else {})})
        return
    first = plans[0]
    table(f"{', '.join(p.model for p in plans)} on {first.hardware}: {first.machine}; batch {first.batch}, prompt "
          f"{first.prompt} tokens. Every model's rows ranked together by decode tokens/s; memory in GiB",
          ["#", "model", "engine", "format", "experts on GPU", "tok/s", "VRAM", "RAM"],
          [[r.rank, r.model, r.engine, shown(r.format, r.dtype), placed(r), rate(r), three(r.vram_gb), three(r.ram_gb)]
           for r in rows])
    interval_note(rows, first.machine_spec)
    rank_notes(rows, "each model's trace")
    for r in rows:
        console.print(f"#{r.rank}: {r.command}", soft_wrap=True)
    for p in plans:
        if p.apart:
            console.print(f"{p.model}: {len(p.apart)} placement(s) not offered ('moesim plan --model {p.model}' says "
                          "why)", soft_wrap=True)
    for line in failed:
        console.print(f"not planned: {line}", soft_wrap=True)
    if explained is not None:
        r = rows[explain - 1]
        show(f"#{explain} {r.model}, {r.engine}, {r.format}, {placed(r)}", explained)


def three(x) -> str:
    """Seconds or GiB in a narrow cell: three significant digits."""
    return "-" if x is None or x != x else f"{x:.3g}"


def rate(r: PlanRow) -> str:
    """A row's tokens/s with its 80% interval (marked where learned from the trace)."""
    return with_interval(*r.tokens_per_s) + (LEARNED if r.learned else "")


def ttft(r: PlanRow) -> str:
    """A row's TTFT in seconds with its 80% interval."""
    return "-" if r.ttft_s is None else with_interval(*r.ttft_s)


def shown(fmt: str, dtype: str | None) -> str:
    """A row's (or a skipped candidate's) format as the table names it: the file's own marked ``OWN``."""
    return fmt + (OWN if dtype is None else "")


SSD_MARK = "SSD"  # a row that reads the CPU layers' experts from the SSD (RAM smaller than the model)


def placed(r: PlanRow) -> str:
    """Where a row keeps its experts, in a few characters: every one, C per layer (and the policy), a pinned
    pool, the CPU's layers; marked where those are read from the SSD."""
    if r.strategy == ALL_ON_GPU:
        return "all, every layer split" if r.split_mode == "tensor" else "all"
    ssd = f", {SSD_MARK}" if r.from_ssd else ""
    if not r.gpu:
        return "none: CPU only" + ssd
    if r.capacity is None:
        return f"{r.layers - r.cpu_layers}/{r.layers} layers" + ssd
    if r.scope == "global":
        return f"{slots_text(r.capacity)} {'pinned' if r.policy == 'static' else r.policy}"
    c = r.capacity
    return f"{f'{min(c)}-{max(c)}' if isinstance(c, tuple) else c}/layer {r.policy}"

