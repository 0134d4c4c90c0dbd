"""``python -m benchmarks.recopy_variants --preset small [--workload json]``: pass 2's task body, ways side by side.

Times :func:`deltalog.cleaner.recopy.recopy_chunk`'s work on a generated log in this process (no Spark, so the
figures are the task's own, without the jobs' fixed cost), in interleaved rounds, for each combination of:

- the read: ``whole`` (every column of each batch read, then decided: the recopy before row groups were decided
  first) or ``deciding`` (:func:`~deltalog.cleaner.recopy.read_deciding`: the deciding columns first, the rest only
  for a row group with a survivor);
- the input files' value chunks: as the generator wrote them (``parquet_write_options``: uncompressed when they do
  not compress) or all ``snappy`` (as every file was written before);
- the output's codecs: ``sampled`` (``parquet_write_options``) or all ``snappy``.

Each is reported as wall time and as this process's CPU time (every thread's), which a loaded machine inflates
less.

The pass's decision comes from a pyarrow group-by of the whole log (the latest offset of each key), not pass 1:
what is timed is pass 2 alone. The figures are written up in benchmarks/NOTES.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import workload as wl
from deltalog.cleaner import recopy
from deltalog.cleaner.offset_bitmap import OffsetBitmap
from deltalog.cleaner.offset_map import MapKeys
from deltalog.cleaner.task_plan import FileSlice
from deltalog.log.key_hash import key_hashes
from deltalog.log.record import KEY, OFFSET, PARQUET_WRITE_OPTIONS, RECORD_SCHEMA, VALUE, row_group_rows


def _snappy_copy(src_dir: str, dst_dir: str, names: list[str]) -> None:
    """The files of ``src_dir`` rewritten with every chunk snappy (same row groups)."""
    os.makedirs(dst_dir, exist_ok=True)
    for name in names:
        table = pq.read_table(os.path.join(src_dir, name))
        pq.write_table(table, os.path.join(dst_dir, name), row_group_size=row_group_rows(table),
                       **PARQUET_WRITE_OPTIONS)


def _whole_chunk(params: recopy.RecopyParams, chunk: recopy.RecopyChunk) -> recopy.RecopyOutput:
    """``recopy_chunk`` as it was: each batch of every column read, then decided and filtered."""
    out = recopy.RecopyOutput()
    rule = params.rule(chunk.latest, chunk.keys)
    writer = recopy._SegmentWriter(params)
    for piece, segment in chunk.files:
        for table in recopy.read_batches(params.storage, os.path.join(params.table_uri, piece.path),
                                         row_groups=piece.row_groups):
            kept = recopy._filter(table, rule, params, segment, out.counts)
            if kept is not None:
                writer.write(segment, kept)
    out.files = writer.close()
    return out


class VariantsDiffer(Exception):  # noqa: N818 - a benchmark's own failure, never raised by deltalog
    """Two ways of the recopy kept different records."""


def run(w: wl.Workload, work: str, rounds: int) -> str:
    from deltalog.clock import ManualClock
    from deltalog.storage import Storage
    from deltalog.store import Store

    root = os.path.join(work, "store")
    gen = wl.generate(Store(root, clock=ManualClock(wl.NOW_MS)), w)
    log_dir = os.path.join(root, "topics", wl.TOPIC, "0")
    names = sorted(n for n in os.listdir(log_dir) if n.endswith(".parquet"))
    _snappy_copy(log_dir, os.path.join(root, "snappy"), names)
    keys_offsets = pa.concat_tables(pq.read_table(os.path.join(log_dir, n), columns=[KEY, OFFSET]) for n in names)
    latest = keys_offsets.group_by(KEY).aggregate([(OFFSET, "max")])
    dirty = latest.filter(pa.compute.greater_equal(latest.column(f"{OFFSET}_max"), gen.first_dirty_offset))
    hi, lo = key_hashes(dirty.column(KEY))
    order = np.lexsort((lo, hi))
    keys = MapKeys(hi[order], lo[order])
    bitmap = OffsetBitmap.from_offsets(dirty.column(f"{OFFSET}_max").to_numpy(), gen.first_dirty_offset,
                                       gen.log_end_offset)
    storage = Storage(root)
    sampled = recopy.parquet_write_options
    written: set[int] = set()

    def case(read: str, inputs: str, output: str) -> Callable[[], tuple[float, float]]:
        table_uri = log_dir if inputs == "sampled" else os.path.join(root, "snappy")
        files = tuple((FileSlice(n, 1, 0, 0), 0) for n in names)
        chunk = recopy.RecopyChunk(files, bitmap, needs_keys=True, keys=keys)

        def go() -> tuple[float, float]:
            out_dir = f"out-{time.monotonic_ns()}"
            params = recopy.RecopyParams(storage, table_uri, out_dir, 0, gen.first_dirty_offset, gen.log_end_offset,
                                         wl.NOW_MS, wl.NOW_MS + wl.DELETE_RETENTION_MS)
            recopy.parquet_write_options = sampled if output == "sampled" else (lambda t: PARQUET_WRITE_OPTIONS)
            try:
                started, cpu = time.perf_counter(), time.process_time()
                result = (recopy.recopy_chunk if read == "deciding" else _whole_chunk)(params, chunk)
                elapsed = time.perf_counter() - started, time.process_time() - cpu
                written.add(result.counts.records_written)
                if len(written) > 1:
                    raise VariantsDiffer(f"the ways kept different numbers of records: {sorted(written)}")
                return elapsed
            finally:
                recopy.parquet_write_options = sampled
                shutil.rmtree(os.path.join(table_uri, out_dir), ignore_errors=True)
        return go

    cases = {(r, i, o): case(r, i, o) for r in ("whole", "deciding") for i in ("snappy", "sampled")
             for o in ("snappy", "sampled")}
    times: dict[tuple[str, str, str], list[tuple[float, float]]] = {k: [] for k in cases}
    for _ in range(rounds):
        for k, go in cases.items():
            times[k].append(go())
    value_codecs = {pq.read_metadata(os.path.join(log_dir, n)).row_group(0).column(
        RECORD_SCHEMA.get_field_index(VALUE)).compression for n in names}
    out = [f"generated {gen}; the generator's value chunks: {sorted(value_codecs)}; survivors {sorted(written)}",
           "read      input    output   wall s (median, min)  CPU s (median, min)  CPU vs whole/snappy/snappy"]
    base = statistics.median(t[1] for t in times[("whole", "snappy", "snappy")])
    for (r, i, o), ts in times.items():
        wall, cpu_s = [t[0] for t in ts], [t[1] for t in ts]
        out.append(f"{r:9s} {i:8s} {o:8s} {statistics.median(wall):8.3f} {min(wall):6.3f}        "
                   f"{statistics.median(cpu_s):8.3f} {min(cpu_s):6.3f}     {statistics.median(cpu_s) / base:.2f}x")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.recopy_variants", description=__doc__)
    p.add_argument("--preset", choices=sorted(wl.PRESETS), default="small")
    p.add_argument("--workload", choices=wl.VALUE_KINDS, default="random")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--keys", type=int, help="distinct keys instead of the preset's (few keys: whole row groups are "
                   "superseded, as in a small, busy keyspace like __consumer_offsets)")
    args = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="deltalog-recopy-")
    try:
        w = wl.with_values(wl.PRESETS[args.preset], args.workload)
        print(run(w if args.keys is None else replace(w, keys=args.keys), work, args.rounds))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
