"""Bytes of memory per offset-map entry, measured, against Kafka's 24 (16-byte MD5 + 8-byte offset).

A pass holds the map in these forms, each measured on the benchmark's own log from the arrays themselves
(``nbytes``; numpy arrays have no hidden per-element overhead):

* **the map** on the driver: the two 64-bit halves of each key hash and its latest offset, three sorted
  arrays, 24 bytes an entry, the figure Kafka's SkimpyOffsetMap has;
* **the latest-offset bitmap** of the dirty section, one bit per offset (sliced per pass-2 task);
* **the hashes sent** to the pass-2 tasks that read clean files (16 bytes an entry, with the task or as a
  broadcast).

While pass 1 runs, each task holds a partial map of its own files (an Arrow group-by) and the driver the
tasks' partial maps until they are merged: transient, and bounded by the records of a task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deltalog.config import OFFSET_MAP_BYTES_PER_ENTRY

if TYPE_CHECKING:
    from benchmarks.runner import Bench

KAFKA_DEFAULT_BUFFER = 134_217_728
KAFKA_LOAD_FACTOR = 0.9


def measure_map_memory(bench: Bench) -> dict[str, Any]:
    m = bench.build_map()
    entries = m.entries
    per_entry = m.nbytes / entries
    bitmap = m.latest.nbytes
    return {
        "entries": entries,
        "map_bytes": m.nbytes,
        "map_bytes_per_entry": per_entry,
        "range": m.latest.hi - m.latest.lo,
        "bitmap_bytes": bitmap,
        "bitmap_bytes_per_entry": bitmap / entries,
        "broadcast_bytes_per_entry": m.keys.nbytes / entries,
        "kafka_bytes_per_entry": OFFSET_MAP_BYTES_PER_ENTRY,
        # Keys one pass's map holds in Kafka's default 128 MiB at the measured cost, at Kafka's 0.9 load
        # factor. The bitmap is not in it: it costs a bit per offset of the section, whatever the keys.
        "keys_in_128mib": int(KAFKA_DEFAULT_BUFFER * KAFKA_LOAD_FACTOR / per_entry),
        "bytes_per_entry_measured": per_entry,
    }
