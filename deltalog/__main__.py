"""``python -m deltalog``: the ``deltalog`` command, for environments where the console script is not on PATH
(a notebook's kernel, a cluster's Python)."""

from deltalog.cli import console_main

raise SystemExit(console_main())
