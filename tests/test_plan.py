"""`moesim plan`: every strategy ranked within the machine's memory, with engine settings (issue 18)."""

import json
from dataclasses import replace

import numpy as np
import pytest

from moesim.experiments.plan import CANDIDATES
from moesim.sim.accuracy import PROMPT_GROWTH

# its module-scoped fixtures are built once: its tests run on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_plan")

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def mixtral_plan(tmp_path_factory):
    from moesim.cli.app import app
    from typer.testing import CliRunner

    figure = tmp_path_factory.mktemp("plan") / "plan.png"
    result = CliRunner().invoke(app, ["plan", "--model", "mixtral-8x7b", "--hardware", "rtx4090", "--json",
                                      "--plot", str(figure)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), figure


def test_plan_ranks_every_strategy_within_the_gpu_memory(mixtral_plan):
    out, figure = mixtral_plan
    rows = out["rows"]
    assert {r["strategy"] for r in rows + out["apart"]} == {s for s, _ in CANDIDATES}
    assert [r["tokens_per_s"] for r in rows] == sorted((r["tokens_per_s"] for r in rows), reverse=True)
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    for r in rows + out["apart"]:
        assert {"strategy", "tokens_per_s", "ttft_s", "vram_gb", "ram_gb", "command", "apart"} <= set(r)
        assert (0 < r["vram_gb"] <= 24 or not r["gpu"]) and 0 < r["ram_gb"] <= 128 and r["ttft_s"] > 0
        assert r["tpot_s"] == pytest.approx(1 / r["tokens_per_s"])
    for r in (r for r in rows if r["strategy"] == "cpu-experts"):
        # (-ngl 0: the GPU left out)
        place = f"-ngl 99 --n-cpu-moe {r['cpu_layers']}" if r["gpu"] else "-ngl 0 --no-op-offload"
        assert r["engine"] == "llama.cpp" and r["command"] == (
            f"llama-server -m Mixtral-8x7B-v0.1-{r['format'].upper()}.gguf {place} -t 16 -c {out['context']}")
    assert sum(not r["gpu"] for r in rows) == 3  # llama.cpp with the GPU left out, in each format
    # the bundled trace's longest sequence and the plan's prompt: the KV tokens memory holds for one
    from moesim.tracegen.io import load_trace
    from moesim.tracegen.trace import bundled_trace_path

    assert out["context"] == 512 + int(np.diff(load_trace(bundled_trace_path()).seq_offsets).max())
    assert out["skipped"] == []  # the real trace has gate weights, every candidate fits some way
    assert figure.read_bytes()[:8] == PNG


def test_plan_for_a_model_without_a_trace_simulates_a_synthetic_one(cli):
    code, out, err = cli("plan", "--model", "olmoe-1b-7b", "--hardware", "rtx5070ti", "--dtype", "bf16", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["trace"].startswith("synthetic olmoe-1b-7b trace")
    assert all(r["vram_gb"] <= 16 for r in plan["rows"])
    assert [s["strategy"] for s in plan["skipped"]] == ["lowbit-miss"]  # no gate weights in a synthetic trace


def test_a_trace_that_records_its_prompts_is_timed_on_them(cli, tmp_path):
    """The plan's default prompt gives way to the prompts a trace records (the title says so, and the TTFT is theirs:
    a run with no prompt of its own); a prompt typed for such a trace would change nothing and is refused."""
    from moesim import simulate
    from moesim.tracegen.io import write_trace
    from moesim.tracegen.models import get_model
    from moesim.tracegen.synth import synth_trace

    m = get_model("olmoe-1b-7b")
    trace = synth_trace(m.num_layers, m.num_experts, m.top_k, 2, 8, seed=1, prompt_tokens=24, model=m.name,
                        meta=m.trace_meta())
    write_trace(trace, tmp_path / "t.parquet")
    args = ("plan", "--model", m.name, "--hardware", "rtx4090", "--vram", "8", "--dtype", "bf16", "--trace",
            tmp_path / "t.parquet")
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert (plan["prompt"], plan["prompt_recorded"]) == (24, True)
    row = next(r for r in plan["rows"] if r["strategy"] == "cpu-experts")
    alone = simulate(trace, model=m, hardware="rtx4090", vram=8, dtype="bf16", strategy="cpu-experts",
                     cpu_layers=row["cpu_layers"], warmup=1)
    # the row is timed as its engine: the prompt's time grown by what published prompts taught (a calibrated
    # machine's is not: tests/test_machine_band.py)
    assert row["ttft_s"] == pytest.approx(alone.ttft_s * (1 + PROMPT_GROWTH), rel=1e-12) and alone.ttft_s > 0
    code, _, err = cli(*args, "--prompt", "512")
    assert code == 1 and "--prompt 512: every sequence of the trace records its own prompt (24 tokens" in err


def test_plan_errors_are_one_line(cli, tmp_path):
    for args, message in ((["--model", "nope"], "unknown model"), (["--model", "mixtral-8x7b", "--dtype", "fp7"],
                                                                    "--dtype must be one of fp32,"),
                          (["--model", "mole-160m-4e"], "MoLE"),
                          (["--model", "mixtral-8x7b", "--plot", tmp_path / "no" / "p.png"], "no such folder"),
                          # one reason every candidate gives is said once (it was said three times)
                          (["--model", "olmoe-1b-7b", "--trace", "bundled", "--dtype", "q4_k"],
                           "no strategy runs olmoe-1b-7b: model olmoe-1b-7b has 16 layers, the trace 32\n")):
        code, _, err = cli("plan", *args)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, (args, err)


def test_plan_with_the_best_split_spends_the_same_memory_better(mixtral_plan):
    """--split best: each per-layer cache's slots shared out over the layers, in the same GPU memory; on
    the plain GPU cache (whose hits are the curves' the split is chosen from) a hit rate no lower than
    the uniform row's."""
    import moesim

    assert len(moesim.plan("mixtral-8x7b", "rtx4090", dtypes=("q4_k", "q4_k")).rows) == \
        len(moesim.plan("mixtral-8x7b", "rtx4090", dtypes=("q4_k",)).rows)  # a format listed twice is planned once
    split = moesim.plan("mixtral-8x7b", "rtx4090", dtypes=("q4_k",), split="best")
    uniform = {(r["strategy"], r["policy"], r["prefetch"], r["scope"]): r
               for r in mixtral_plan[0]["rows"] + mixtral_plan[0]["apart"] if r["dtype"] == "q4_k"}
    per_layer = [r for r in split.rows + split.apart if r.scope == "per-layer"]
    assert per_layer
    for r in per_layer:
        before = uniform[(r.strategy, r.policy, r.prefetch, r.scope)]
        assert sum(r.capacity) == before["capacity"] * 32 and r.vram_gb == before["vram_gb"]
        if (r.strategy, r.prefetch) == ("gpu-cache", "none"):
            assert r.hit_rate >= before["hit_rate"] and r.tokens_per_s.mid >= before["tokens_per_s"]


def test_candidates_refused_for_one_reason_are_one_line(cli):
    """On a machine whose RAM cannot hold bf16 experts, the candidates refused for that (gpu-cache with and
    without history prefetch, ...) share a line, which says what they need (Qwen3-30B-A3B's 48 x 128 experts of
    3 x 2048 x 768 bf16 weights: 54.0 GiB) and not a 'sim run' user's options (plan has no --ssd)."""
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hardware", "rtx5070ti", "--ram", "32", "--dtype",
                         "bf16,q4_k")
    assert code == 0, err
    text = " ".join(out.split())
    assert text.count("not run in bf16: gpu-cache (lru; lru + history), ") == 1
    unrun = " ".join(" ".join(out.split("not run")[1:]).split())
    assert unrun.count("gpu-cache") == 1  # one line for every candidate refused for that
    assert "needs 58.0 GiB of host RAM (54.0 experts + 4.0 reserve), the host has 32.0 GiB" in text
    assert "--ssd" not in text and "--capacity" not in text and "--cpu-layers" not in text


def test_threads_reach_the_cpu_model_and_the_engines_flags(cli):
    """--threads sets the CPU's threads as llama.cpp's -t (kTransformers' --cpu_infer) does: the same run as a
    machine whose [cpu] says so, and the row's flags carry it."""
    from dataclasses import replace

    import moesim
    from moesim.sim.hardware import get_hardware
    from moesim.tracegen.synth import synth_trace

    code, out, err = cli("plan", "--model", "olmoe-1b-7b", "--hardware", "rtx5070ti", "--dtype", "q4_k",
                         "--vram", "3", "--threads", "2", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert all(" -t 2 -c " in r["command"] for r in rows if r["strategy"] == "cpu-experts")
    trace = synth_trace(16, 64, 8, 1, 4, seed=0, model="olmoe-1b-7b")
    hw = get_hardware("ryzen-7950x")
    two = moesim.simulate(trace, hardware=replace(hw, cpu=replace(hw.cpu, threads=2)), strategy="cpu-experts",
                          dtype="q4_k")
    assert moesim.simulate(trace, hardware="ryzen-7950x", threads=2, strategy="cpu-experts",
                           dtype="q4_k").tpot_s == two.tpot_s
    assert two.tpot_s > moesim.simulate(trace, hardware=hw, strategy="cpu-experts", dtype="q4_k").tpot_s


def test_placements_that_keep_every_expert_on_the_gpu_are_one_row():
    """Qwen3-30B-A3B in q4_k fits an RTX 4090 whole: every strategy then runs the same placement (cpu-experts with
    0 CPU layers, caches of all 128 experts), shown once as all-on-gpu, naming the candidates it stands for, with
    llama.cpp's settings for it; the rows around it keep experts off the GPU."""
    import moesim

    plan = moesim.plan("qwen3-30b-a3b", "rtx4090", dtypes=("q4_k",))
    whole = [r for r in plan.rows if r.strategy == "all-on-gpu"]
    assert len(whole) == 1 and whole[0].command == f"llama-server -m Qwen3-30B-A3B-Q4_K.gguf -ngl 99 -c {plan.context}"
    assert whole[0].cpu_layers == 0
    assert "cpu-experts" in whole[0].same_as and len(whole[0].same_as) >= 2
    for r in plan.rows:
        assert r.cpu_layers != 0 or r.strategy == "all-on-gpu"
        assert r.capacity is None or (r.capacity < 128 if r.scope == "per-layer" else r.capacity < 48 * 128)
    # one placement, one memory: the least of its candidates' (it was the fastest one's, so a longer prompt could
    # show less GPU memory, and q4_k more host RAM than bf16)
    cpu_experts = moesim.simulate(plan.simulated, model="qwen3-30b-a3b", hardware="rtx4090", dtype="q4_k",
                                  strategy="cpu-experts", cpu_layers=0, prompt=plan.prompt, warmup=1)
    static = moesim.simulate(plan.simulated, model="qwen3-30b-a3b", hardware="rtx4090", dtype="q4_k", strategy="hybrid",
                             policy="static", capacity="auto", scope="global", prefetch="popular", prompt=plan.prompt,
                             warmup=1)
    assert whole[0].vram_gb <= min(cpu_experts.vram_gb, static.vram_gb)
    assert whole[0].ram_gb <= min(cpu_experts.ram_gb, static.ram_gb)


def test_equal_tokens_per_s_rank_by_time_to_first_token():
    """Rows of the same tokens/s to the 4 significant digits a table shows rank by TTFT, shortest first (a
    13.2 s-TTFT row no longer above a 1.0 s one); a faster row still ranks first whatever its TTFT."""
    from types import SimpleNamespace as Row

    from moesim.experiments.plan import rank_key
    from moesim.sim.accuracy import Estimate

    rows = [Row(tokens_per_s=Estimate(rate), ttft_s=Estimate(ttft))
            for rate, ttft in ((20.004, 13.2), (20.001, 1.0), (20.05, 30.0), (19.0, 0.1))]
    assert [(r.tokens_per_s.mid, r.ttft_s.mid) for r in sorted(rows, key=rank_key)] == [
        (20.05, 30.0), (20.001, 1.0), (20.004, 13.2), (19.0, 0.1)]


def test_every_row_is_a_command_an_engine_a_user_can_run_takes(mixtral_plan, cli):
    """Mixtral-8x7B on an RTX 4090: a row is a placement an engine with a release runs on the model in that format,
    with its command; the others are apart, each saying why: Fiddler and MoE-Infinity load 16-bit checkpoints, so
    their q8_0 and q4_k placements are apart and their bf16 ones answers; kTransformers' release runs no Mixtral;
    HybriMoE and HOBBIT are research code. ``--engine`` keeps the engines named (in any case) and refuses one that is
    none, in one line. The rows whose pins or prefetcher learn from the trace say so."""
    out = mixtral_plan[0]
    rows, apart = out["rows"], out["apart"]
    assert {r["engine"] for r in rows} == {"llama.cpp", "Fiddler", "MoE-Infinity"}
    assert all(not r["apart"] and not r["command"].startswith("none:") for r in rows)
    assert {r["format"] for r in rows if r["engine"] != "llama.cpp"} == {"bf16"}
    fiddler = next(r for r in rows if r["engine"] == "Fiddler")
    assert fiddler["command"] == "python src/fiddler/infer.py --model mistralai/Mixtral-8x7B-v0.1 --cpu-offload 1"
    assert fiddler["learned"] and not next(r for r in rows if r["engine"] == "llama.cpp")["learned"]
    why = {(r["engine"], r["format"]): r["apart"] for r in apart}
    assert why[("Fiddler", "q4_k")] == "Fiddler runs experts in bf16, f16 only"
    assert why[("kTransformers", "q4_k")].startswith("kTransformers runs no mixtral model")
    assert why[("HybriMoE", "q4_k")] == why[("HOBBIT (llama.cpp fork)", "q4_k")] == \
        "research code with no release to run"
    code, text, err = cli("plan", "--model", "mixtral-8x7b", "--hardware", "rtx4090", "--dtype", "bf16", "--engine",
                          "FIDDLER,llama.cpp", "--json")
    assert code == 0, err
    kept = json.loads(text)
    assert {r["engine"] for r in kept["rows"]} == {"Fiddler", "llama.cpp"} and not kept["apart"]
    code, _, err = cli("plan", "--model", "mixtral-8x7b", "--hardware", "rtx4090", "--engine", "vllm")
    assert code == 1 and err.count("\n") == 1 and "--engine vllm: no such engine; choose from llama.cpp" in err


def test_when_nothing_fits_plan_says_the_least_it_needs_and_exits_1(cli):
    """2 GiB of GPU memory and 8 GiB of RAM hold Mixtral-8x7B in no format: one line, exit 1, with the candidate
    that misses by the least, its memory part by part (the host's experts alone are 8 x 32 x 0.08 GiB in q4_k)."""
    code, out, err = cli("plan", "--model", "mixtral-8x7b", "--vram", "2", "--ram", "8")
    assert code == 1 and out.strip() == "" and len(err.strip().splitlines()) == 1, (out, err)
    assert err.startswith("moesim: error: nothing fits mixtral-8x7b on ")
    assert "GiB of GPU memory (" in err or "GiB of host RAM (" in err
    assert "the GPU has 2.0 GiB" in err or "the host has 8.0 GiB" in err


def test_the_plan_table_fits_80_columns(cli, monkeypatch):
    """At 80 columns the table is one table of the columns a reader needs, the top rows' engine settings under it;
    --wide gives every column."""
    from moesim.cli.console import console

    monkeypatch.setattr(console, "width", 80)
    code, out, err = cli("plan", "--model", "olmoe-1b-7b", "--hardware", "rtx5070ti", "--dtype", "q4_k")
    assert code == 0, err
    drawn = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert drawn and max(map(len, drawn)) <= 80
    assert sum("tok/s" in line for line in drawn) == 1  # one header: not split into parts
    assert "#1: llama-server -m OLMoE-1B-7B-0924-Q4_K.gguf" in out
    code, wide, err = cli("plan", "--model", "olmoe-1b-7b", "--hardware", "rtx5070ti", "--dtype", "q4_k", "--wide")
    assert code == 0 and "TPOT" in wide


def test_the_plan_figure_says_what_it_shows(drawn, tmp_path):
    """Title: model, machine, trace; axes in GiB and tokens/s; a legend entry per strategy drawn (one drawn
    exactly under another says so); no text over another."""
    from figures import overlapping_texts

    import moesim
    from moesim.experiments.plan import curves
    from moesim.plots.plan import plot_plan

    plan = moesim.plan("mixtral-8x7b", "rtx4090", dtypes=("q4_k",))
    plot_plan(plan, curves(plan), tmp_path / "plan.png")
    (fig,) = drawn
    title = fig._suptitle.get_text()
    assert "mixtral-8x7b on rtx4090" in title and "RTX4090" in title and "trace" in title
    (ax,) = fig.axes
    assert "GiB" in ax.get_xlabel() and "tokens/s" in ax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {label.split(" ")[0] for label in labels} == {r.strategy for r in plan.rows}
    assert overlapping_texts(fig) == []
    # each line's own row carries its 80% interval as a bar at its point: from low to high, at its GPU memory
    bars = [c for c in ax.collections if c.get_gid() == "interval"]
    drawn_bars = sorted(tuple(np.round(seg, 9).ravel()) for bar in bars for seg in bar.get_segments())
    want = sorted(tuple(np.round([c.row.vram_gb, c.row.tokens_per_s.low, c.row.vram_gb,
                                  c.row.tokens_per_s.high], 9)) for c in curves(plan))
    assert drawn_bars == want and "80% interval" in ax.get_ylabel()


def test_a_plan_row_is_typed_and_written_flat():
    """The API's rows are frozen ``PlanRow``s whose tokens/s is an ``Estimate`` (mid, low, high); ``as_dict()`` (what
    ``--json`` writes: ``tests/test_api_reliability.py``) gives the estimate as ``tokens_per_s``, ``tokens_per_s_low``
    and ``tokens_per_s_high``, before ``tpot_s``."""
    import dataclasses

    import moesim
    from moesim.experiments.plan_row import PlanRow
    from moesim.sim.accuracy import Estimate

    rows = moesim.plan("mixtral-8x7b", "rtx4090", dtypes=["q4_k"]).rows
    assert all(isinstance(r, PlanRow) and isinstance(r.tokens_per_s, Estimate) for r in rows)
    first = rows[0].as_dict()
    assert (first["tokens_per_s"], first["tokens_per_s_low"], first["tokens_per_s_high"]) == tuple(rows[0].tokens_per_s)
    keys = list(first)
    assert keys[:3] == ["rank", "model", "strategy"] and keys[keys.index("tpot_s") - 3:keys.index("tpot_s")] == \
        ["tokens_per_s", "tokens_per_s_low", "tokens_per_s_high"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rows[0].rank = 2


def test_a_row_s_interval_is_the_published_spread_and_a_calibrated_machine_has_none(mixtral_plan, tmp_path):
    """A row's 80% interval is its tokens/s times the published points' band of predictions timed as their engine,
    of the row's side (where its engine computes the experts not on the GPU; an all-on-gpu row's, its engine's), with a
    learned framework time or none; a machine with measured rates (a calibration's) gets none: the published spread
    is a spec sheet's."""
    import moesim
    from moesim.sim.accuracy import FRAMEWORK_BANDS, PREFILL_BAND, measured
    from moesim.sim.engines import ENGINES
    from moesim.sim.hardware import get_hardware
    from moesim.sim.strategies import STRATEGIES

    rows = mixtral_plan[0]["rows"]
    for r in rows:
        learned = ENGINES[r["engine"]].layer_us
        assert r["framework_us"] == learned
        strategy = ENGINES[r["engine"]].runs[0] if r["strategy"] == "all-on-gpu" else r["strategy"]
        low, high, _ = FRAMEWORK_BANDS["CPU" if STRATEGIES[strategy].cpu else "GPU"]
        assert (r["tokens_per_s_low"], r["tokens_per_s_high"]) == pytest.approx(
            (r["tokens_per_s"] * low, r["tokens_per_s"] * high), rel=1e-12)
        # its TTFT's: the prompt's seconds over the published prompts' band (they ran slower: it reaches above)
        assert (r["ttft_s_low"], r["ttft_s_high"]) == pytest.approx(
            (r["ttft_s"] / PREFILL_BAND[1], r["ttft_s"] / PREFILL_BAND[0]), rel=1e-12)
    assert {r["framework_us"] > 0 for r in rows} == {True, False}
    assert {STRATEGIES[r["strategy"]].cpu for r in rows if r["strategy"] != "all-on-gpu"} == {True, False}  # both sides
    hw = get_hardware("ryzen-7950x")
    assert not measured(hw) and measured(replace(hw, cpu=replace(hw.cpu, unpack_gbps=(("q4_k", 9.0),))))
    machine = tmp_path / "calibrated.toml"  # a CPU alone, with a unpack rate measured as a calibration writes it
    machine.write_text('name = "calibrated"\n[cpu]\nname = "c"\ncores = 16\nghz = 4.7\nisa = "avx512-256"\n'
                       'dram_gbps = 83.2\nram_gb = 64\nunpack_gbps = {q4_k = 9.0}\n')
    plan = moesim.plan("olmoe-1b-7b", str(machine), dtypes=("q4_k",))
    assert all(r.tokens_per_s.low is None and r.tokens_per_s.high is None for r in plan.rows)
    assert all(r.ttft_s.mid > 0 and r.ttft_s.low is None and r.ttft_s.high is None for r in plan.rows)


def names(label: str, r: dict) -> bool:
    """Whether a legend label names plan row ``r``: its strategy first, then its format, its policy and its prefetcher
    (a row without one: a label naming no prefetcher)."""
    from moesim.policies.prefetch import PREFETCHERS

    words = set(label.replace("(", " ").replace(")", " ").replace(",", " ").replace("+", " ").split())
    fetch = r.prefetch if r.prefetch not in (None, "none") else None
    return (label.split(" ")[0] == r.strategy and r.format in words
            and (r.policy is None or r.policy in words)
            and {p for p in PREFETCHERS if p != "none"} & words == ({fetch} if fetch else set()))


def test_each_plan_line_is_labelled_by_the_row_it_ends_at(drawn, tmp_path):
    """Qwen3-30B-A3B in bf16 on a 12 GiB card: each line's label names one row of the plan, and the line ends at that
    row's own GPU memory and tokens/s (a gpu-cache line, labelled as plain gpu-cache, once ended at the history
    row's)."""
    import moesim
    from moesim.experiments.plan import curves
    from moesim.plots.plan import plot_plan

    plan = moesim.plan("qwen3-30b-a3b", "rtx4080", vram=12, dtypes=("bf16",))
    assert [r.prefetch for r in plan.rows if r.strategy == "gpu-cache"] == ["history"]
    plot_plan(plan, curves(plan), tmp_path / "plan.png")
    (ax,) = drawn[0].axes
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert len(lines) == len({r.strategy for r in plan.rows if r.gpu})  # (llama.cpp's -ngl 0 row is not drawn)
    wrong = []
    for line in lines:
        label = line.get_label().split(" (= ")[0]
        rows = [r for r in plan.rows if r.gpu and names(label, r)]
        end = (line.get_xdata()[-1], line.get_ydata()[-1])
        if len(rows) != 1 or end != (rows[0].vram_gb, rows[0].tokens_per_s.mid):
            wrong.append(f"{label!r} ends at {end}; the rows it names end at "
                         f"{[(r.vram_gb, r.tokens_per_s.mid) for r in rows]}")
    assert not wrong, "\n".join(wrong)


def test_a_gguf_is_planned_in_its_own_storage(tmp_path):
    """A GGUF in llama.cpp's Q4_K_M mix (one MoE layer's down projections in Q6_K) is planned in the file's own
    storage, named with its mix. The same shape with those down projections in Q4_K needs their extra bytes less GPU
    memory to hold every expert, so a card between the two holds that one whole and not the mixed one."""
    import gguf
    from ggufs import D, D_EXPERT, E, Q, write_gguf

    import moesim
    from moesim.sim.memory import GIB

    mixed, pure = tmp_path / "mixed.gguf", tmp_path / "pure.gguf"
    sizes = write_gguf(mixed, file_type=gguf.LlamaFileType.MOSTLY_Q4_K_M)
    extra = sum(sizes.values()) - sum(write_gguf(pure, down_kinds=(Q.Q4_K,)).values())
    q6_k = E * D_EXPERT * D // 256 * 210  # one layer's down projections: 256-weight blocks of 210 B (Q4_K: 144 B)
    assert extra == q6_k - E * D_EXPERT * D // 256 * 144
    whole = {path: [r for r in moesim.plan(str(path), "rtx4090").rows if r.gpu] for path in (mixed, pure)}
    assert [(r.strategy, r.dtype, r.format) for r in whole[mixed]] == [("all-on-gpu", None, "Q4_K_M")]
    assert [(r.strategy, r.dtype, r.format) for r in whole[pure]] == [("all-on-gpu", None, "Q4_K")]
    assert whole[mixed][0].vram_gb - whole[pure][0].vram_gb == pytest.approx(extra / GIB, rel=1e-9)
    experts = sum(nbytes for name, nbytes in sizes.items() if "_exps." in name)
    assert whole[mixed][0].storage.startswith(
        f"Q4_K_M (the file's: experts q4_k {1 - q6_k / experts:.0%} + q6_k {q6_k / experts:.0%}; other weights ")
    between = whole[pure][0].vram_gb + extra / 2 / GIB
    assert moesim.plan(str(pure), "rtx4090", vram=between).rows[0].strategy == "all-on-gpu"
    assert "all-on-gpu" not in {r.strategy for r in moesim.plan(str(mixed), "rtx4090", vram=between).rows}
    assert [r.command for r in moesim.plan(str(pure), "rtx4090").rows if not r.gpu] == [
        f"llama-server -m {pure} -ngl 0 --no-op-offload -t 16 -c 640"]  # the GPU left out, the file as given


def test_dtype_on_a_gguf_plans_beside_the_files_storage(cli, tmp_path, monkeypatch):
    """--dtype q8_0 gives the file's rows, as without it, and q8_0's; the table (80 columns) names each row's format
    and, under it, the file's mix."""
    import gguf
    from ggufs import write_gguf

    from moesim.cli.console import console

    path = tmp_path / "mixed.gguf"
    write_gguf(path, file_type=gguf.LlamaFileType.MOSTLY_Q4_K_M)
    args = ("plan", "--model", path, "--hardware", "rtx4090")
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    own = json.loads(out)["rows"]
    code, out, err = cli(*args, "--dtype", "q8_0", "--json")
    assert code == 0, err
    both = json.loads(out)["rows"]
    assert {r["format"] for r in own} == {"Q4_K_M"} and {r["format"] for r in both} == {"Q4_K_M", "q8_0"}
    unranked = lambda rows: [{k: v for k, v in r.items() if k != "rank"} for r in rows]  # noqa: E731
    assert unranked(r for r in both if r["format"] == "Q4_K_M") == unranked(own)
    assert {(r["dtype"], r["storage"]) for r in both if r["format"] == "q8_0"} == {("q8_0", "q8_0 (every weight)")}
    monkeypatch.setattr(console, "width", 80)
    code, out, err = cli(*args, "--dtype", "q8_0")
    assert code == 0, err
    drawn = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert max(map(len, drawn)) <= 80 and sum("Q4_K_M*" in line for line in drawn) == len(own)
    assert f"* {own[0]['storage']}" in " ".join(out.split())


def test_a_config_json_that_names_its_quantization_is_planned_in_it():
    """gpt-oss-20b's config.json (quant_method mxfp4) is planned in MXFP4 experts and bf16 for the rest: beside every
    weight in mxfp4, its all-on-gpu row holds the other weights' 2 - 17/32 bytes a parameter more. Its preset,
    which names no storage, is planned in the default formats."""
    from pathlib import Path

    import moesim
    from moesim.experiments.plan import DTYPES
    from moesim.sim.memory import GIB
    from moesim.tracegen.models import MODELS

    config = Path(__file__).parent / "data" / "configs" / "openai__gpt-oss-20b.json"
    assert {(r.dtype, r.format) for r in moesim.plan(str(config), "rtx4080", vram=8).rows} == {(None, "MXFP4")}
    rows = {r.format: r for r in moesim.plan(str(config), "rtx4090", dtypes=["mxfp4"]).rows if r.gpu}
    assert rows["MXFP4"].storage == "MXFP4 (the file's: experts mxfp4; other weights bf16)"
    assert (rows["MXFP4"].vram_gb - rows["mxfp4"].vram_gb) * GIB == pytest.approx(
        MODELS["gpt-oss-20b"].non_expert_params * (2 - 17 / 32), rel=1e-9)
    assert {r.format for r in moesim.plan("gpt-oss-20b", "rtx4080", vram=8).rows} == set(DTYPES)


def test_rows_closer_to_the_first_than_the_published_pairs_tell_apart_say_so(cli):
    """A row after the first is tied with it where #1's tokens/s is less than TIE_RATIO times its own (1.49: the widest
    apart moesim predicted two settings on one machine it then ordered wrong, held out), and the table says which."""
    from moesim.sim.accuracy import TIE_RATIO, tied

    assert tied(10.0, 14.8) and not tied(10.0, 15.0) and tied(14.8, 10.0) and TIE_RATIO == 1.49
    args = ("plan", "--model", "mixtral-8x7b", "--hardware", "rtx4090", "--dtype", "bf16")
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    first = rows[0]["tokens_per_s"]
    assert [r["tied"] for r in rows] == [False] + [first < TIE_RATIO * r["tokens_per_s"] for r in rows[1:]]
    close = [f"#{r['rank']}" for r in rows if r["tied"]]
    assert close  # Fiddler's and llama.cpp's bf16 rows: 3.65 and 3.17 tokens/s
    code, out, err = cli(*args)
    assert code == 0 and f"{', '.join(close)}: within x1.49 of #1's tokens/s" in " ".join(out.split()), err


def test_several_models_are_ranked_together_on_one_machine(cli):
    """``--model A,B,C`` (a preset by its Hugging Face id too): each model planned on its own trace, every offered
    row of all of them ranked by tokens/s, each naming its model, the same rows each model's own plan gives; ``--explain
    N`` explains the Nth of them; ``--trace`` with several is refused in one line."""
    import moesim

    args = ("plan", "--model", "Qwen/Qwen3-30B-A3B,olmoe-1b-7b", "--hardware", "rtx4080", "--dtype", "q4_k")
    code, out, err = cli(*args, "--explain", "2", "--json")
    assert code == 0, err
    both = json.loads(out)
    rows = both["rows"]
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert [r["tokens_per_s"] for r in rows] == sorted((r["tokens_per_s"] for r in rows), reverse=True)
    for name in ("qwen3-30b-a3b", "olmoe-1b-7b"):
        alone = moesim.plan(name, "rtx4080", dtypes=["q4_k"]).rows
        assert [(r["engine"], r["tokens_per_s"]) for r in rows if r["model"] == name] == [
            (r.engine, r.tokens_per_s.mid) for r in alone]
    assert sum(line["value"] for line in both["explain"]["step"]) == pytest.approx(rows[1]["tpot_s"] * 1e3, rel=1e-9)
    code, _, err = cli(*args, "--trace", "bundled")
    assert code == 1 and err.count("\n") == 1 and "--trace is one model's" in err
    code, _, err = cli(*args, "--wide")
    assert code == 1 and err.count("\n") == 1 and "--wide is one model's" in err
    # a model that fits nowhere on the machine is one line; the others still answer
    code, out, err = cli("plan", "--model", "olmoe-1b-7b,qwen3-235b-a22b", "--hardware", "rtx4080", "--dtype", "bf16",
                         "--json")
    assert code == 0, err
    both = json.loads(out)
    assert {r["model"] for r in both["rows"]} == {"olmoe-1b-7b"}
    assert [f.split(":")[0] for f in both["failed"]] == ["qwen3-235b-a22b"] and "nothing fits" in both["failed"][0]


def test_a_model_is_found_by_its_hugging_face_id_and_a_slip_is_answered_with_the_nearest():
    from moesim.errors import MoesimError
    from moesim.tracegen.models import get_model

    assert get_model("Qwen/Qwen3-30B-A3B") is get_model("qwen3-30b-a3b")
    assert get_model("mistralai/mixtral-8x7b-v0.1").name == "mixtral-8x7b"
    with pytest.raises(MoesimError, match=r"unknown model 'qwen3-30b-a3': did you mean qwen3-30b-a3b or "):
        get_model("qwen3-30b-a3")
    with pytest.raises(MoesimError, match=r"unknown model 'gpt-5': \(presets: "):
        get_model("gpt-5")


def test_a_gpu_too_small_for_anything_still_gets_llama_cpps_cpu_only_row(cli):
    """Qwen3-30B-A3B on an RTX 4080 given 0.5 GiB of GPU memory: nothing fits on the GPU, but llama.cpp with the GPU
    left out (-ngl 0) runs, and is the one row: the same tokens/s as the plan for the 4080's CPU alone (the
    ryzen-7950x preset), none of it on the GPU; the plan's figure leaves it out."""
    import moesim
    from moesim.experiments.plan import curves

    small = moesim.plan("qwen3-30b-a3b", "rtx4080", dtypes=["q4_k"], vram=0.5)
    (row,) = small.rows
    alone = next(r for r in moesim.plan("qwen3-30b-a3b", "ryzen-7950x", dtypes=["q4_k"]).rows
                 if r.strategy == "cpu-experts")
    assert row.command == "llama-server -m Qwen3-30B-A3B-Q4_K.gguf -ngl 0 --no-op-offload -t 16 -c 640"
    assert row.vram_gb == 0
    assert row.tokens_per_s.mid == alone.tokens_per_s.mid and row.cpu_layers == 48
    assert curves(small) == []
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hardware", "rtx4080", "--vram", "0.5", "--dtype",
                         "q4_k")
    assert code == 0 and "none: CPU only" in out, err


def test_where_the_fastest_of_one_placement_cannot_be_run_the_row_names_an_engine_that_can():
    """Qwen3-30B-A3B in int4 fits an H100 whole: llama.cpp (whose rows of that placement are the fastest) runs no int4
    experts, kTransformers does (AMXINT4): the all-on-gpu row is offered, named for kTransformers with its command."""
    import moesim

    (whole,) = [r for r in moesim.plan("qwen3-30b-a3b", "h100", dtypes=["int4"]).rows if r.strategy == "all-on-gpu"]
    assert whole.engine == "kTransformers" and not whole.apart and "--kt-method AMXINT4" in whole.command
    assert "--kt-num-gpu-experts 128" in whole.command and "cpu-experts" in whole.same_as


def test_a_model_larger_than_ram_is_planned_from_the_ssd(cli):
    """Where host RAM cannot hold the CPU layers' experts, the plan offers llama.cpp mapping the file as it does: as
    many experts held in RAM as fit beside everything else, the rest read from the SSD (the machine's, else a PCIe 4
    drive, said to be assumed), each row saying so; where they fit, no row reads the SSD."""
    import moesim
    from moesim.sim.memory import GIB

    p = moesim.plan("qwen3-30b-a3b", "ryzen-7950x", ram=12)  # its experts alone take 15 GiB in q4_k
    assert p.rows and all(r.from_ssd.endswith("read from the SSD (pcie4-nvme, assumed) as the mapped file is")
                          for r in p.rows)
    for r, result in zip(p.rows, p.results):
        held = result.config.cache.dram_capacity
        assert 0 < held < 48 * 128 and r.from_ssd.startswith(f"{held:,} of the CPU layers' 6,144 experts in RAM")
        assert r.ram_gb <= 12 and result.bytes_ssd > 0 and r.command.startswith("llama-server")
        assert r.ram_gb + p.spec.expert_bytes(r.dtype) / GIB > 12  # the most RAM holds: one more would not fit
    assert not any(r.from_ssd for r in moesim.plan("qwen3-30b-a3b", "ryzen-7950x").rows)
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hardware", "ryzen-7950x", "--ram", "12")
    assert code == 0, err
    assert "CPU only, SSD" in out and "#1 (SSD): " in " ".join(out.split())


def test_expert_counts_are_the_file_a_ktransformers_row_reads(cli, tmp_path):
    """``--expert-counts F`` writes SGLang's expert-distribution JSON (``logical_count``: a row per layer of the model,
    a dense layer's zeros first, then each MoE layer's routing counts over the plan's trace), the file the
    kTransformers row's ``--init-expert-location`` names."""
    import moesim
    from moesim.experiments.plan import expert_counts
    from moesim.sim.engines.ktransformers import EXPERT_COUNTS

    out = tmp_path / "counts.json"
    code, text, err = cli("plan", "--model", "qwen3-30b-a3b", "--hardware", "rtx4080", "--dtype", "q4_k",
                          "--expert-counts", out)
    assert code == 0, err
    assert f"--init-expert-location {EXPERT_COUNTS}" in " ".join(text.split())
    p = moesim.plan("deepseek-v2-lite", "rtx4080", dtypes=["q4_k"])
    assert json.loads(out.read_text())["logical_count"] == expert_counts(moesim.plan("qwen3-30b-a3b", "rtx4080",
                                                                                     dtypes=["q4_k"]))
    counts, spec, trace = expert_counts(p), p.spec, p.simulated
    assert spec.dense_layers == 1 and len(counts) == spec.dense_layers + spec.num_layers
    assert counts[0] == [0] * spec.num_experts
    for layer in range(spec.num_layers):  # an independent count: each routed expert of the layer's rows
        expected = [0] * spec.num_experts
        for e in trace.experts[:, layer].ravel().tolist():
            expected[e] += 1
        assert counts[1 + layer] == expected
