"""Regenerate the notebooks with their outputs: ``python -m tooling.notebooks`` (or ``... NAME.ipynb`` for some).

The notebooks are committed executed, plots included, so a reader on a code host sees what they do without
running them. This command runs each in a fresh Jupyter kernel from top to bottom (its stores under a temporary
directory, the figures rendered inline as PNG), then writes it back with its outputs and, in its metadata
(``deltalog.sources``), a hash of its code cells: ``tests/test_notebooks.py`` checks that every committed notebook
was executed from the code it holds now, so a code change without a regeneration fails there, naming this command.
Each notebook's install cell (``%pip install``) carries the ``skip-execution`` tag, which nbclient honours: it is
committed unexecuted, for users on a fresh cluster, and left out here, where deltalog is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
METADATA_KEY = "deltalog"
TIMEOUT_S = 600


def sources_hash(nb: Any) -> str:
    """The hash of a notebook's code cells, in order (what its outputs were produced from)."""
    h = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type == "code":
            h.update(cell.source.encode("utf-8") + b"\0")
    return h.hexdigest()


def regenerate(path: Path) -> None:
    import nbclient
    import nbformat
    from jupyter_client.manager import KernelManager

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="deltalog-notebooks-") as stores:
        km = KernelManager(kernel_name="python3")
        # Spark's and Java's own start-up lines (log4j, JVM warnings) stay out of the outputs, as the CLI keeps them
        # off the terminal (deltalog.sql.session reads DELTALOG_SPARK_OUTPUT).
        env = {**os.environ, "TMPDIR": stores, "PYSPARK_PYTHON": sys.executable, "DELTALOG_SPARK_OUTPUT": os.devnull}
        env.pop("MPLBACKEND", None)  # the kernel's inline backend: figures become PNG outputs
        km.start_kernel(env=env)
        try:
            nbclient.NotebookClient(nb, km=km, timeout=TIMEOUT_S,
                                    resources={"metadata": {"path": str(path.parent)}}).execute()
        finally:
            km.shutdown_kernel(now=True)
    nb.metadata[METADATA_KEY] = {"sources": sources_hash(nb),
                                 "regenerate": "python -m tooling.notebooks " + path.name}
    nbformat.write(nb, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tooling.notebooks", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME.ipynb", help="default: every notebook in notebooks/")
    args = parser.parse_args(argv)
    paths = [NOTEBOOKS / n for n in args.names] if args.names else sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in paths:
        print(f"running {path.name} ...", flush=True)
        regenerate(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
