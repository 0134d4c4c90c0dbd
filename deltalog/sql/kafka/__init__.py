"""``format("deltalog")``: Spark's Kafka source and sink, on a deltalog store; :func:`register` adds it to a session.

A user of Spark's Kafka integration keeps the code they have and swaps ``format("kafka")`` for
``format("deltalog")`` and ``kafka.bootstrap.servers`` for ``store`` (or ``load(<store uri>)``). The rows have
the schema of Spark's Kafka source (``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``,
``timestampType``, and ``headers`` with ``includeHeaders=true``), the options keep Kafka's names
(``subscribe``, ``subscribePattern``, ``assign``, ``startingOffsets``, ``endingOffsets``,
``maxOffsetsPerTrigger``, ``failOnDataLoss``, ``includeHeaders``, ``kafka.isolation.level``: ``read_committed``
by default, so reads stop at each partition's last stable offset and leave aborted transactions out; transaction
markers are never rows) and the sink takes Kafka's columns
(``key``, ``value``, ``headers``, ``partition``, ``topic``).

It is one Python data source, so it runs alike on a classic session and on Spark Connect. Reads plan offset
ranges per topic partition on the driver side and hand each task the data files of the partition's **current**
Delta version that cover its range (:class:`~deltalog.sql.source.FileSlice`, read with
:func:`~deltalog.sql.source.read_slice` through the store's :class:`~deltalog.storage.Storage`): a range planned
after a cleaning pass reads the cleaned files, so records compaction removed are simply absent and offsets are
never reused (what Kafka's source returns from a compacted topic). Offsets below the log start (retention,
DeleteRecords) are data loss, handled as Kafka's source does (``failOnDataLoss``).

Writes stage each task's records per target partition as an Arrow IPC file under ``_deltalog/sink/`` and the
commit (on the driver side) appends each partition's staged records in one Delta commit. A streaming commit
carries the Delta transaction identifier ``(deltalog.sink.<query id>, batchId)`` in that same commit, so a
micro-batch replayed after a restart finds its batch already committed on a partition and appends nothing
there: exactly once, where Kafka's sink is at least once.

``option("mode", "current")`` on a batch read returns the current state instead of the log: per partition,
the latest record of every key, tombstoned keys left out (the ``<topic>_current`` view of
:mod:`deltalog.sql.views`, computed per partition in its task).

Filter pushdown (opt in with option ``pushFilters`` = ``true``): ``topic``, ``partition`` and ``offset``
comparisons then prune the topic partitions and offset ranges a batch read plans (Spark still applies every
filter to the rows). It is off by default because pyspark 4.3 remembers the read a DataFrame planned with pushed
filters and reuses it for later actions of the *same* DataFrame that push none: ``df.where("partition = 0")
.count()`` then ``df.count()`` counts partition 0 only (measured; Spark's ``PythonScanBuilder`` keeps the
pushed-down reader on the data source instance). Wrong counts without an error are worse than a full plan.
Python data sources get filters only with ``spark.sql.python.filterPushdown.enabled``, which
:func:`register` turns on.

The modules follow the source's parts: :mod:`~deltalog.sql.kafka.options` (the options, parsed once),
:mod:`~deltalog.sql.kafka.plan` (topic partitions, offsets and tasks, on the driver side),
:mod:`~deltalog.sql.kafka.reads` (a task's rows), :mod:`~deltalog.sql.kafka.batch` and
:mod:`~deltalog.sql.kafka.streaming` (the readers), :mod:`~deltalog.sql.kafka.writes` (the sink) and
:mod:`~deltalog.sql.kafka.source` (the data source class). :func:`register`, the public entry, sits above them
all (and above :mod:`deltalog.spark`, whose session helpers the source uses).
"""


from __future__ import annotations

import threading
import weakref
from typing import Any

from deltalog.errors import DataLossError
from deltalog.spark import default_parallelism
from deltalog.sql.kafka.options import Options
from deltalog.sql.kafka.source import DeltalogDataSource, session_source

__all__ = ["DataLossError", "DeltalogDataSource", "Options", "register"]

_registered: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()


def register(spark: Any) -> None:
    """Make ``format("deltalog")`` (Spark's Kafka source and sink on a deltalog store) available on ``spark``,
    classic or Spark Connect, once per session.

    It also turns on ``spark.sql.python.filterPushdown.enabled`` for the session: Python data sources get
    filters only with it, and a source that takes them fails without it.
    """
    with _lock:
        if spark in _registered:
            return
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        spark.dataSource.register(session_source(default_parallelism(spark)))
        _registered.add(spark)
