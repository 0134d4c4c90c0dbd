"""Fault injection for the reliability harness: a process that SIGKILLs itself at a named point.

Inert unless the environment variable ``DELTALOG_FAULT_KILL`` is set when this module is imported: then
:func:`point` does nothing but compare a string. The harness (:mod:`tooling.reliability.harness`) sets it on
the processes it means to kill, so that a kill lands exactly on a commit boundary, which a kill at a
random moment would hit only by luck::

    DELTALOG_FAULT_KILL=clean:after-commit@2   # die right after the 2nd cleaning commit of this process

The value is ``<point>[@<n>]`` (``n`` defaults to 1): the process is killed the ``n``-th time it reaches
``point``. Every Delta commit of a partition passes two points, ``<operation>:before-commit`` (its data files
are written, the commit not yet attempted) and ``<operation>:after-commit`` (the commit is in the Delta log,
and nothing after it, such as an append's acknowledgement or a pass's metrics, has happened), where
``operation`` is the commit's ``deltalog.operation``: ``append``, ``roll``, ``clean``, ``retention``,
``delete_records``, ``relayout`` or ``txn_marker``. A commit that removes files also passes ``<operation>:checked``
each time its removes were checked against the table and it is about to be attempted (see
:func:`deltalog.log.delta.commit`): the window another engine's OPTIMIZE could land in. A transaction's state
change passes ``txn_state:<new state>`` (e.g.
``txn_state:PrepareCommit``, once the decision is durable). Before dying the process writes one line to stderr,
``deltalog fault injection: SIGKILL at <point> #<n>``, so the harness can tell where it died.

SIGKILL, not an exception: nothing in the process runs after it (no ``finally``, no lease release, no
flush), as when a machine loses power or the kernel kills a job for memory.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "DELTALOG_FAULT_KILL"


def _parse(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    name, _, nth = spec.strip().partition("@")
    if not name or (nth and not nth.isdigit()) or (nth and int(nth) < 1):
        raise ValueError(f"{ENV}={spec!r}: expected <point>[@<n>] such as clean:after-commit@2")
    return name, int(nth or 1)


_TARGET = _parse(os.environ.get(ENV))
_lock = threading.Lock()
_reached = 0


def point(name: str) -> None:
    """The process reached ``name``: SIGKILL it if ``DELTALOG_FAULT_KILL`` names this point and occurrence."""
    global _reached
    if _TARGET is None or name != _TARGET[0]:
        return
    with _lock:
        _reached += 1
        if _reached == _TARGET[1]:
            os.write(2, f"deltalog fault injection: SIGKILL at {name} #{_reached}\n".encode())
            os.kill(os.getpid(), signal.SIGKILL)
