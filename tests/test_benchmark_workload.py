"""The benchmark's JSON workload and its floor, on a log of a few thousand records (no Spark).

The JSON workload must hold what a changelog holds (one parseable document per record about the record's own
key, tombstones as nulls) and compress several times, or its rows would say nothing the random workload does
not; the floor must leave exactly the latest record of each key, or the pass would be compared with a wrong
answer.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from benchmarks import check
from benchmarks import workload as wl
from benchmarks.runner import PYARROW_BASELINE, Bench
from deltalog.log.record import KEY, OFFSET, SEGMENT, VALUE

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
    assert len(bench.t.seconds[PYARROW_BASELINE]) == 1
    written = pq.read_table([str(p) for p in sorted((tmp_path / "floor").iterdir())])
    assert written.num_rows == bench.expected.num_rows < bench.gen.total_records
    assert written.column(KEY).equals(bench.expected.table([KEY]).column(KEY))
    tombstones = written.filter(written.column(VALUE).is_null())
    assert tombstones.column("delete_horizon_ms").null_count == 0  # stamped, as a pass stamps them


@pytest.mark.parametrize("values", ["random", "json"])
def test_a_streamed_workload_builds_the_same_shape_a_segment_at_a_time(tmp_path, values):
    w = wl.with_values(wl.Workload("streamed", records=20_000, keys=2_000, segment_records=2_500, append_records=1_000,
                                   append_batch=500, streamed=True), values)
    bench = Bench(w, str(tmp_path / "a"), spark=None, cores=2, log=lambda _: None)
    bench.setup()
    gen = bench.gen
    assert gen.first_dirty_offset == gen.dirty_records == 10_000 and gen.log_end_offset == 20_000
    table = pq.read_table(bench.paths)
    clean = table.filter(pc.less(table.column(OFFSET), gen.first_dirty_offset))
    dirty = table.filter(pc.greater_equal(table.column(OFFSET), gen.first_dirty_offset))
    # The clean prefix: the latest of each key among the first 10,000 appends, drawn again from the same streams.
    prefix_keys = np.concatenate([wl._segment_draws(w, i, 2_500)[1] for i in range(4)])
    latest = {k: o for o, k in enumerate(prefix_keys)}
    assert clean.column(OFFSET).to_pylist() == sorted(latest.values()) and clean.num_rows == gen.clean_records
    assert set(clean.column(SEGMENT).to_pylist()) == {0}
    assert len(set(clean.column(KEY).to_pylist())) == clean.num_rows
    assert clean.column("delete_horizon_ms").null_count == clean.num_rows - clean.column(VALUE).null_count
    # The dirty rest: every append, in closed segments of 2,500 records, one file each.
    assert dirty.column(OFFSET).to_pylist() == list(range(10_000, 20_000))
    assert sorted(set(dirty.column(SEGMENT).to_pylist())) == [10_000, 12_500, 15_000, 17_500]
    assert gen.files == 4 + -(-gen.clean_records // 2_500)
    assert 0 < dirty.column(VALUE).null_count < 1_000
    # The same seed gives the same bytes; the survivors are the latest record of each key over the whole log.
    again = Bench(w, str(tmp_path / "b"), spark=None, cores=2, log=lambda _: None)
    again.setup()
    assert pq.read_table(again.paths).equals(table)
    assert bench.expected.num_rows == len(set(table.column(KEY).to_pylist()))


def test_a_streamed_workload_needs_whole_segments_of_prefix(tmp_path):
    w = wl.Workload("odd", records=20_000, keys=2_000, segment_records=3_000, streamed=True)
    with pytest.raises(ValueError, match="whole segments of 3,000"):
        Bench(w, str(tmp_path), spark=None, cores=2, log=lambda _: None).setup()


def test_the_check_folds_and_streams_in_bounded_pieces(tmp_path, monkeypatch):
    bench = Bench(SMALL, str(tmp_path), spark=None, cores=2, log=lambda _: None)
    bench.setup()
    whole = pq.read_table(bench.paths, columns=check.COLUMNS)
    latest = whole.group_by(KEY).aggregate([(OFFSET, "max")]).column(f"{OFFSET}_max")
    survivors = whole.filter(pc.is_in(whole.column(OFFSET), latest)).sort_by(OFFSET)
    monkeypatch.setattr(check, "FOLD_ROWS", 3_000)  # fold file by file: the running result joins each file
    monkeypatch.setattr(check, "BATCH_ROWS", 700)
    expected = check.expected_survivors(bench.paths)
    assert expected.table().equals(survivors)
    assert expected.live_keys == survivors.num_rows - survivors.column(VALUE).null_count == bench.live_keys
    # Streams compared whatever their batch boundaries; a changed value anywhere is found.
    pieces = [survivors.slice(lo, 999) for lo in range(0, survivors.num_rows, 999)]
    assert check._first_difference(pieces, expected.batches()) is None
    values = survivors.column(VALUE).to_pylist()
    i = next(j for j in range(survivors.num_rows // 2, survivors.num_rows) if values[j] is not None)
    values[i] = values[i][:-1] + b"!"
    changed = survivors.set_column(survivors.schema.get_field_index(VALUE), VALUE, pa.array(values, pa.binary()))
    assert check._first_difference([changed], expected.batches()) == VALUE
    assert check._first_difference([survivors.slice(1)], expected.batches()) == OFFSET


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
def test_the_scaling_table_puts_time_per_million_records_beside_the_baselines(tmp_path, capsys):
    from benchmarks import scaling

    def row(preset: str, records: int, seconds: float, floor: float | None) -> dict[str, object]:
        return {"preset": preset, "workload": "random", "records": records, "mb": records * 1.14e-4, "pass": seconds,
                "duckdb": seconds / 2, "floor": floor, "load_before": [3.0, 2.0, 1.0], "load_after": [9.0, 5.0, 2.0],
                "skipped": {} if floor else {PYARROW_BASELINE: ["holding the whole log decoded takes ~20 GiB"]}}

    out = tmp_path / "scaling.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in (row("small", 900_000, 0.9, 0.3),
                                                          row("large", 50_000_000, 60.0, None))))
    assert scaling.main(["--table", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split(" | ")[1:6] == ["900,000", "103", "0.90", "1.000", "0.45"]
    assert lines[3].split(" | ")[1:8] == ["50,000,000", "5,700", "60.00", "1.200", "30.00", "skipped", "2.00x"]
    assert lines[3].endswith("| 3 / 9 |")
    assert lines[-1] == f"- skipped: large (random) {PYARROW_BASELINE}: skipped in 1 round(s): holding the whole log decoded takes ~20 GiB"


@pytest.mark.spark
@pytest.mark.subprocess
@pytest.mark.slow
def test_the_cold_pass_row_times_a_fresh_process_and_duckdb_s_own(tmp_path):
    """Row 22: a fresh process starts Spark and runs two passes on fresh copies (each must find work), DuckDB's
    dedupe runs as a process of its own and writes as many survivors as expected."""
    from benchmarks.cold_pass import COLD, DUCKDB_PROCESS, PROCESS, SESSION, WARM

    bench = Bench(SMALL, str(tmp_path), spark=None, cores=2, log=lambda _: None)
    bench.setup()
    bench.cold_pass(0)
    for name in (PROCESS, SESSION, COLD, WARM, DUCKDB_PROCESS):
        assert len(bench.t.seconds[name]) == 1 and bench.t.seconds[name][0] > 0, name
    figures = bench.t.figures["cold pass"][0]
    assert figures["process"] > figures["session"] + figures["cold"]["seconds"] + figures["warm"]["seconds"]
    assert figures["cold"]["map"] > 0 and figures["warm"]["copy"] > 0
