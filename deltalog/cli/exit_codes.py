"""The ``deltalog`` command's exit codes, distinct so that a scheduler (cron, Airflow, a Databricks job) can tell
apart what to do next:

* ``0`` success;
* ``1`` a failure to run: an error (``deltalog: error: ...`` on stderr), such as an unknown topic, a store that
  cannot be reached, a refused write; retrying after fixing the cause may succeed;
* ``2`` a usage error: the command line itself is wrong (the command's usage is printed); retrying it as is
  never succeeds;
* ``3`` broken data found: ``deltalog check`` found a failed expectation, or ``deltalog doctor`` found a damaged
  partition (the data needs a look, not a retry);
* ``130`` interrupted (Ctrl-C), as a shell reports SIGINT.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_BROKEN_DATA = 3
EXIT_INTERRUPTED = 130

__all__ = ["EXIT_BROKEN_DATA", "EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE"]
