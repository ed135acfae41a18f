"""The compiled loops are cached on disk under a digest of every file whose code they inline."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from moesim.sim import des_loop
from moesim.policies import get_policy
from moesim.sim.engine import source_files

RUN = """
import sys
import numpy as np
sys.path[:0] = {paths!r}
import loop_mod, policy_mod
from moesim.sim.engine import bind
out = np.zeros(1, np.int64)
bind(loop_mod.loop, "policy_mod", policy_mod.HOOKS)((out,), ())
print(out[0])
"""


def test_editing_an_inlined_helper_in_another_file_recompiles(tmp_path):
    """A helper the loop calls lives in a third folder: after it is edited, the next process must
    compile afresh rather than load the cached loop (which would still print the old value)."""
    folders = {name: tmp_path / name for name in ("loops", "helpers", "policies")}
    for folder in folders.values():
        folder.mkdir()
    helper = folders["helpers"] / "helper_mod.py"
    helper.write_text("from numba import njit\n\n\n@njit(cache=True)\ndef value():\n    return 1\n")
    (folders["loops"] / "loop_mod.py").write_text(textwrap.dedent("""
        from helper_mod import value
        from moesim.policies.base import UNBOUND as policy


        def loop(args, st):
            args[0][0] = value() + policy.choose_victim(st, 0, 0, 0, args[0], args[0], args[0], 0, 0, 0)
    """))
    (folders["policies"] / "policy_mod.py").write_text(textwrap.dedent("""
        from numba import njit
        from moesim.policies.base import hooks


        @njit(cache=True)
        def choose_victim(st, part, lo, hi, obj_of, slot_of, mark, stamp, obj, t):
            return 10


        HOOKS = hooks(choose_victim=choose_victim)
    """))
    script = RUN.format(paths=[str(f) for f in folders.values()])
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}

    def run() -> str:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
        return done.stdout.strip()

    assert run() == "11"
    assert run() == "11"  # from the cache
    helper.write_text(helper.read_text().replace("return 1", "return 2"))
    assert run() == "12"
    assert any((tmp_path / "cache").rglob("*.nbi"))


def test_the_digest_covers_the_helpers_and_the_policys_neighbours():
    files = {f.name for f in source_files([des_loop.des_loop, *des_loop.HELPERS, *get_policy("lecar").hooks.values()])}
    assert {"des_loop.py", "engine.py", "base.py", "lecar.py", "lfu.py"} <= files
    from moesim.sim import policy_groups

    group = policy_groups.group_of("lfu")  # a group's hooks, written as source, and each member's placing
    files = {f.name for f in source_files(policy_groups.hooks(group).values())}
    hooks = {Path(hook.py_func.__code__.co_filename).name for p in group for hook in get_policy(p).hooks.values()}
    assert {"policy_groups.py", "engine.py", "lfu.py", "gamma.py", "belady.py"} | hooks <= files


def test_one_compilation_serves_every_workload():
    """Single-token rows, batched rows and a synthesized prompt pass the loop the same array types, so
    ``plan`` and ``sim run`` share one compiled loop per group of policies (a second would cost ~15 s cold), and
    it is on disk for ``compile_loops`` to find. (Each run keeps its decisions, so all take the full build.)"""
    from moesim.sim.config import Config
    from moesim.sim.des import simulate_des
    from moesim.sim.engine import on_disk
    from moesim.sim.run import bound_loop
    from moesim.tracegen.io import load_trace
    from moesim.tracegen.trace import bundled_trace_path

    trace = load_trace(bundled_trace_path())
    for settings in ({}, {"batch": 2}, {"prompt": 64, "prefetch": "oracle", "mode": "commit"}, {"policy": "static"},
                     {"policy": "static", "strategy": "cpu-miss", "scope": "global", "capacity": 96,
                      "prefetch": "popular"}):
        simulate_des(trace, Config.build(model="mixtral-8x7b", **{"capacity": 4, "dtype": "q4_k", **settings}),
                     decisions=True)
    loop = bound_loop("lru")
    assert loop is bound_loop("static")  # one group: LRU's runs and the static pin's share the loop
    assert len(loop.signatures) == 1
    assert on_disk(loop)


@pytest.mark.parametrize("policy, builds", [("lru", ("lean", "whole", "full")), ("gamma", ("lean", "full"))])
def test_every_build_of_the_loop_gives_the_same_results(policy, builds, mixtral, monkeypatch):
    """A run gives the same result and step times from every build of the loop that can run it: a plain cache from
    the lean one (``EXTRAS`` 0, about half the compile time), the whole one and the full one (``RARE`` 1 too: the
    decision log, given-back slots, MoLE rows), a prefetching run from the whole and the full one. A run takes the
    least build it needs that is compiled, and needs the full one to keep its decisions."""
    import moesim.sim.run as run
    from moesim.sim.config import Config
    from moesim.sim.des import simulate_des
    from moesim.tracegen.models import get_model

    model = get_model("mixtral-8x7b")

    def result(build, config):
        monkeypatch.setattr(run, "loop_for", lambda p, need: run.bound_loop(p, build))
        r = simulate_des(mixtral, config)
        return {k: getattr(v, "tolist", lambda: v)() for k, v in r.as_dict().items() if k != "seconds"}, \
            r.step_times.tolist()

    for settings in ({"capacity": 3}, {"capacity": 96, "scope": "global", "batch": 2, "prompt": 16},
                     {"capacity": 3, "prefetch": "oracle"}):
        config = Config.build(model="mixtral-8x7b", policy=policy, dtype="q4_k", **settings)
        can = [b for b in map(run.BUILDS.index, builds) if b >= run.build_for(config, model)]  # the builds it can take
        got = [result(b, config) for b in can]
        assert all(g == got[0] for g in got) and got[0][0]["hits"] > 0
    for b in builds:
        assert run.bound_loop(policy, run.BUILDS.index(b)).signatures  # each build ran
    monkeypatch.undo()
    assert run.build_for(Config.build(policy=policy), model) == run.LEAN
    assert all(run.build_for(Config.build(**s), model) == run.WHOLE
               for s in ({"prefetch": "oracle"}, {"strategy": "hybrid"}, {"strategy": "cpu-experts"}))
    assert run.build_for(Config.build(policy=policy), model, decisions=True) == run.FULL
    assert run.build_for(Config.build(policy=policy), model, served=True) == run.FULL
    assert run.loop_for(policy, run.LEAN) is run.bound_loop(policy, run.LEAN)  # the least compiled build it can take
    above = [run.bound_loop(policy, b) for b in (run.WHOLE, run.FULL)]  # the whole build where it ran, else either
    assert run.loop_for(policy, run.WHOLE) in (above[:1] if "whole" in builds else above)
    logged = simulate_des(mixtral, Config.build(model="mixtral-8x7b", policy=policy, capacity=3, dtype="q4_k"),
                          decisions=True)
    assert len(logged.decisions) == int((logged.executed[0] >= 0).sum())  # a hit or a load for every expert run


def _inlining(n):
    """A function that inlines a many-block helper three times."""
    from numba import njit

    @njit(inline="always")
    def helper(a, i):
        total = 0
        for j in range(i):
            if a[j] > 0:
                total += a[j]
            elif a[j] < -1:
                total -= 1
        return total

    def caller(a):
        return helper(a, n) + helper(a, n - 1) + helper(a, n - 2)

    return caller


def test_the_inliners_shared_copy_compiles_the_same_code():
    """numba's own block-by-block copy and ``inline_copy``'s shared-memo copy give the same assembly."""
    import copy
    import re

    import numpy as np
    from numba import njit
    from numba.core import inline_closurecall

    from moesim.sim import inline_copy

    a = np.arange(-3, 5, dtype=np.int64)
    installed = inline_closurecall.copy
    assert isinstance(installed, inline_copy._BlockCopier)
    asm = []
    for copier in (copy, installed):
        inline_closurecall.copy = copier
        try:
            fn = njit(_inlining(6))
            assert fn(a) == sum(sum(v if v > 0 else -1 if v < -1 else 0 for v in a[:i]) for i in (6, 5, 4))
            # numba's serial number in the function's name, and the size of a string holding the name, move with
            # how many functions the process compiled before
            asm.append(re.sub(r"caller\S*( \d+)?", "caller", fn.inspect_asm(fn.signatures[0])))
        finally:
            inline_closurecall.copy = installed
    assert asm[0] == asm[1]


def test_the_block_copier_shares_a_scope_within_one_copy_only():
    from numba.core import ir

    from moesim.sim.inline_copy import _BlockCopier

    loc = ir.Loc("f.py", 1)
    scope = ir.Scope(None, loc)
    x = scope.define("x", loc)
    blocks = [ir.Block(scope, loc) for _ in range(3)]
    for b in blocks:
        b.append(ir.Assign(ir.Const(1, loc), x, loc))
    copier = _BlockCopier()
    first = [copier.deepcopy(b) for b in blocks]
    again = [copier.deepcopy(b) for b in blocks]  # the same function copied a second time
    for copies in (first, again):
        assert all(c.scope is copies[0].scope for c in copies) and copies[0].scope is not scope
        assert all(c.body[0].target is copies[0].scope.get("x") for c in copies)
    assert first[0].scope is not again[0].scope and first[0].body[0].target is not again[0].body[0].target
    assert scope.localvars._con.keys() == {"x"}  # the original is untouched


def test_a_process_moesim_owns_loads_its_compiled_code_without_scipys_blas():
    """``blas_probe.skip`` keeps numba's first load from importing SciPy's linalg; numba's own ``np.dot`` still finds
    the BLAS when it is compiled, and a second call changes nothing."""
    script = """
import sys
from moesim.sim import blas_probe
blas_probe.skip()
import numba.np.arraymath, numpy as np
from numba import njit
import moesim
moesim.hitrate(moesim.load_trace(moesim.bundled_trace()), "lru", 4)
print("linalg" if "scipy.linalg" in sys.modules else "no linalg", numba.np.arraymath._HAVE_BLAS)
blas_probe.skip()
dot = njit(lambda a, b: np.dot(a, b))
print(float(dot(np.arange(3.0), np.arange(3.0))), "scipy.linalg" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["no linalg False", "5.0 True"]


def test_the_installed_command_loads_its_compiled_code_without_scipys_blas(tmp_path):
    """``moesim``'s entry point skips the probe before anything loads numba's registries: a command that runs
    compiled code (a hit-rate run) leaves SciPy's linalg unimported, and importing the command line loads no
    registry first (which would leave the probe as it was)."""
    script = """
import atexit, sys
atexit.register(lambda: print("scipy.linalg" in sys.modules, "numba.np.arraymath" in sys.modules))
import moesim.cli.app
print("numba.np.arraymath" in sys.modules)
sys.argv = ["moesim", "sim", "hitrate", "bundled", "--capacity", "4", "--json"]
moesim.cli.app.entry()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0] == "False" and '"hit_rate"' in done.stdout, done.stderr
    assert lines[-1] == "False True"
