"""The benchmark's own correctness check: a fast wrong answer must fail the run, not win it.

The expected survivors are computed independently of deltalog (a pyarrow group-by over the uncleaned
files: the record with the highest offset of each key), and the cleaned table is read independently too
(its live files from delta-rs, read with pyarrow through the store's storage layer, so a store on S3 is
checked the same way).
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from deltalog.log.partition_log import PartitionLog
from deltalog.log.record import KEY, OFFSET, VALUE
from deltalog.storage import join

COLUMNS = [OFFSET, KEY, VALUE]


class BenchmarkFailure(AssertionError):
    """An output of the benchmark is wrong; the run stops and no report is written."""


def expected_survivors(paths: list[str]) -> pa.Table:
    """The latest record of every key in ``paths`` (offset, key, value), in offset order."""
    table = pq.read_table(paths, columns=COLUMNS)
    latest = table.group_by(KEY).aggregate([(OFFSET, "max")]).column(f"{OFFSET}_max")
    return table.filter(pc.is_in(table.column(OFFSET), latest)).sort_by(OFFSET)


def check_survivors(log: PartitionLog, expected: pa.Table) -> None:
    """The cleaned partition holds exactly ``expected`` (same offsets, keys and values), and its files,
    in the snapshot's offset order, hold ascending offsets (the cleaner never reorders). Files are read
    through the partition's own storage, so a store on S3 is checked like one on a disk."""
    live = pa.table(DeltaTable(log.uri, storage_options=log.storage.delta_options)
                    .get_add_actions(flatten=True)).column("path").to_pylist()  # delta-rs's view, not deltalog's
    got = (pa.concat_tables([_read(log, p, COLUMNS) for p in live]).sort_by(OFFSET) if live
           else expected.slice(0, 0))
    if got.num_rows != expected.num_rows:
        raise BenchmarkFailure(f"the cleaned partition holds {got.num_rows} records, expected {expected.num_rows}")
    for col in COLUMNS:
        if not got.column(col).equals(expected.column(col)):
            raise BenchmarkFailure(f"the cleaned partition's {col} column differs from the latest record per key")
    last = -1
    for f in log.snapshot().files:
        offsets = _read(log, f.path, [OFFSET]).column(OFFSET).to_numpy()
        if len(offsets) == 0:
            continue
        if offsets[0] <= last or (len(offsets) > 1 and not (offsets[1:] > offsets[:-1]).all()):
            raise BenchmarkFailure(f"{f.path} breaks the offset order of the cleaned partition")
        last = int(offsets[-1])


def _read(log: PartitionLog, path: str, columns: list[str]) -> pa.Table:
    with log.storage.open_input(join(log.uri, path)) as f:
        return pq.ParquetFile(f).read(columns=columns)


def parquet_rows(directory: str) -> int:
    """Rows in every Parquet file under ``directory`` (from the footers)."""
    total = 0
    for root, _dirs, names in os.walk(directory):
        for name in names:
            if name.endswith(".parquet"):
                total += pq.read_metadata(os.path.join(root, name)).num_rows
    return total
