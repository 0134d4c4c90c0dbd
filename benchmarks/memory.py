"""Bytes of memory per offset-map entry, measured, against Kafka's 24 (16-byte MD5 + 8-byte offset).

Two things hold the map in memory during a pass, and both are measured from Spark's own accounting:

* **the broadcast relation**, the hash table every task probes in pass 2: Spark's ``BroadcastExchange``
  reports its ``data size`` (the relation's memory, including the hash table's pointer array and the
  unused tail of its last memory page). It is read from Spark's SQL status store after real cleaning
  passes. Two passes on the same data, one with the map limited to about half the keys (a smaller
  ``log.cleaner.dedupe.buffer.size``), give the **marginal** bytes per entry (the slope, without the
  fixed page overhead) next to the absolute figure at this size.
* **the resident map**, the materialized DataFrame the broadcast is built from: the memory Spark's block
  manager reports for its cached blocks (``getRDDStorageInfo``) right after pass 1.
"""

from __future__ import annotations

import re
import shutil
from typing import TYPE_CHECKING, Any

from benchmarks import workload as wl
from deltalog.clock import ManualClock
from deltalog.config import OFFSET_MAP_BYTES_PER_ENTRY
from deltalog.offset_map import build_offset_map
from deltalog.record import KEY, OFFSET
from deltalog.spark_io import read_files
from deltalog.store import Store

if TYPE_CHECKING:
    from benchmarks.runner import Bench

_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
KAFKA_DEFAULT_BUFFER = 134_217_728
KAFKA_LOAD_FACTOR = 0.9


def _parse_size(text: str) -> int:
    m = re.match(r"\s*([0-9.,]+)\s*(B|KiB|MiB|GiB|TiB)", text)
    if not m:
        raise ValueError(f"not a size metric: {text!r}")
    return int(float(m.group(1).replace(",", "")) * _UNITS[m.group(2)])


def _broadcast_sizes(spark: Any, since_execution: int) -> list[tuple[int, int]]:
    """(rows, data size in bytes) of every BroadcastExchange in SQL executions after ``since_execution``."""
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
            if node.name() != "BroadcastExchange":
                continue
            found: dict[str, str] = {}
            metrics = node.metrics()
            for k in range(metrics.size()):
                metric = metrics.apply(k)
                value = values.get(metric.accumulatorId())
                if value.isDefined():
                    found[metric.name()] = value.get()
            if "data size" in found and "number of output rows" in found:
                out.append((int(found["number of output rows"].replace(",", "")), _parse_size(found["data size"])))
    return out


def _last_execution(spark: Any) -> int:
    execs = spark._jsparkSession.sharedState().statusStore().executionsList()
    return max((execs.apply(i).executionId() for i in range(execs.size())), default=-1)


def _pass_broadcast(bench: Bench, buffer_bytes: int | None) -> tuple[int, int]:
    """Run one real pass (on a fresh copy) and return (map entries, broadcast bytes of the map)."""
    root = bench.fresh("memory")
    shutil.copytree(bench.pristine, root)
    config = {} if buffer_bytes is None else {"log.cleaner.dedupe.buffer.size": buffer_bytes}
    store = Store(root, spark=bench.spark, clock=ManualClock(wl.NOW_MS), config=config)
    before = _last_execution(bench.spark)
    result = store.clean_partition(wl.TOPIC, 0, force=True)
    sizes = [s for s in _broadcast_sizes(bench.spark, before) if s[0] == result.map_entries]
    if not sizes:
        raise RuntimeError(f"no broadcast of {result.map_entries} rows in the pass's plans")
    shutil.rmtree(root, ignore_errors=True)
    return result.map_entries, max(s[1] for s in sizes)


def _resident_bytes(bench: Bench) -> tuple[int, int]:
    """(entries, bytes in Spark's block manager) of the materialized map right after pass 1."""
    from pyspark.sql import functions as F

    jsc = bench.spark.sparkContext._jsc.sc()

    def cached() -> dict[int, int]:
        infos = jsc.getRDDStorageInfo()
        return {infos[i].id(): infos[i].memSize() + infos[i].diskSize() for i in range(len(infos))}

    before = cached()
    start, stop = bench.gen.first_dirty_offset, bench.gen.log_end_offset
    section = read_files(bench.spark, bench.uri, bench.dirty_files, [KEY, OFFSET]).where(
        (F.col(OFFSET) >= start) & (F.col(OFFSET) < stop)
    )
    m = build_offset_map(section, start, stop, bench.store(bench.pristine).config.offset_map_capacity)
    try:
        after = cached()
        return m.entries, sum(v for k, v in after.items() if k not in before)
    finally:
        m.df.unpersist()


def measure_map_memory(bench: Bench) -> dict[str, Any]:
    entries, size = _pass_broadcast(bench, None)
    half_buffer = max(int(entries / 2 * OFFSET_MAP_BYTES_PER_ENTRY / KAFKA_LOAD_FACTOR), OFFSET_MAP_BYTES_PER_ENTRY)
    half_entries, half_size = _pass_broadcast(bench, half_buffer)
    marginal = (size - half_size) / (entries - half_entries) if entries != half_entries else float("nan")
    resident_entries, resident = _resident_bytes(bench)
    per_entry = size / entries
    worst = max(marginal, resident / resident_entries)
    return {
        "entries": entries,
        "broadcast_bytes": size,
        "broadcast_bytes_per_entry": per_entry,
        "half_entries": half_entries,
        "half_broadcast_bytes": half_size,
        "broadcast_marginal_bytes_per_entry": marginal,
        "resident_bytes": resident,
        "resident_bytes_per_entry": resident / resident_entries,
        "kafka_bytes_per_entry": OFFSET_MAP_BYTES_PER_ENTRY,
        # Keys one pass could hold in Kafka's default 128 MiB at the measured cost (broadcast slope and
        # resident map, whichever is larger), at Kafka's 0.9 load factor.
        "keys_in_128mib": int(KAFKA_DEFAULT_BUFFER * KAFKA_LOAD_FACTOR / worst) if worst > 0 else None,
        "bytes_per_entry_measured": worst,
    }
