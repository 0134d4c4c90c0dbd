"""The notebooks run top to bottom on the embedded default, so they never rot."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["quickstart.ipynb", "fruit_prices_walkthrough.ipynb", "data_quality.ipynb"])
def test_notebook_runs_top_to_bottom(name, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' stores go under the test's directory
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert os.listdir(tmp_path)  # the notebook really made a store
