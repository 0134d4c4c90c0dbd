"""The cleaner job: a full cycle (retention, cleaning, VACUUM, metrics), threads, backoff, overlapping runs."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest

from deltalog import Record, Store
from deltalog.cleaner.metrics import metrics_table_uri
from deltalog.errors import InvalidConfigError
from deltalog.jobs.cleaner_job import JobConfig
from deltalog.jobs.cleaner_job import run as run_job

HOUR = 3_600_000
DAY = 24 * HOUR


def dirty_partition(store, topic, partition, *, keys=3, rounds=3, prefix="k"):
    """``rounds`` closed segments, each updating the same ``keys`` keys, then one active record."""
    for r in range(rounds):
        store.append(topic, partition, [Record(f"{prefix}{i}", f"v{r}") for i in range(keys)])
        store.roll(topic, partition)
    store.append(topic, partition, [Record("active", "a")])


def latest(store, topic, partition):
    return {r.key: r.value for r in store.read(topic, partition, "earliest")}


def test_one_cycle_applies_retention_cleans_vacuums_and_records_metrics(spark_store, clock):
    store = spark_store
    store.create_topic("state", 1, config={"cleanup.policy": "compact", "file.delete.delay.ms": 1000})
    store.create_topic("events", 1, config={"cleanup.policy": "delete", "retention.ms": DAY})
    store.create_topic("prices", 1, config={"cleanup.policy": "compact,delete", "retention.ms": 2 * DAY})
    dirty_partition(store, "state", 0)
    store.append("events", 0, [Record(None, "old")])
    store.roll("events", 0)
    store.append("prices", 0, [Record("discontinued", "1.00")])
    store.roll("prices", 0)
    clock.advance(DAY + 1)  # the events segment and the discontinued price are now more than a day old
    store.append("events", 0, [Record(None, "new")])
    clock.advance(DAY)  # 2 days + 1 ms since the discontinued price
    dirty_partition(store, "prices", 0, keys=2, prefix="fruit")

    cleaner = store.log_cleaner(threads=1, progress_interval_s=0.05)
    cycle = cleaner.run_cycle()

    assert sorted((c.topic, c.partition) for c in cycle.cleans) == [("prices", 0), ("state", 0)]
    assert cycle.failures == () and cycle.busy == () and cycle.conflicts == ()
    assert latest(store, "state", 0) == {b"k0": b"v2", b"k1": b"v2", b"k2": b"v2", b"active": b"a"}
    assert [r.offset for r in store.read("state", 0, "earliest")] == [6, 7, 8, 9]
    # retention: the events topic lost its old segment; compact,delete lost the old unique key
    assert [r.value for r in store.read("events", 0, "earliest")] == [b"new"]
    assert {(r.topic, r.segments_deleted) for r in cycle.retention} == {("events", 1), ("prices", 1)}
    assert b"discontinued" not in latest(store, "prices", 0)
    assert latest(store, "prices", 0) == {b"fruit0": b"v2", b"fruit1": b"v2", b"active": b"a"}
    # nothing is vacuumed yet (file.delete.delay.ms); after the delay the next cycle removes the old files
    assert cycle.files_vacuumed == 0
    clock.advance(1000)
    second = cleaner.run_cycle()
    assert second.cleans == () and second.files_vacuumed >= 3
    # VACUUM never touched a file the current version uses (the cleaner writes them in nested directories)
    assert latest(store, "state", 0) == {b"k0": b"v2", b"k1": b"v2", b"k2": b"v2", b"active": b"a"}
    plog = store.log("state", 0)
    on_disk = {os.path.relpath(os.path.join(d, f), plog.uri) for d, _, fs in os.walk(plog.uri)
               if "_delta_log" not in d for f in fs}
    assert on_disk == {f.path for f in plog.snapshot().files}
    # metrics: a Delta table with one row per partition and one store row per cycle
    from deltalake import DeltaTable

    rows = sorted(DeltaTable(metrics_table_uri(store.log_manager)).to_pyarrow_table().to_pylist(),
                  key=lambda r: r["recorded_ms"])
    assert len(rows) == 2 * (3 + 1)
    state0 = [r for r in rows if r["topic"] == "state" and r["partition"] == 0]
    assert state0[0]["dirty_percent"] == 0.0 and state0[0]["last_clean_ms"] == cycle.cleans[0].now_ms
    assert 0 < state0[0]["map_utilization"] <= 1
    store_rows = [r for r in rows if r["scope"] == "store"]
    assert [r["passes"] for r in store_rows] == [2, 0]
    assert store_rows[0]["uncleanable_partitions_count"] == 0


def test_threads_clean_partitions_side_by_side_with_a_share_of_the_buffer(tmp_path, clock, spark):
    store = Store(tmp_path / "s", clock=clock, spark=spark, config={"log.cleaner.threads": 2})
    store.create_topic("t", 4, config={"cleanup.policy": "compact"})
    for p in range(4):
        dirty_partition(store, "t", p, keys=2, rounds=2)
    cycle = store.log_cleaner().run_cycle()
    assert sorted(c.partition for c in cycle.cleans) == [0, 1, 2, 3]
    # each thread's pass maps at most its share: (128 MiB / 2 threads / 24 bytes) slots x 0.9
    assert {c.map_capacity for c in cycle.cleans} == {2_516_581} == {store.config.offset_map_capacity}
    for p in range(4):
        assert latest(store, "t", p) == {b"k0": b"v1", b"k1": b"v1", b"active": b"a"}


def test_store_clean_expires_old_segments_of_compact_delete_topics(spark_store, clock):
    """As Kafka's cleaner does, store.clean() applies retention to a compact,delete partition after cleaning.

    ``segment.bytes`` is small so the cleaner keeps the segments apart: a group merged with a young
    segment takes the group's newest timestamp, and would (in Kafka too) wait for that one to age.
    """
    store = spark_store
    store.create_topic("p", 1, config={"cleanup.policy": "compact,delete", "retention.ms": DAY, "segment.bytes": 1000})
    store.append("p", 0, [Record("only-once", "x")])
    store.roll("p", 0)
    clock.advance(DAY + 1)
    dirty_partition(store, "p", 0, keys=1, rounds=2)
    [result] = store.clean("p")
    assert result.end_offset == 3
    assert latest(store, "p", 0) == {b"k0": b"v1", b"active": b"a"}
    # [1, 2) was emptied by compaction, so the old segment [0, ...) reached up to 2
    assert store.log("p", 0).snapshot().log_start_offset == 2
    assert [r.offset for r in store.read("p", 0, "earliest")] == [2, 3]


def test_daemon_backs_off_only_when_there_is_nothing_to_clean(spark_store, clock):
    store = spark_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    dirty_partition(store, "t", 0)
    sleeps: list[int] = []
    cycles = []

    def sleep(ms: int) -> None:
        sleeps.append(ms)
        clock.advance(ms)
        if len(sleeps) == 2:  # new dirty data arrives while the cleaner sleeps
            dirty_partition(store, "t", 0)

    cleaner = store.log_cleaner(sleep=sleep)
    n = cleaner.run(max_cycles=5, on_cycle=cycles.append)
    assert n == 5
    # cycle 1 cleans (no sleep), 2 finds nothing (sleep), 3 nothing (sleep; data arrives), 4 cleans, 5 nothing
    assert [len(c.cleans) for c in cycles] == [1, 0, 0, 1, 0]
    assert sleeps == [store.config.backoff_ms] * 2
    assert cycles[3].started_ms - cycles[0].started_ms == 2 * store.config.backoff_ms


def test_stop_ends_a_long_running_cleaner(spark_store, clock):
    store = spark_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    cleaner = store.log_cleaner(sleep=lambda ms: (clock.advance(ms), cleaner.stop()), vacuum=False, metrics=False)
    assert cleaner.run() == 1


def test_job_config_is_validated_with_clear_errors(tmp_path):
    ok = JobConfig.from_mapping({"store": {"root": "s"}, "cleaner": {"log.cleaner.threads": 3},
                                 "job": {"once": True}, "_comment": "ignored"})
    assert ok.root == "s" and ok.cleaner == {"log.cleaner.threads": 3} and ok.once
    with pytest.raises(InvalidConfigError, match="log.cleaner.threads"):
        JobConfig.from_mapping({"store": {"root": "s"}, "cleaner": {"log.cleaner.threads": 0}})
    with pytest.raises(InvalidConfigError, match="Unknown store config 'log.cleaner.thread'"):
        JobConfig.from_mapping({"store": {"root": "s"}, "cleaner": {"log.cleaner.thread": 2}})
    with pytest.raises(InvalidConfigError, match="store.uri"):
        JobConfig.from_mapping({"cleaner": {}})
    with pytest.raises(InvalidConfigError, match="unknown section"):
        JobConfig.from_mapping({"store": {"root": "s"}, "clenaer": {}})
    with pytest.raises(InvalidConfigError, match="max_cycles"):
        JobConfig.from_mapping({"store": {"root": "s"}, "job": {"max_cycles": 0}})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidConfigError, match="not valid JSON"):
        JobConfig.load(str(bad))


def test_the_shipped_configs_load():
    root = os.path.join(os.path.dirname(__file__), "..", "conf")
    local = JobConfig.load(os.path.join(root, "deltalog.json"))
    assert local.once and local.cleaner["log.cleaner.threads"] == 2
    # the Databricks config leaves the store to the job's --store parameter (tests/test_databricks_bundle.py)
    with pytest.raises(InvalidConfigError, match="--store"):
        JobConfig.load(os.path.join(root, "deltalog.databricks.json"))
    on_databricks = JobConfig.load(os.path.join(root, "deltalog.databricks.json"), store_uri="s3://b/deltalog")
    assert on_databricks.root == "s3://b/deltalog" and on_databricks.storage_options == {}


def test_the_store_is_a_uri_with_storage_options():
    config = JobConfig.from_mapping({"store": {"uri": "s3://b/p", "storage_options": {
        "AWS_REGION": "eu-west-1", "AWS_ALLOW_HTTP": True, "timeout": 30, "_comment": "ignored"}}})
    assert config.root == "s3://b/p"
    assert config.storage_options == {"AWS_REGION": "eu-west-1", "AWS_ALLOW_HTTP": "true", "timeout": "30"}
    assert JobConfig.from_mapping({"store": {"root": "/data/s"}}).root == "/data/s"  # the older name
    assert JobConfig.from_mapping({"store": {"uri": "a", "root": "a"}}).root == "a"
    with pytest.raises(InvalidConfigError, match="disagree"):
        JobConfig.from_mapping({"store": {"uri": "s3://b/p", "root": "/data/s"}})
    with pytest.raises(InvalidConfigError, match="storage_options.AWS_REGION must be a string"):
        JobConfig.from_mapping({"store": {"uri": "s3://b/p", "storage_options": {"AWS_REGION": None}}})
    with pytest.raises(InvalidConfigError, match="storage_options must be an object"):
        JobConfig.from_mapping({"store": {"uri": "s3://b/p", "storage_options": ["AWS_REGION=x"]}})
    with pytest.raises(InvalidConfigError, match=r"unknown key\(s\) \['url'\]"):
        JobConfig.from_mapping({"store": {"url": "s3://b/p"}})
    # --store replaces the file's store (both names) and keeps its storage options
    over = JobConfig.from_mapping({"store": {"root": "/old", "storage_options": {"k": "v"}}}, store_uri="gs://b/s")
    assert over.root == "gs://b/s" and over.storage_options == {"k": "v"}


def test_job_run_prints_one_json_line_per_cycle_and_logs_progress(tmp_path, spark, clock, caplog):
    store = Store(tmp_path / "s", clock=clock, spark=spark)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    dirty_partition(store, "t", 0)
    out = io.StringIO()
    config = JobConfig.from_mapping({"store": {"root": str(tmp_path / "s")},
                                     "job": {"max_cycles": 2, "progress_interval_s": 0.05}})
    with caplog.at_level(logging.INFO, logger="deltalog"):
        assert run_job(config, spark=spark, clock=clock, out=out) == 2
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["passes"] for line in lines] == [1, 0] and lines[0]["cleaned"] == ["t-0"]
    progress = [r.getMessage() for r in caplog.records if "Spark tasks done" in r.getMessage()]
    assert progress and all(m.startswith("cleaning t-0: ") for m in progress)
    assert any("cleaner cycle: 1 pass(es)" in r.getMessage() for r in caplog.records)


JOB_CONFIG = {
    "cleaner": {"log.cleaner.threads": 1},
    "spark": {"master": "local[1]", "conf": {"spark.driver.memory": "512m", "spark.sql.shuffle.partitions": "1"}},
    "job": {"once": True, "log_level": "INFO", "progress_interval_s": 1},
}


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.subprocess
def test_two_overlapping_job_runs_never_clean_a_partition_twice(tmp_path):
    """Two runs of the job as real processes, started together: every partition is cleaned exactly once."""
    root = tmp_path / "store"
    store = Store(root)
    store.create_topic("t", 4, config={"cleanup.policy": "compact"})
    for p in range(4):
        dirty_partition(store, "t", p, keys=20, rounds=3)
    config = tmp_path / "job.json"
    config.write_text(json.dumps({"store": {"root": str(root)}, **JOB_CONFIG}))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    procs = [subprocess.Popen([sys.executable, "-m", "deltalog.jobs.cleaner_job", "--config", str(config)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    cycles = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    cleaned = sorted(c for cycle in cycles for c in cycle["cleaned"])
    assert cleaned == [f"t-{p}" for p in range(4)], cycles  # each partition by exactly one run
    for p in range(4):
        history = store.log("t", p).table().history()
        assert sum(1 for h in history if h.get("deltalog.operation") == "clean") == 1
        assert latest(store, "t", p) == {**{f"k{i}".encode(): b"v2" for i in range(20)}, b"active": b"a"}
    # every lease released: free for anyone, its last generation kept (marked released) so it is never reused
    assert all(store.leases.holder("t", p) is None for p in range(4))
    assert [json.loads(open(os.path.join(root, "_deltalog", "leases", "t", "0", n)).read())["released"]
            for n in os.listdir(os.path.join(root, "_deltalog", "leases", "t", "0"))] == [True]


def test_cleaner_run_command(tmp_path, spark, clock, capsys):
    from deltalog.cli import main as cli

    store = Store(tmp_path / "s", clock=clock)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    dirty_partition(store, "t", 0)
    assert cli(["--store", str(tmp_path / "s"), "--config", "log.cleaner.threads=2", "cleaner", "run", "--once",
                "--progress-interval", "0.1"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert json.loads(line)["cleaned"] == ["t-0"]
    assert latest(store, "t", 0) == {b"k0": b"v2", b"k1": b"v2", b"k2": b"v2", b"active": b"a"}
    assert cli(["--store", str(tmp_path / "nowhere"), "cleaner", "run", "--once"]) == 1
    assert cli(["--store", str(tmp_path / "s"), "--config", "log.cleaner.threads=0", "cleaner", "run"]) == 1


def test_the_job_cleans_a_store_on_s3_named_by_its_config(s3_server, s3_store_uri, spark, clock, tmp_path,
                                                           monkeypatch):
    """store.uri and store.storage_options from the config file reach every client: the Delta commits, the
    leases and state files, and the passes' Spark tasks (no S3 variable in the environment)."""
    for name in s3_server.env:
        monkeypatch.delenv(name, raising=False)
    options = s3_server.storage_options
    store = Store(s3_store_uri, storage_options=options, clock=clock)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    dirty_partition(store, "t", 0)
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"store": {"uri": s3_store_uri, "storage_options": options},
                                "job": {"once": True}}))
    out = io.StringIO()
    assert run_job(JobConfig.load(str(path)), spark=spark, clock=clock, out=out) == 1
    assert json.loads(out.getvalue())["cleaned"] == ["t-0"]
    assert latest(store, "t", 0) == {b"k0": b"v2", b"k1": b"v2", b"k2": b"v2", b"active": b"a"}
    assert store.leases.holder("t", 0) is None


@pytest.mark.subprocess
def test_an_idle_cycle_of_the_job_starts_no_spark(tmp_path):
    """The scheduled job starts Spark only when a pass runs: on a store with nothing to clean, its cycle (retention,
    VACUUM, metrics) reads the Delta logs and exits without a JVM, as ``deltalog clean`` does."""
    root = tmp_path / "store"
    store = Store(root)
    store.create_topic("t", 3, config={"cleanup.policy": "compact"})
    for p in range(3):
        store.append("t", p, [Record(f"k{i}", "v") for i in range(5)])  # the active segment only: not cleanable
    probe = ("import sys\n"
             "from deltalog.jobs.cleaner_job import main\n"
             "code = main(['--store', sys.argv[1], '--once'])\n"
             "ctx = sys.modules.get('pyspark.core.context') or sys.modules.get('pyspark.context')\n"
             "started = ctx is not None and ctx.SparkContext._active_spark_context is not None\n"
             "print('JVM' if started else 'no JVM', file=sys.stderr)\n"
             "sys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", probe, str(root)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == "no JVM", done.stderr[-3000:]
    cycle = json.loads(done.stdout.strip().splitlines()[-1])
    assert cycle["passes"] == 0 and cycle["cleaned"] == []
