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
