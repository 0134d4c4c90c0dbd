"""The notebooks run top to bottom on the embedded default, so they never rot, and are committed with the outputs
of the code they hold (``python -m tooling.notebooks`` regenerates them), so a reader on a code host sees them run.

The runs share one kernel (and so one embedded Spark session), as a user running them one after another in
the same Jupyter server would; each notebook builds everything it uses itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

NAMES = ["quickstart.ipynb", "fruit_prices_walkthrough.ipynb", "data_quality.ipynb", "streaming.ipynb"]


@pytest.mark.parametrize("name", NAMES)
def test_notebooks_are_committed_with_the_outputs_of_their_code(name):
    """Every code cell ran, none failed, and the outputs are those of the cells as they are now (the hash
    ``tooling.notebooks`` records); the walkthrough's figure is in the notebook as a PNG."""
    import nbformat

    from tooling.notebooks import METADATA_KEY, sources_hash

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    stale = f"{name} is not current: run `python -m tooling.notebooks {name}` and commit it"
    assert nb.metadata.get(METADATA_KEY, {}).get("sources") == sources_hash(nb), stale
    code = [c for c in nb.cells if c.cell_type == "code" and "skip-execution" not in c.metadata.get("tags", [])]
    assert all(c.execution_count is not None for c in code), stale
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"], stale
    assert outputs, stale
    # The install cell is real (``%pip install``) and tagged so that runs where deltalog is installed leave it out.
    [install] = [c for c in nb.cells if "skip-execution" in c.metadata.get("tags", [])]
    assert install.source.startswith("%pip install ") and not install.outputs
    if name == "fruit_prices_walkthrough.ipynb":
        assert any("image/png" in o.get("data", {}) for o in outputs), "the walkthrough's plot is not in the notebook"


class _Widgets:
    """Databricks' ``dbutils.widgets`` as far as the parameter cell uses it: a text widget a job has set."""

    def __init__(self, value):
        self.value, self.defaults = value, {}

    def text(self, name, default, label):
        self.defaults[name] = default

    def get(self, name):
        return self.value or self.defaults[name]


@pytest.mark.parametrize("name", NAMES)
def test_the_store_is_the_widget_on_databricks_else_the_variable_else_a_temporary_folder(name, monkeypatch, tmp_path):
    import tempfile
    import types

    import nbformat

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    [cell] = [c for c in nb.cells if c.cell_type == "code" and "ROOT =" in c.source]

    def root(**names):
        scope = dict(names)
        exec(cell.source, scope)
        return scope["ROOT"]

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("DELTALOG_STORE", raising=False)
    assert root().startswith(str(tmp_path))  # a laptop: a local temporary folder
    monkeypatch.setenv("DELTALOG_STORE", "s3://bucket/stores/")
    first, second = root(), root()
    assert first.startswith("s3://bucket/stores/") and "//" not in first[5:] and first != second  # a run's own
    widgets = _Widgets("abfss://c@a.dfs.core.windows.net/x")
    assert root(dbutils=types.SimpleNamespace(widgets=widgets)).startswith("abfss://c@a.dfs.core.windows.net/x/")
    assert widgets.defaults == {"store": "s3://bucket/stores/"}  # the widget's default is the variable


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


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.subprocess  # a kernel, and Spark in it
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


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.subprocess  # a kernel of its own, and Spark in it
def test_the_walkthrough_runs_on_a_store_on_s3(s3_server, s3_store_uri, tmp_path):
    """As on a cluster: the store is a URI (``DELTALOG_STORE``, what the Databricks widget defaults to) and its
    endpoint and credentials come from the cloud's standard variables only. The cleaner's Spark tasks open the
    store through deltalog's storage layer, so every file the notebook makes is on S3 and none on the local disk."""
    pytest.importorskip("nbclient")
    import nbclient
    import nbformat
    from jupyter_client.manager import KernelManager

    from deltalog import Store

    env = {**os.environ, **s3_server.env, "DELTALOG_STORE": s3_store_uri, "TMPDIR": str(tmp_path),
           "MPLBACKEND": "Agg", "PYSPARK_PYTHON": sys.executable}
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env)
    try:
        nb = nbformat.read(NOTEBOOKS / "fruit_prices_walkthrough.ipynb", as_version=4)
        nbclient.NotebookClient(nb, km=km, timeout=240, resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    finally:
        km.shutdown_kernel(now=True)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    store = Store(s3_store_uri, storage_options=s3_server.storage_options)
    keys = [store.storage.key(f.location) for f in store.storage.list_files(s3_store_uri)]
    assert any("/fruit-" in k and "/_delta_log/" in k for k in keys), keys  # the run's own folder, on S3
    assert not [p for p in os.listdir(tmp_path) if p.startswith("deltalog-fruit-")]  # no local store
