"""The shape of the package (DESIGN.md, docs/architecture.md): dependencies point one way —
cli -> api -> experiments, plots, replay -> sim -> policies -> tracegen (with the model presets) -> errors and
files — so the
core never imports the command line, ``policies`` never imports ``sim``, and no two subpackages
import each other. Every import is counted, at module level or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"core": "moesim", "cli": "moesim.cli", "tracegen": "moesim.tracegen", "policies": "moesim.policies",
           "sim": "moesim.sim", "experiments": "moesim.experiments", "plots": "moesim.plots", "replay": "moesim.replay"}
RANK = {"base": 0, "tracegen": 1, "policies": 2, "sim": 3, "experiments": 4, "plots": 4, "replay": 4, "api": 5,
        "cli": 6}


def component(module: str) -> str:
    """The layer a module belongs to."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("errors", "files"):  # the root package holds the version, nothing else
        return "base"
    return {"__main__": "cli"}.get(parts[1], parts[1])


def modules() -> dict[str, Path]:
    out = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            name = ".".join([package, *rel.parts])
            out[name.removesuffix(".__init__")] = path
    return out


def imports(path: Path) -> set[str]:
    """The moesim modules a file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("moesim")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("moesim"):
            found.add(node.module)
    return found


EDGES = sorted((name, target) for name, path in modules().items() for target in imports(path))


def test_the_mapping_covers_every_folder_with_code():
    assert {p.parent.relative_to(ROOT).parts[0] for p in modules().values()} == set(FOLDERS)


def test_imports_point_down_the_layers():
    up = [f"{a} ({component(a)}) imports {b} ({component(b)})" for a, b in EDGES
          if component(a) != component(b) and RANK[component(b)] >= RANK[component(a)]]
    assert not up and len(EDGES) > 100


def test_nothing_but_the_command_line_imports_it():
    assert not [e for e in EDGES if component(e[1]) == "cli" and component(e[0]) != "cli"]


def test_policies_never_import_sim():
    assert not [e for e in EDGES if component(e[0]) == "policies" and component(e[1]) == "sim"]


def test_import_moesim_is_cheap_and_lists_the_public_api():
    import subprocess
    import sys

    code = ("import sys, moesim; heavy = [m for m in ('numba', 'polars', 'moesim.sim') if m in sys.modules]; "
            "print(heavy, sorted(set(moesim.__all__) - set(dir(moesim))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] []"
