"""The shape of the package (DESIGN.md, docs/architecture.md): dependencies point one way —
cli -> api -> experiments, plots, replay -> sim -> policies -> tracegen (with the model presets) -> errors, files,
plug-ins' parameters, the host's memory and worker pools — so the core never imports the command line, ``policies``
never imports ``sim``, no two subpackages import each other, no two modules anywhere import each other in a cycle, and
no module imports another's private (underscored) name. Every import is counted, at module level or inside a
function."""

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
    if len(parts) == 1 or parts[1] in ("errors", "files", "frames", "host", "params", "workers"):  # the root package: the version
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


def module_edges() -> dict[str, set[str]]:
    """Every module's imports of other moesim modules, to the module: ``from moesim.sim import des`` is an edge to
    ``moesim.sim.des`` (a submodule), ``from moesim.sim.des import x`` to ``moesim.sim.des``."""
    known = modules()
    graph = {}
    for name, path in known.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("moesim"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in known else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("moesim")}
        graph[name] = {t for t in targets if t in known and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each holds an import cycle."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


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


def test_no_import_cycle_anywhere():
    assert cycles(module_edges()) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_anothers_private_name():
    private = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("moesim"):
                private += [f"{name}: from {node.module} import {a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert private == []


def test_no_name_from_nowhere():
    """pyflakes finds no undefined name in the package: a loop's hooks reach it through ``policy`` (its
    placeholder imported), lane constants are defined with their defaults, nothing is injected unseen."""
    from pyflakes import api, messages
    from pyflakes.reporter import Reporter

    found = []

    class Collect(Reporter):
        def __init__(self):
            super().__init__(None, None)

        def flake(self, message):
            if isinstance(message, (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)):
                found.append(str(message))

        def syntaxError(self, *args):  # noqa: N802 (pyflakes' name)
            found.append(f"syntax error: {args}")

    for path in modules().values():
        api.check(path.read_text(), str(path), Collect())
    assert found == []


def test_the_batch_and_the_served_run_drive_the_engine_only_through_run_step():
    """``sim/des.py`` and ``sim/serve.py`` assemble their runs with ``moesim.sim.run.assemble`` and step them; they
    write no field of the engine's state (``state``, ``progress``, ``tally``, ``cache``, ``live``)."""
    engine_fields = {"state", "progress", "tally", "cache", "live", "inputs", "span", "offset", "now"}
    for name in ("des", "serve"):
        path = ROOT / "sim" / f"{name}.py"
        tree = ast.parse(path.read_text())
        writes = []
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                names = {n.attr for n in ast.walk(target) if isinstance(n, ast.Attribute)}
                if names & engine_fields and not isinstance(target, ast.Name):
                    writes.append(f"{name}.py:{node.lineno}")
        assert writes == [], writes
        assert "assemble" in {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
