"""A test run never hangs on a crashed worker (tests/crash_once.py): under ``--dist loadgroup`` each test that kills its
xdist worker is one failed test, and every other test, its group's included, still runs; with both workers crashing at
once, their replacements start together. (pytest-xdist 3.8 alone ran the crashed test again on each replacement
worker, then waited forever.)"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

CRASHING = '''
import os, signal, pytest

@pytest.mark.xdist_group("engine")
def test_crashes():
    os.kill(os.getpid(), signal.SIGSEGV)

@pytest.mark.xdist_group("engine")
def test_crashes_too():
    os.kill(os.getpid(), signal.SIGSEGV)

@pytest.mark.xdist_group("engine")
def test_after_them_in_their_group():
    pass

def test_crashes_alone():
    os.kill(os.getpid(), signal.SIGILL)

def test_aborts_alone():
    os.kill(os.getpid(), signal.SIGABRT)
'''
OTHERS = '''
import pytest

@pytest.mark.parametrize("i", range(6))
def test_plain(i):
    pass
'''


@pytest.mark.timeout(300)
def test_a_crashed_worker_is_one_failed_test_and_the_run_ends(tmp_path):
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                                          "from crash_once import pytest_xdist_make_scheduler  # noqa: F401\n")
    (tmp_path / "test_crashing.py").write_text(CRASHING)
    (tmp_path / "test_others.py").write_text(OTHERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONFAULTHANDLER"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p",
                           "no:cacheprovider", "-rfE"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 1, done.stdout[-2000:]
    assert summary.startswith("4 failed, 7 passed"), summary
    failed = sorted(line.split(" - ")[0] for line in done.stdout.splitlines() if line.startswith("FAILED"))
    assert failed == ["FAILED test_crashing.py::test_aborts_alone", "FAILED test_crashing.py::test_crashes@engine",
                      "FAILED test_crashing.py::test_crashes_alone", "FAILED test_crashing.py::test_crashes_too@engine"]
    assert "crashed while running" in done.stdout
