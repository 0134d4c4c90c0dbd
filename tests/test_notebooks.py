"""The notebooks run top to bottom on the embedded default, so they never rot.

They share one kernel (and so one embedded Spark session), as a user running them one after another in
the same Jupyter server would; each notebook builds everything it uses itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.subprocess]  # a kernel, and Spark in it


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    pytest.importorskip("nbclient")
    from jupyter_client.manager import KernelManager

    stores = tmp_path_factory.mktemp("notebook-stores")
    km = KernelManager(kernel_name="python3")
    # The notebooks' stores go under the test's directory; figures render without a display.
    km.start_kernel(env={**os.environ, "TMPDIR": str(stores), "MPLBACKEND": "Agg", "PYSPARK_PYTHON": sys.executable})
    yield km, stores
    km.shutdown_kernel(now=True)


@pytest.mark.parametrize("name", ["quickstart.ipynb", "fruit_prices_walkthrough.ipynb", "data_quality.ipynb", "streaming.ipynb"])
def test_notebook_runs_top_to_bottom(name, kernel):
    import nbclient
    import nbformat

    km, stores = kernel
    before = set(os.listdir(stores))
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbclient.NotebookClient(nb, km=km, timeout=240, resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert set(os.listdir(stores)) - before  # the notebook really made a store
