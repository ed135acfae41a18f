"""The code the README and docs/ show works as written: every Python block runs, and every `moesim` command in a
shell block parses (its command exists, its options exist and take values of their types)."""

import re
import shlex
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(language: str) -> list[tuple[str, str]]:
    """(where, code) of every fenced block of ``language`` in the pages."""
    out = []
    for page in PAGES:
        text = page.read_text()
        for match in re.finditer(rf"^```{language}\n(.*?)^```", text, re.S | re.M):
            line = text[:match.start()].count("\n") + 1
            out.append((f"{page.name}:{line}", match.group(1)))
    return out


def commands() -> list[tuple[str, list[str]]]:
    """(where, arguments) of every `moesim` command in the shell blocks, continuation lines joined, comments and
    the shell's own syntax after it (pipes, redirections, `&&`) cut off. A synopsis reads as one command: the
    first of ``a|b|c``, without its ``[optional ...]`` parts."""
    out = []
    for where, code in blocks("bash"):
        for line in code.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|;|\s\|\s", line.split(" #")[0]):
                part = re.sub(r"(?<=\s)\[[^\]]*\]", "", part)
                words = [w.split("|")[0] for w in shlex.split(part, comments=True)]
                redirect = next((i for i, w in enumerate(words) if re.match(r"\d?[<>]", w)), len(words))
                if words[:1] == ["moesim"]:
                    out.append((where, words[1:redirect]))
    return out


@pytest.mark.parametrize("where,code", blocks("python"), ids=[w for w, _ in blocks("python")])
def test_python_blocks_run(where, code, tmp_path, monkeypatch):
    """Each Python block, in a fresh namespace, in an empty folder that has the checkout's examples/."""
    if "torch" in code:
        pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    exec(compile(code, where, "exec"), {"__name__": "__docs__"})


def test_every_shown_command_parses():
    """Each `moesim ...` line shown: its subcommands resolve and click accepts its options and values (nothing
    runs). Placeholders in capitals (TRACE, M, H) stand for a user's own values and are taken as given."""
    from moesim.cli.app import app

    root = typer.main.get_command(app)
    shown = commands()
    assert len(shown) > 50
    for where, args in shown:
        command, name, ctx = root, "moesim", None
        try:
            while hasattr(command, "resolve_command"):  # a group: take its subcommand
                ctx = command.make_context(name, list(args), parent=ctx)
                name, command, args = command.resolve_command(ctx, ctx._protected_args + ctx.args)
                assert command is not None, f"{where}: moesim {name}: no such command"
            command.make_context(name, list(args), parent=ctx)
        except Exception as exc:  # typer's own click: its usage errors carry format_message
            if type(exc).__name__ == "Exit":  # --help, --version
                continue
            if not hasattr(exc, "format_message"):
                raise
            raise AssertionError(f"{where}: moesim ... {name} {shlex.join(args)}: {exc.format_message()}") from None


README_RUNS = {  # the README's shell lines, by how each starts: the test that runs it, or why none does
    "python3 -m venv": "installs: CI runs the tests' line on a clean clone (.ci/run); the demo it ends with is "
                       "test_cli's test_demo_writes_its_table_and_plots",
    "moesim demo": "test_cli's test_demo_writes_its_table_and_plots",
    "moesim plan": "test_the_readme_plan_commands_run_as_written",
}


# the docs' shell lines, by how each starts: the tests that run that command (on the bundled trace, tiny models and
# files of their own, where a line names a user's files, a download or minutes of measuring), or why none does
DOCS_RUNS = {
    "moesim trace synth": "test_cli, test_replay (as the docs' lines, on smaller shapes)",
    "moesim trace import": "test_cli, test_import_reliability (the docs' lines name a user's logs)",
    "moesim trace info": "test_cli",
    "moesim trace record": "test_record, on tiny random-initialised models (the docs' lines download real ones)",
    "moesim sim hitrate": "test_cli, test_sim_cli",
    "moesim sim mrc": "test_mrc",
    "moesim sim run": "test_cli, test_sim_cli, test_strategies (the docs' lines name a user's trace, t.parquet, $T)",
    "moesim sim serve": "test_serve",
    "moesim sweep": "test_sweep, test_api's docstring run of examples/flashmoe_fig6.toml",
    "moesim plot": "test_plot, test_serve (on the results those tests write)",
    "moesim plan": "test_plan, test_the_readme_plan_commands_run_as_written",
    "moesim hardware": "test_hardware_files, test_local_kept",
    "moesim train ml-ffn": "test_sim_cli (needs torch)",
    "moesim train prefetcher": "test_learned_prefetcher",
    "moesim calibrate": "test_replay, test_llamacpp_model, on tiny models: a real calibration measures for minutes",
    "moesim replay": "test_replay, on a cut model: the docs' lines replay the full one for minutes",
    "moesim validate": "test_replay, test_llamacpp_model, on tiny models: the docs' lines run for minutes",
    "python benchmarks/": "not run by the tests: benchmarks take minutes and print timings (docs/benchmarks.md)",
    "python examples/vllm_routing_log.py": "test_vllm_recipe",
    "printf ": "makes a prompts file for trace record's line after it",
    "pip install": "installs: CI installs the test extra on a clean clone (.ci/run)",
    "CMAKE_ARGS=": "installs llama.cpp for this CPU: CI's install line",
}


def shell_lines(page: str) -> list[str]:
    """The commands of a page's shell blocks, continuation lines joined, comments left out."""
    return [line.strip() for where, code in blocks("bash") if where.startswith(page)
            for line in code.replace("\\\n", " ").splitlines() if line.strip() and not line.strip().startswith("#")]


def test_every_readme_shell_line_is_run_or_says_why_not():
    readme = shell_lines("README.md")
    assert len(readme) >= 5 and [line for line in readme if not line.startswith(tuple(README_RUNS))] == []


def test_every_docs_shell_line_is_run_or_says_why_not():
    """Each shell line of docs/ starts as a command ``DOCS_RUNS`` names the tests of, or says why none runs it; a new
    kind of line is added there, with its test or its reason, before it is shown."""
    lines = [line for page in PAGES[1:] for line in shell_lines(page.name)]
    assert len(lines) > 80 and [line for line in lines if not line.startswith(tuple(DOCS_RUNS))] == []


def test_the_readme_plan_commands_run_as_written(cli, tmp_path, monkeypatch):
    """In a folder holding the files the README's plan lines name (a config.json of Qwen3-30B-A3B at
    path/to/config.json, the hardware template as box.toml, a small MoE as model.gguf, the two-GPU example), each line
    runs as printed, on this machine where it says --hardware local, and ranks rows with a command each."""
    import shutil

    from ggufs import write_gguf

    monkeypatch.chdir(tmp_path)
    (tmp_path / "path" / "to").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "data" / "configs" / "Qwen__Qwen3-30B-A3B.json", tmp_path / "path/to/config.json")
    code, template, _ = cli("hardware", "--template")
    assert code == 0
    (tmp_path / "box.toml").write_text(template)
    write_gguf(tmp_path / "model.gguf")
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "two-3090.toml", tmp_path / "examples")
    shown = [args for where, args in commands() if where.startswith("README.md") and args[:1] == ["plan"]]
    assert len(shown) == 4
    for args in shown:
        code, out, err = cli(*args)
        assert code == 0, (args, err)
        assert "llama-server -m " in " ".join(out.split()), (args, out[-2000:])  # a row's command
    assert (tmp_path / "plan.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("script", sorted((ROOT / "benchmarks").glob("*.py")), ids=lambda p: p.name)
def test_every_benchmark_script_imports_what_moesim_has(script):
    """The benchmarks are not run here (minutes each), but each loads: every name it imports from moesim exists (one
    that imported a function since moved failed only when run). A third-party package it needs and this install
    lacks skips it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("moesim"):
            raise
        pytest.skip(f"needs {exc.name}")
