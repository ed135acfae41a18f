"""The public API: ``import moesim`` gives every documented name, and each docstring's example runs
as written (doctest), in a fresh folder holding the examples."""

from __future__ import annotations

import doctest
import inspect
import shutil
from importlib import import_module
from pathlib import Path

import pytest

import moesim

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_every_public_name_is_the_object_its_module_defines():
    """Each name resolves to the function or class of the module ``moesim._PUBLIC`` names (not a subpackage of
    the same name, nor a stand-in), documented; the API's functions take a configuration as ``config``."""
    for name in moesim.__all__:
        if name == "__version__":
            assert moesim.__version__ and moesim.__version__[0].isdigit()
            continue
        value = getattr(moesim, name)
        home = import_module(moesim._PUBLIC[name])
        assert value is getattr(home, name), name
        assert inspect.isfunction(value) or inspect.isclass(value), (name, value)
        assert value.__module__ == home.__name__ and inspect.getdoc(value), name
    for name in ("hitrate", "mrc", "best_split", "simulate", "serve", "plan", "run_replay", "validate"):
        assert "config" in inspect.signature(getattr(moesim, name)).parameters, name


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
    assert {"load_trace", "hitrate", "mrc", "best_split", "simulate", "serve", "plan", "run_replay", "validate", "sweep",
            "plot", "models", "hardware", "build", "train_ml_ffn", "train_prefetcher"} <= documented
    assert runner.summarize(verbose=False).failed == 0


def test_errors_name_keyword_arguments_in_python_and_options_on_the_command_line(mixtral, cli, tmp_path):
    """The same refusal speaks to its reader: capacity='auto' to a Python caller, --capacity auto to the shell."""
    import pytest

    import moesim
    from moesim.errors import MoesimError
    from moesim.tracegen.trace import bundled_trace_path

    with pytest.raises(MoesimError) as refused:
        moesim.simulate(mixtral, hardware="rtx4090", capacity=4)
    assert "use capacity='auto', a smaller dtype or another strategy" in str(refused.value)
    assert "--" not in str(refused.value)
    code, _, err = cli("sim", "run", bundled_trace_path(), "--hardware", "rtx4090", "--capacity", "4")
    assert code == 1 and "use --capacity auto, a smaller --dtype or another --strategy" in err
    spec = tmp_path / "s.toml"
    spec.write_text('traces = ["bundled"]\nkind = "hitrate"\n[axes]\ncapacity = [2]\n')
    moesim.sweep(spec, tmp_path / "out.parquet")
    with pytest.raises(MoesimError, match=r"exists; pass resume=True to continue"):
        moesim.sweep(spec, tmp_path / "out.parquet")
    code, _, err = cli("sweep", spec, "--out", tmp_path / "out.parquet")
    assert code == 1 and "exists; pass --resume to continue" in err
