"""How much of the product's code checks its input: the share issue 66 asks to bring to 60% of what it was.

Counted on the source (``ast``), folder by folder of the product (core, tracegen, policies, sim, experiments, plots,
replay, cli), in a commit given or the working tree:

- executable lines: the lines of every simple statement, and the header lines of every compound one (``def``,
  ``if``, ``for``, ... up to its body), docstrings left out;
- of them, checking lines: every ``raise`` statement; an ``if`` whose body only raises (its test too); the whole
  body of a function named ``check*``, ``_check*``, ``*refuse*`` or ``*unread*``.

It prints each folder's lines and share, the total, and the count of ``MoesimError(`` sites.

    python benchmarks/validation_share.py            # the working tree
    python benchmarks/validation_share.py --rev HEAD~5
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("core", "tracegen", "policies", "sim", "experiments", "plots", "replay", "cli")
CHECKERS = re.compile(r"^_?check|refuse|unread")


def sources(rev: str | None) -> dict[str, str]:
    """Every product module's text, by path: from the working tree, or from ``rev``."""
    if rev is None:
        return {str(p.relative_to(ROOT)): p.read_text() for folder in FOLDERS
                for p in sorted((ROOT / folder).rglob("*.py"))}
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", rev, *FOLDERS], check=True,
                            capture_output=True, text=True).stdout.split()
    return {path: subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True,
                                 text=True).stdout for path in listed if path.endswith(".py")}


def _span(node: ast.AST) -> set[int]:
    return set(range(node.lineno, node.end_lineno + 1))


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def count(text: str) -> tuple[set[int], set[int]]:
    """A module's executable lines and, of them, its checking lines (module docstring)."""
    executable, checking = set(), set()
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.stmt) or _docstring(node):
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.AST):  # a compound statement: its header
            executable |= set(range(node.lineno, body[0].lineno))
        else:
            executable |= _span(node)
        if isinstance(node, ast.Raise):
            checking |= _span(node)
        elif isinstance(node, ast.If) and not node.orelse and all(isinstance(s, ast.Raise) for s in node.body):
            checking |= _span(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and CHECKERS.search(node.name):
            checking |= _span(node)
    return executable, checking & executable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="a git revision (default: the working tree)")
    args = parser.parse_args()
    texts = sources(args.rev)
    totals = {}
    for folder in FOLDERS:
        lines = [count(text) for path, text in texts.items() if path.split("/")[0] == folder]
        totals[folder] = (sum(len(e) for e, _ in lines), sum(len(c) for _, c in lines))
    print(f"{'folder':12} {'executable':>10} {'checking':>9} {'share':>6}")
    for folder, (executable, checking) in totals.items():
        print(f"{folder:12} {executable:10d} {checking:9d} {checking / max(executable, 1):6.1%}")
    executable, checking = (sum(t[i] for t in totals.values()) for i in (0, 1))
    print(f"{'all':12} {executable:10d} {checking:9d} {checking / executable:6.1%}")
    sites = sum(text.count("MoesimError(") for text in texts.values())
    print(f"MoesimError( sites: {sites} ({args.rev or 'working tree'})")


if __name__ == "__main__":
    main()
