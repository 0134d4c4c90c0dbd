"""deltalog on Spark Connect: SQL views, the current state, the full log and the data-quality checks give on a
Connect session (``connect_spark``, a server JVM of its own) what they give on the classic one; the embedded
session is a Connect session when ``SPARK_REMOTE`` says so; the workers' warm-up, the doctor's worker probe
and a pass's progress lines work without a ``sparkContext``."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from conftest import clean_with_small_map
from test_quality import CLEAN_SUITE, PARTITION_SUITE, damage_row, failed, first_clean
from test_sql import TOPIC, model_state, produce, view_state

from deltalog import Record, Store
from deltalog.spark import is_connect

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_views_on_connect_match_the_model_before_and_after_compaction(tmp_path, clock, spark, connect_spark):
    # The pass runs on the classic session; every read goes through the Connect one.
    cleaning = Store(tmp_path / "s", clock=clock, spark=spark)
    store = Store(tmp_path / "s", clock=clock, spark=connect_spark)
    assert is_connect(store.spark) and not is_connect(cleaning.spark)
    cleaning.create_topic(TOPIC, partitions=2, config={"cleanup.policy": "compact", "delete.retention.ms": 0})
    rng = random.Random(4)
    query = "SELECT * FROM fruit_prices_current"
    produce(store, rng, 30)
    assert view_state(store, query) == model_state(store, TOPIC)  # before: all of it a dirty tail
    for p in store.partitions(TOPIC):
        store.roll(TOPIC, p)
    produce(store, rng, 10)
    clean_with_small_map(cleaning, 4, TOPIC)  # partial passes until the whole dirty section is clean
    assert store.describe(TOPIC)[0].first_dirty_offset > 0
    produce(store, rng, 10)
    assert view_state(store, query) == model_state(store, TOPIC)  # a clean section and a new dirty tail

    log = {(r.partition, r.offset) for r in store.log_frame(TOPIC).collect()}
    assert log == {(p, r.offset) for p in (0, 1) for r in store.read(TOPIC, p, "earliest")}
    rows = store.sql("SELECT partition, count(*) AS n FROM fruit_prices GROUP BY partition").collect()
    assert {r.partition: r.n for r in rows} == {p: len(store.read(TOPIC, p, "earliest")) for p in (0, 1)}
    assert store.current_state(TOPIC).count() == len(model_state(store, TOPIC))


def test_decoded_views_on_connect(tmp_path, clock, connect_spark):
    store = Store(tmp_path / "s", clock=clock, spark=connect_spark)
    store.create_topic("prices", config={"key.encoding": "string", "value.encoding": "json",
                                         "value.schema": "price DOUBLE, currency STRING"})
    store.append("prices", 0, [Record(key="lime", value=json.dumps({"price": 0.49, "currency": "EUR"})),
                               Record(key="lime", value=json.dumps({"price": 1.59, "currency": "EUR"})),
                               Record(key="kiwi", value=json.dumps({"price": 0.35, "currency": "EUR"}))])
    rows = store.sql("SELECT key, value.price AS price FROM prices_current ORDER BY key").collect()
    assert [tuple(r) for r in rows] == [("kiwi", 0.35), ("lime", 1.59)]


@pytest.mark.slow
def test_checks_on_connect_pass_and_fail_as_on_classic(tmp_path, clock, spark, connect_spark):
    cleaning = Store(tmp_path / "s", clock=clock, spark=spark)
    first_clean(cleaning, clock)
    store = Store(tmp_path / "s", clock=clock, spark=connect_spark)
    result = store.check(TOPIC)
    assert result.success, result.summary()
    assert {s.suite: {e.name for e in s.expectations} for s in result.suites} == {
        "partition": PARTITION_SUITE, "clean": CLEAN_SUITE}

    damage_row(store, 1, b"lime", b"0.49")  # an old lime, back below the checkpoint
    bad = failed(store.check(TOPIC, cleans="none"))
    assert set(bad) == {"clean_section_keys_unique"}
    assert {(r["offset"], r["key"]) for r in bad["clean_section_keys_unique"]} == {(1, "lime"), (3, "lime")}
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ  # Connect mode was switched on for the suites only
    # The classic session's checks, in the same process, run their SQL expectations on the classic session.
    classic = failed(cleaning.check(TOPIC, cleans="none"))
    assert {(r["offset"], r["key"]) for r in classic["clean_section_keys_unique"]} == {(1, "lime"), (3, "lime")}
    assert set(classic) == {"clean_section_keys_unique"}


def test_warm_up_and_doctor_run_python_workers_on_connect(connect_spark):
    from deltalog.cli.doctor_checks import OK, check_spark_workers
    from deltalog.spark import default_parallelism
    from deltalog.sql.session import warm_python_workers

    warm = warm_python_workers(connect_spark)
    warm.join(timeout=180)
    assert warm.workers == default_parallelism(connect_spark) == 2
    check = check_spark_workers(connect_spark)
    assert (check.name, check.status) == ("spark workers", OK), check.detail


def test_pass_progress_on_connect_counts_its_own_tasks(store, connect_spark, caplog):
    """No status tracker on Connect: the pass's thread gets the server's progress reports; its job tag is
    on its queries only while it runs; a query of another thread is not counted."""
    from deltalog.cleaner.log_to_clean import LogToClean
    from deltalog.cleaner.progress import PassProgress

    def _slow_tasks(batches):  # defined here: pickled by value for the server's workers
        import time

        import pyarrow as pa

        for batch in batches:
            time.sleep(3)
            yield pa.RecordBatch.from_pydict({"id": batch["id"]})

    store.create_topic("t", config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record(key=b"a", value=b"1")])
    ltc = LogToClean.of(store.log("t", 0).snapshot(), store.clock.now_ms())
    other = threading.Thread(target=lambda: connect_spark.range(0, 1, numPartitions=1)
                             .mapInArrow(_slow_tasks, "id long").collect())
    with caplog.at_level(logging.INFO, logger="deltalog"):
        with PassProgress(connect_spark, ltc, 1.0) as progress:
            assert progress.group in connect_spark.getTags()
            other.start()
            connect_spark.range(0, 2, numPartitions=2).mapInArrow(_slow_tasks, "id long").collect()
            other.join()
            assert progress.tasks() == (2, 2)
    assert progress.group not in connect_spark.getTags()
    lines = [r.getMessage() for r in caplog.records if "Spark tasks done" in r.getMessage()]
    assert lines and all(m.startswith("cleaning t-0: ") for m in lines)


_EMBEDDED = textwrap.dedent("""
    import json, sys
    from deltalog import Record, Store
    from deltalog.cli import main
    from deltalog.cli.doctor_checks import check_spark, check_spark_workers
    from deltalog.spark import is_connect

    root = sys.argv[1]
    store = Store(root)
    store.create_topic("t", config={"cleanup.policy": "compact", "key.encoding": "string", "value.encoding": "string"})
    store.append("t", 0, [Record(key="a", value="1"), Record(key="a", value="2"), Record(key="b", value="3")])
    store.roll("t", 0)
    store.append("t", 0, [Record(key="c", value="4")])
    [cleaned] = store.clean("t")  # both passes on the embedded Connect session
    spark_check, session = check_spark()
    workers = check_spark_workers(session)
    print(json.dumps({"connect": is_connect(store.spark), "same": session is store.spark,
                      "cleaned": [cleaned.records_read, cleaned.records_written],
                      "spark": [spark_check.status, spark_check.detail], "workers": workers.status}))
    sys.exit(main(["--store", root, "sql", "--json", "SELECT key, value FROM t_current ORDER BY key"]))
""")


@pytest.mark.connect
@pytest.mark.subprocess
def test_the_embedded_session_is_a_connect_session_under_spark_remote(tmp_path):
    env = {**os.environ, "SPARK_REMOTE": "local[2]", "PYTHONPATH": str(REPO_ROOT),
           "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, "-c", _EMBEDDED, str(tmp_path / "s")], env=env, capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    facts = json.loads(lines[0])
    assert facts["connect"] and facts["same"] and facts["workers"] == "OK", facts
    assert facts["cleaned"] == [3, 2]
    assert facts["spark"][0] == "OK" and "Spark Connect session (local[2])" in facts["spark"][1]
    assert [json.loads(line) for line in lines[1:]] == [{"key": "a", "value": "2"}, {"key": "b", "value": "3"},
                                                        {"key": "c", "value": "4"}]
