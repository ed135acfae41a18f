"""The public API: ``import moesim`` gives every documented name, and each docstring's example runs
as written (doctest), in a fresh folder holding the examples."""

from __future__ import annotations

import doctest
import shutil
from pathlib import Path

import pytest

import moesim

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_every_public_name_resolves():
    for name in moesim.__all__:
        assert getattr(moesim, name) is not None, name


def test_the_docstring_examples_run(tmp_path, monkeypatch, mixtral):
    pytest.importorskip("torch")  # train_ml_ffn's example trains
    from moesim import api

    shutil.copytree(EXAMPLES, tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(api, globs={"moesim": moesim, "trace": mixtral}) if t.examples]
    tests += [t for t in finder.find(moesim.Config, "Config", globs={"Config": moesim.Config}) if t.examples]
    tests.sort(key=lambda t: ("plot" in t.name, t.name))  # the plot reads the sweep's results
    for test in tests:
        runner.run(test)
    documented = {t.name.rsplit(".", 1)[-1] for t in tests}
    assert {"load_trace", "hitrate", "simulate", "sweep", "plot", "models", "hardware", "build"} <= documented
    assert runner.summarize(verbose=False).failed == 0
