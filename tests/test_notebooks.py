"""The notebooks run top to bottom on small inputs (each cell asserts what it shows), stored without outputs."""

from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_the_three_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == ["01-quickstart.ipynb", "02-policy-study.ipynb",
                                           "03-prefetch-and-tiers.ipynb"]


# one worker runs them (--dist loadgroup): two Jupyter kernels starting at once may draw the same ports
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_leaves_its_folder_clean(path, tmp_path, monkeypatch):
    """Run from its folder, a notebook writes what it makes into a temporary folder of its own (made by the run, here
    under this test's own: TMPDIR), so a second run finds nothing of the first and the folder is left as it was
    found. Its figures show inline as well as on disk (a PNG output each), and a result shown as the cell's value is
    a table (HTML)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")
    folder, scratch = tmp_path / "notebooks", tmp_path / "tmp"
    folder.mkdir()
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # the kernel's tempfile folders
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's own: inline
    ran = nbclient.NotebookClient(nbformat.read(path, as_version=4), timeout=600, kernel_name="python3",
                                  resources={"metadata": {"path": str(folder)}}).execute()
    assert list(folder.iterdir()) == [] and len(list(scratch.glob("moesim-*"))) == 1  # the run's own folder
    shown = [kind for c in ran.cells if c.cell_type == "code" for o in c.outputs for kind in o.get("data", {})]
    assert shown.count("image/png") == FIGURES[path.stem] and shown.count("text/html") == TABLES[path.stem]


FIGURES = {"01-quickstart": 1, "02-policy-study": 2, "03-prefetch-and-tiers": 1}  # figures each notebook draws
TABLES = {"01-quickstart": 1, "02-policy-study": 0, "03-prefetch-and-tiers": 0}  # results shown as a cell's value
