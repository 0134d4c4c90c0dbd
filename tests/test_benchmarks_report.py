"""The benchmark's full run and its report (benchmarks/runner.py, report.py, check.py), without Spark: a full run
includes every report row's cases (rows 22-24 among them), the report states rows 22-24 against the issue's targets
and what the run cost, and DuckDB's survivors are held to the pass's offsets, not only to their count."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks import check, report
from benchmarks import workload as wl
from benchmarks.cold_pass import COLD, DUCKDB_PROCESS, PROCESS, WARM
from benchmarks.fleet import COMMIT, IDLE_CYCLE, MARGINAL
from benchmarks.runner import CASE_ORDER, CASE_SECONDS, PYARROW_BASELINE, ROW_CASES, Bench, Timings
from deltalog.log.record import KEY, OFFSET, VALUE

SMALL = wl.Workload("test", records=20_000, keys=2_000, segment_records=5_000, append_records=1_000,
                    append_batch=500)


def test_a_full_run_runs_the_cases_of_every_report_row():
    assert {case for cases in ROW_CASES.values() for case in cases} <= set(CASE_ORDER)
    assert ROW_CASES[22] == ("cold_pass",) and ROW_CASES[23] == ROW_CASES[24] == ("fleet",)


def _timings() -> Timings:
    t = Timings()
    for name, s in {COLD: 2.6, WARM: 2.0, PROCESS: 30.0, DUCKDB_PROCESS: 6.0, MARGINAL: 0.02, COMMIT: 0.01,
                    IDLE_CYCLE: 6.5, "store.append": 1.0, "store.append, Records": 1.2,
                    "delta-rs write_deltalake": 1.1}.items():
        t.add(name, s)
    t.figures.update({"append_records": 1000, "fleet_partitions": 1000, "run_seconds": 1500.0,
                      CASE_SECONDS: {"cold_pass": [40.0, 38.0], "fleet": [200.0, 190.0]}})
    return t


def test_the_report_states_rows_22_to_24_against_the_issues_targets():
    r = report.ratios(_timings())
    [cold] = [v for k, v in r.items() if k.startswith("22. the first pass")]
    assert cold["target"] == 1.3 and cold["ratio"] == pytest.approx(1.3) and cold["met"]
    [process] = [v for k, v in r.items() if k.startswith("22. a pass, fresh process")]
    assert process["ratio"] == pytest.approx(5.0) and process["target"] is None  # reported, no target
    [marginal] = [v for k, v in r.items() if k.startswith("23.")]
    assert marginal["target"] == 3.0 and marginal["ratio"] == pytest.approx(2.0) and marginal["met"]
    idle = r["24. idle cycle"]
    assert idle["partitions"] == 1000 and idle["target"] == 5.0 and not idle["met"]
    assert any("baseline, not a floor" in label for label, *_ in report.TIME_COMPARISONS if "20." in label)


def test_the_report_says_what_the_run_and_each_case_cost():
    lines = report._run_time(_timings())
    assert "The whole run: 25.0 min" in "\n".join(lines)
    assert "| cold_pass | 22 | 40, 38 | 78 |" in lines
    assert "| fleet | 23, 24 | 200, 190 | 390 |" in lines
    assert report._run_time(Timings()) == []  # a run from before the figure
    assert report._fmt_s([0.0537, 0.0109, 1.5]) == "0.054, 0.011, 1.50"  # row 23's hundredths keep their figures


def test_another_engines_survivors_must_be_the_passs_offsets_not_only_as_many(tmp_path):
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({OFFSET: pa.array(range(6), pa.int64()), KEY: [b"a", b"b", b"a", b"c", b"b", b"a"],
                             VALUE: [b"1", b"2", b"3", b"4", b"5", b"6"]}), log)
    expected = check.expected_survivors([str(log)])
    assert list(expected.offsets) == [3, 4, 5]
    right, wrong = tmp_path / "right.parquet", tmp_path / "wrong.parquet"
    pq.write_table(pa.table({OFFSET: pa.array([5, 3, 4], pa.int64())}), right)  # any order
    pq.write_table(pa.table({OFFSET: pa.array([2, 4, 5], pa.int64())}), wrong)  # as many, an older record of a
    check.check_offsets(str(right), expected, "DuckDB")
    with pytest.raises(check.BenchmarkFailure, match="offset 2 where the pass keeps 3"):
        check.check_offsets(str(wrong), expected, "DuckDB")


def test_duckdb_and_the_pyarrow_baseline_are_checked_offset_by_offset(tmp_path):
    bench = Bench(SMALL, str(tmp_path), spark=None, cores=2, log=lambda _: None)
    bench.setup()
    bench.duckdb_dedupe(0)  # raises BenchmarkFailure on other offsets than the expected survivors
    bench.floor_pass(0)
    assert len(bench.t.seconds["duckdb dedupe"]) == len(bench.t.seconds[PYARROW_BASELINE]) == 1
