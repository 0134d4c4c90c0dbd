"""The benchmark's JSON workload and its floor, on a log of a few thousand records (no Spark).

The JSON workload must hold what a changelog holds (one parseable document per record about the record's own
key, tombstones as nulls) and compress several times, or its rows would say nothing the random workload does
not; the floor must leave exactly the latest record of each key, or the pass would be compared with a wrong
answer.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from benchmarks import workload as wl
from benchmarks.runner import FLOOR, Bench
from deltalog.log.record import KEY, VALUE

SMALL = wl.Workload("test", records=20_000, keys=2_000, segment_records=5_000, append_records=1_000,
                    append_batch=500)


def test_json_workload_holds_customer_documents_that_compress(tmp_path, monkeypatch):
    monkeypatch.setattr(wl, "JSON_CHUNK_ROWS", 3_000)  # built in chunks, as a preset past 2 GiB of values is
    bench = Bench(wl.with_values(SMALL, "json"), str(tmp_path), spark=None, cores=2, log=lambda _: None)
    bench.setup()
    table = pq.read_table(bench.paths, columns=[KEY, VALUE])
    assert table.num_rows == bench.gen.total_records
    for key, value in zip(table.column(KEY).to_pylist()[:500], table.column(VALUE).to_pylist()[:500], strict=True):
        assert key.startswith(b"customer-") and len(key) == 16
        if value is not None:
            doc = json.loads(value)
            assert doc["customer_id"] == key.decode()
            assert doc["address"]["country"] and doc["status"]
    assert 0 < table.column(VALUE).null_count < table.num_rows * 0.1
    raw = sum(len(v) for v in table.column(VALUE).to_pylist() if v is not None)
    assert raw / bench.gen.bytes > 3  # every column, footers included, against the values alone


def test_random_workload_is_unchanged_by_the_json_one():
    assert wl.with_values(SMALL, "random") == SMALL
    assert wl.key_bytes([7]).to_pylist() == [b"key-0000000007"]
    with pytest.raises(ValueError, match="random, json"):
        wl.with_values(SMALL, "avro")


@pytest.mark.parametrize("values", ["random", "json"])
def test_the_floor_writes_the_latest_record_of_each_key(tmp_path, values):
    bench = Bench(wl.with_values(SMALL, values), str(tmp_path), spark=None, cores=2, log=lambda _: None)
    bench.setup()
    bench.floor_pass(0)  # checks its survivors against the independent group-by, raising BenchmarkFailure
    assert len(bench.t.seconds[FLOOR]) == 1
    written = pq.read_table([str(p) for p in sorted((tmp_path / "floor").iterdir())])
    assert written.num_rows == bench.expected.num_rows < bench.gen.total_records
    assert written.column(KEY).equals(bench.expected.column(KEY))
    tombstones = written.filter(written.column(VALUE).is_null())
    assert tombstones.column("delete_horizon_ms").null_count == 0  # stamped, as a pass stamps them


def test_profile_pass_collects_the_driver_and_both_phases_tasks(spark, tmp_path):
    from benchmarks.profile_pass import profile_pass
    from deltalog.cleaner import cleaner, offset_map, tasks

    report = profile_pass(spark, SMALL, str(tmp_path), top=40)
    assert "pass 1 (profiled)" in report
    assert "cleaner/cleaner.py" in report  # the driver's profile
    driver, map_tasks, copy_tasks = report.split("== driver")[1], report.split("== map tasks")[1], \
        report.split("== copy tasks")[1]
    assert "_map_run" in map_tasks.split("== copy tasks")[0]  # profiled inside the Spark tasks of pass 1
    assert "recopy_chunk" in copy_tasks  # and of pass 2
    assert "run_tasks" in driver
    assert offset_map.run_tasks is tasks.run_tasks and cleaner.run_tasks is tasks.run_tasks  # restored


def test_recopy_variants_run_every_way_and_keep_the_same_records(tmp_path):
    """benchmarks.recopy_variants: pass 2's body, the read before and now, over snappy or sampled codecs; every way
    must keep the same records (it fails otherwise), and every way is reported."""
    from benchmarks.recopy_variants import run

    report = run(wl.Workload("test", records=4_000, keys=400, segment_records=1_000), str(tmp_path), rounds=1)
    assert "the generator's value chunks: ['UNCOMPRESSED']" in report  # random values: written uncompressed
    rows = [line.split() for line in report.splitlines()[2:]]
    assert sorted((r[0], r[1], r[2]) for r in rows) == sorted(
        (read, inputs, output) for read in ("whole", "deciding") for inputs in ("snappy", "sampled")
        for output in ("snappy", "sampled"))
