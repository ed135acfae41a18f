import sys
from pathlib import Path

import pytest

from moesim.tracegen.io import bundled_trace_path, load_trace

SHARED_TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mixtral-8x7b" / "gsm8k_2_routing.jsonl"


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
