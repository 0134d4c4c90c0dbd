"""Bytes of memory per offset-map entry, measured, against Kafka's 24 (16-byte MD5 + 8-byte offset).

A pass holds the map in three forms, each measured here on the benchmark's own log:

* **pass 1's aggregation**: Spark's hash aggregate of key hash -> latest offset. Its ``peak memory``
  (summed over the tasks) is read from Spark's SQL status store after a real pass 1. It is transient and
  Spark spills it to disk when execution memory runs short, so it does not bound how many keys a pass
  can hold; it is reported for what it costs.
* **the collected latest offsets**: the aggregate comes to the driver as one 8-byte long per key hash
  (Arrow), freed once the bitmap is built.
* **the survivor bitmap** pass 2 probes: one bit per offset of ``[log start, end of the mapped range)``,
  whatever the number of keys (``OffsetBitmap.nbytes``), sliced per task.

The per-entry figure the target is judged on is what the pass holds from the end of pass 1 to the end of
pass 2: the collected longs plus the bitmap, per entry.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from deltalog.config import OFFSET_MAP_BYTES_PER_ENTRY

if TYPE_CHECKING:
    from benchmarks.runner import Bench

_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
KAFKA_DEFAULT_BUFFER = 134_217_728
KAFKA_LOAD_FACTOR = 0.9


def _parse_size(text: str) -> int:
    """The total of a Spark size metric: ``"7.6 MiB"`` or ``"total (min, med, max ...)\\n7.6 MiB (...)"``."""
    m = re.search(r"(?:^|\n)\s*([0-9.,]+)\s*(B|KiB|MiB|GiB|TiB)", text)
    if not m:
        raise ValueError(f"not a size metric: {text!r}")
    return int(float(m.group(1).replace(",", "")) * _UNITS[m.group(2)])


def _aggregate_peaks(spark: Any, since_execution: int) -> list[tuple[int, int]]:
    """(output rows, peak memory in bytes) of every HashAggregate in SQL executions after ``since_execution``."""
    store = spark._jsparkSession.sharedState().statusStore()
    execs = store.executionsList()
    out = []
    for i in range(execs.size()):
        eid = execs.apply(i).executionId()
        if eid <= since_execution:
            continue
        values = store.executionMetrics(eid)
        nodes = store.planGraph(eid).allNodes()
        for j in range(nodes.size()):
            node = nodes.apply(j)
            if node.name() != "HashAggregate":
                continue
            found: dict[str, str] = {}
            metrics = node.metrics()
            for k in range(metrics.size()):
                metric = metrics.apply(k)
                value = values.get(metric.accumulatorId())
                if value.isDefined():
                    found[metric.name()] = value.get()
            if "peak memory" in found and "number of output rows" in found:
                rows = re.search(r"[0-9][0-9,]*", found["number of output rows"].split("\n")[-1])
                out.append((int(rows.group(0).replace(",", "")) if rows else 0, _parse_size(found["peak memory"])))
    return out


def _last_execution(spark: Any) -> int:
    execs = spark._jsparkSession.sharedState().statusStore().executionsList()
    return max((execs.apply(i).executionId() for i in range(execs.size())), default=-1)


def measure_map_memory(bench: Bench) -> dict[str, Any]:
    before = _last_execution(bench.spark)
    m = bench.build_map()
    keys = len(m.latest)  # surviving offsets: one per key hash of the range, less expired tombstones
    groups = [p for rows, p in _aggregate_peaks(bench.spark, before) if rows >= m.entries]
    aggregate_peak = max(groups, default=0)
    bitmap = m.latest.nbytes
    held = 8 * keys + bitmap
    per_entry = held / keys
    return {
        "entries": m.entries,
        "keys_in_range": keys,
        "range": m.latest.hi - m.latest.lo,
        "bitmap_bytes": bitmap,
        "bitmap_bytes_per_entry": bitmap / keys,
        "collected_bytes_per_entry": 8.0,
        "held_bytes_per_entry": per_entry,
        "aggregate_peak_bytes": aggregate_peak,
        "aggregate_peak_bytes_per_entry": aggregate_peak / keys if keys else float("nan"),
        "kafka_bytes_per_entry": OFFSET_MAP_BYTES_PER_ENTRY,
        # Keys one pass could hold in Kafka's default 128 MiB at the measured cost, at Kafka's 0.9 load factor.
        "keys_in_128mib": int(KAFKA_DEFAULT_BUFFER * KAFKA_LOAD_FACTOR / per_entry),
        "bytes_per_entry_measured": per_entry,
    }
