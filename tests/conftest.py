import os
import sys
from pathlib import Path

# pytest-xdist runs a worker per core: each computes on one thread (torch's OpenMP, numpy's BLAS), or the workers'
# thread pools, spinning while they wait, outnumber the cores (the policy-study notebook beside the replay tests
# took 82 s instead of 33). Set before anything here imports numpy or torch, which read them once.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")

# ``--hardware local`` keeps what it measured per machine (``moesim.sim.local_kept``): the suite keeps it in a folder
# of its own, removed at exit, never the user's (each worker process its own)
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

os.environ["MOESIM_CACHE"] = tempfile.mkdtemp(prefix="moesim-test-cache-")
atexit.register(shutil.rmtree, os.environ["MOESIM_CACHE"], ignore_errors=True)

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# every random choice takes a seed: hypothesis draws the same examples in every run (one found a new case each run)
settings.register_profile("moesim", derandomize=True)
settings.load_profile("moesim")

import crash_once  # noqa: E402
from moesim.tracegen.io import load_trace  # noqa: E402
from moesim.tracegen.trace import bundled_trace_path  # noqa: E402

SHARED_TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mixtral-8x7b" / "gsm8k_2_routing.jsonl"


pytest_xdist_make_scheduler = crash_once.pytest_xdist_make_scheduler  # a crashed worker is one failed test


@pytest.hookimpl(trylast=True)  # after the terminal's own: its status line is there
def pytest_configure(config):
    """Run across worker processes (``-n``, pytest-xdist), the suite first compiles the discrete-event loops of
    every group of policies (``moesim.sim.policy_groups``), the bulk of a cold run's compiling (15-25 s each on 2
    cores), where numba's disk cache lacks them: once each, one process per core, before the workers start
    (``compile_loops``; the largest groups first, so that no core waits on one at the end). Each worker would
    compile what its tests run, twice where two workers' tests need one group at once; they load the loops from
    disk instead. Only for the whole suite: a run of a few files compiles what they run."""
    if not getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput"):
        return
    if any(Path(arg.split("::")[0]).resolve() != Path(__file__).resolve().parent for arg in config.args):
        return
    from moesim.sim.des import compile_loops
    from moesim.sim.policy_groups import GROUPS
    from moesim.sim.run import FULL

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("compiling the discrete-event loop of every group of policies where numba's cache lacks it")
    # each group's full loop, which every run then takes (the lean and whole builds are compiled only where a test
    # asks for them)
    compile_loops([(policy, "oracle") for group in sorted(GROUPS, key=len, reverse=True) for policy in group], least=1,
                  build=FULL)


def pytest_collection_finish(session):
    """In an xdist worker under ``--dist loadgroup``, every test marked ``xdist_group`` must carry its group in its
    node id, which is how the scheduler keeps a group on one worker (its module-scoped fixtures, the replay's
    hardware file among them, built once). pytest 9.2 stopped honouring the id pytest-xdist 3.8 writes, and the
    groups split silently: two workers calibrated at once, each disturbing the other, and the suite took 9 to 17
    minutes instead of 5 (hence ``pytest<9.2`` in the test extra). If that happens again the run stops at once
    (pytest-xdist reports it as an internal error) instead of running slowly."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(f"pytest-xdist's xdist_group did not reach the node ids (pytest {pytest.__version__}): "
                                f"{lost[0]} and {len(lost) - 1} more would not stay on one worker")


@pytest.fixture(scope="session")
def mixtral():
    """The bundled real Mixtral-8x7B trace."""
    return load_trace(bundled_trace_path())


@pytest.fixture
def shared_jsonl():
    if not SHARED_TRACE.is_file():
        pytest.skip(f"{SHARED_TRACE} is not beside this checkout")
    return SHARED_TRACE


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run the moesim command in-process: returns (exit status, stdout, stderr)."""
    from moesim.cli.app import main

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["moesim", *map(str, args)])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def drawn(monkeypatch):
    """The figures saved while the test runs, kept for a look at what they show."""
    from matplotlib.figure import Figure

    figures, save = [], Figure.savefig

    def keep(fig, *args, **kwargs):
        figures.append(fig)
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


# the longest a step of a test's llama.cpp call (a load, a prompt, a run's decode) may take: the tests' models take
# well under a second
ENGINE_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def llama_cpp_probe(tmp_path_factory):
    """llama.cpp's probe (``LlamaCpp.probe``) on this machine, once per worker: None where the build runs here, else
    its one-line error. Skipped where llama-cpp-python is not installed."""
    from importlib.util import find_spec

    from moesim.errors import MoesimError
    from moesim.replay.llamacpp_run import LlamaCpp

    if find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (pip install '.[llamacpp]')")
    try:
        with LlamaCpp(timeout_s=ENGINE_TIMEOUT_S) as engine:
            engine.probe(tmp_path_factory.mktemp("probe"))
    except MoesimError as exc:
        return str(exc)
    return None


@pytest.fixture
def llama_cpp(llama_cpp_probe):
    """llama.cpp for a test that runs it. Where its build fails the probe, the test is skipped naming why:
    test_llamacpp_model.py's probe test is the one that fails."""
    from moesim.replay.llamacpp_run import LlamaCpp

    if llama_cpp_probe is not None:
        pytest.skip(f"llama.cpp fails its probe on this machine: {llama_cpp_probe}")
    with LlamaCpp(timeout_s=ENGINE_TIMEOUT_S) as engine:
        yield engine

