"""A cleaner cycle isolates one partition's failure to that partition, as Kafka's LogCleaner marks one partition
uncleanable and goes on (``LogCleanerManager.markPartitionUncleanable``): another engine's record-changing commit
(a real delta-rs ``delete``) on one partition of a topic leaves the cycle's other steps and the other partitions'
metrics as they were, and the cycle names the partition and the commit."""

from __future__ import annotations

import io
import json
import logging

from deltalake import DeltaTable

from deltalog import Record, Store
from deltalog.jobs.cleaner_job import JobConfig
from deltalog.jobs.cleaner_job import run as run_job

PARTITIONS = 3
CHANGED = 1


def _store(root) -> Store:
    store = Store(root)
    store.create_topic("t", PARTITIONS, config={"cleanup.policy": "compact"})
    for p in range(PARTITIONS):
        store.append("t", p, [Record(f"k{i}", "v") for i in range(5)])  # the active segment only: not cleanable
    DeltaTable(store.log("t", CHANGED).uri).delete("offset = 1")  # another engine's DELETE
    return store


def test_a_foreign_delete_on_one_partition_leaves_the_others_metrics(tmp_path, caplog):
    store = _store(tmp_path / "s")
    cleaner = store.log_cleaner()

    def no_spark():
        raise AssertionError("an idle cycle asked for a Spark session")

    cleaner.spark = no_spark
    with caplog.at_level(logging.WARNING):
        cycle = cleaner.run_cycle()
    rows = {m.partition: m for m in cleaner.last_metrics.partitions}
    assert sorted(rows) == list(range(PARTITIONS))
    for p in (0, 2):
        assert rows[p].log_end_offset == 5 and rows[p].uncleanable_reason is None
    changed = rows[CHANGED]
    assert changed.uncleanable_reason is not None and "ForeignCommitError" in changed.uncleanable_reason
    assert "t-1" in changed.uncleanable_reason and "DELETE" in changed.uncleanable_reason
    [(tp, why)] = [(f.tp, f.message) for f in cycle.foreign_commits]
    assert tp == ("t", CHANGED) and "DELETE" in why and "version 2" in why
    assert any("t-1" in r.getMessage() and "DELETE" in r.getMessage() for r in caplog.records)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []  # retention, VACUUM: quiet


def test_the_jobs_cycle_line_names_the_changed_partition(tmp_path):
    store = _store(tmp_path / "s")
    out = io.StringIO()

    def no_spark():
        raise AssertionError("an idle cycle asked for a Spark session")

    assert run_job(JobConfig.from_mapping({"job": {"once": True}}, store_uri=store.root), spark=no_spark,
                   out=out) == 1
    line = json.loads(out.getvalue())
    [named] = line["foreign_commits"]
    assert named.startswith("t-1: ") and "DELETE" in named
