"""A small read of a big file costs what it returns: memory follows ``max_records``, not the data file.

One bulk append of 1.5 million small records makes one data file. Its row groups are small, so a poll of 1,000
records (``store.read``, a consumer's poll) decodes one or two of them; the peak of Arrow's allocations in a fresh
process shows it, against a whole-file read of the same file in that process. (Speed and memory figures, and
the ratio at larger sizes, are in ``python -m benchmarks reads``.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import Store
from deltalog.log.record import ROW_GROUP_MAX_BYTES, ROW_GROUP_MAX_ROWS

RECORDS = 1_500_000
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """A store whose partition big-0 is one data file of :data:`RECORDS` records (key ``k<i>``, value ``v<i>``)."""
    root = tmp_path_factory.mktemp("big") / "store"
    store = Store(root)
    store.create_topic("big", 1)
    keys = pa.array([b"k%07d" % i for i in range(RECORDS)], pa.binary())
    values = pa.array([b"v%07d-%s" % (i, b"." * 16) for i in range(RECORDS)], pa.binary())
    assert store.append("big", 0, pa.table({"key": keys, "value": values})) == list(range(RECORDS))
    return root


def data_file(root: Path) -> Path:
    (path,) = (root / "topics" / "big" / "0").glob("*.parquet")
    return path


def test_a_bulk_append_writes_row_groups_that_can_be_read_alone(big):
    meta = pq.read_metadata(data_file(big))
    assert meta.num_rows == RECORDS
    assert meta.num_row_groups >= RECORDS // ROW_GROUP_MAX_ROWS
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        assert group.num_rows <= ROW_GROUP_MAX_ROWS and group.total_byte_size <= 2 * ROW_GROUP_MAX_BYTES
        offsets = next(group.column(j) for j in range(group.num_columns) if group.column(j).path_in_schema == "offset")
        assert offsets.statistics.has_min_max  # what a read picks its row groups by


@pytest.mark.parametrize("position", [0, 777_777, RECORDS - 500])
def test_a_read_from_any_position_returns_exactly_the_records_there(big, position):
    records = Store(big).read("big", 0, position, max_records=1000)
    wanted = range(position, min(position + 1000, RECORDS))
    assert [r.offset for r in records] == list(wanted)
    assert [r.key for r in records] == [b"k%07d" % i for i in wanted]
    assert [r.value for r in records] == [b"v%07d-%s" % (i, b"." * 16) for i in wanted]


@pytest.mark.subprocess
def test_a_poll_of_1000_records_costs_a_small_fraction_of_a_whole_file_read(big):
    """Peak Arrow memory of ``store.read`` and of a consumer's poll, then of reading the whole file, in one fresh
    process (the peak only grows, so the small reads go first)."""
    script = textwrap.dedent(f"""
        import json, pyarrow as pa, pyarrow.parquet as pq
        from deltalog import Store
        from deltalog.structs import TopicPartition
        pool = pa.default_memory_pool()
        store = Store({str(big)!r})
        peaks = {{}}
        assert len(store.read("big", 0, 1_000_000, max_records=1000)) == 1000
        peaks["read"] = pool.max_memory()
        consumer = store.consumer(max_poll_records=1000, enable_auto_commit=False)
        consumer.assign([TopicPartition("big", 0)])
        consumer.seek(TopicPartition("big", 0), 400_000)
        polled = consumer.poll(max_records=1000)
        assert sum(len(v) for v in polled.values()) == 1000, polled.keys()
        peaks["poll"] = pool.max_memory()
        assert pq.read_table({str(data_file(big))!r}).num_rows == {RECORDS}
        peaks["whole"] = pool.max_memory()
        print(json.dumps(peaks))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    peaks = json.loads(out.stdout.strip().splitlines()[-1])
    whole = peaks["whole"]
    # A whole-file read of 1.5 M records peaks above 100 MB; a poll decodes a row group or two.
    assert whole > 60_000_000, peaks
    assert peaks["read"] < whole / 8 and peaks["poll"] < whole / 8, peaks


def test_the_cleaners_files_are_written_in_row_groups_a_read_can_take_alone(spark_store, clock):
    """A pass recopies survivors in row groups as small as an append's, so reads of a cleaned log stay cheap."""
    store = spark_store
    store.create_topic("c", 1, config={"cleanup.policy": "compact"})
    n = 150_000
    keys = pa.array([b"k%07d" % i for i in range(n)], pa.binary())
    store.append("c", 0, pa.table({"key": keys, "value": pa.array([b"old"] * n, pa.binary())}))
    store.append("c", 0, pa.table({"key": keys.slice(0, 10), "value": pa.array([b"new"] * 10, pa.binary())}))
    clock.advance(7 * 24 * 3_600_000 + 1)  # segment.ms: the next append rolls, so the records above are cleanable
    store.append("c", 0, pa.table({"key": [b"last"], "value": [b"v"]}))
    (result,) = store.clean()
    assert result.records_written == n  # 10 records superseded
    cleaned = [f for f in store.log("c", 0).snapshot().files if f.path.startswith("cleaned-")]
    assert cleaned and sum(f.num_records for f in cleaned) == n
    for f in cleaned:
        meta = pq.read_metadata(Path(store.storage.root) / "topics" / "c" / "0" / f.path)
        assert meta.num_row_groups >= 2 and max(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) \
            <= ROW_GROUP_MAX_ROWS
    records = store.read("c", 0, 100_000, max_records=1000)
    assert [r.key for r in records] == [b"k%07d" % i for i in range(100_000, 101_000)]
