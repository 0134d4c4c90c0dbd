"""An idle cleaner cycle costs a few object-store requests per partition and no Spark: counted on moto's S3 server
through the request-logging proxy (tooling/fault_proxy.py), as the marginal requests of one more partition."""

from __future__ import annotations

import pyarrow as pa

from deltalog import Store
from deltalog.log.partition_log import PartitionLog
from tests.test_retention import HOUR, make_segments
from tests.test_snapshot_checkpoint import forget_process

#: Requests an idle partition may cost: in a fresh process (its Delta log read once: delta-rs's open, the check for
#: other engines' commits, the log positions; one listing of its files for VACUUM's check) and in a later cycle of
#: the same process (one look for its next commit's file, the cycle's one refresh of its snapshot, shared by its
#: steps; VACUUM's listing again only when the version moves or an orphan written since could be due). The
#: uncleanable marks and the last passes' figures are listed once a cycle for the whole store, so an unmarked,
#: never-cleaned partition costs nothing there.
COLD_BOUND = 22
WARM_BOUND = 1
#: A fresh process whose last cycle wrote the log-snapshot checkpoint (deltalog/log/snapshot_checkpoint.py): one look
#: for each partition's next commit; the checkpoint and the topic's marker are read once per topic.
CHECKPOINTED_BOUND = 1
COMMITS = 3  # appends per partition, after the create


def _build(uri, options, partitions):
    store = Store(uri, storage_options=options)
    store.create_topic("t", partitions, config={"cleanup.policy": "compact"})
    for p in range(partitions):
        for _ in range(COMMITS):  # the active segment only: nothing to clean
            store.append("t", p, pa.table({"key": [b"k%d" % i for i in range(10)], "value": [b"v"] * 10}))


def _requests_per_cycle(proxy, uri, options, cycles=2):
    """The requests of ``cycles`` cycles of one fresh process (no checkpoint yet: it reads every Delta log), then of
    the first cycle of another fresh process (from the checkpoint the first wrote)."""
    def no_spark():
        raise AssertionError("an idle cycle asked for a Spark session")

    counts = []
    for n in (cycles, 1):
        forget_process()
        cleaner = Store(uri, storage_options=options).log_cleaner()  # a fresh store: nothing read yet
        cleaner.spark = no_spark
        for _ in range(n):
            before = len(proxy.requests)
            cycle = cleaner.run_cycle()
            assert cycle.cleans == () and cycle.outcomes == ()
            counts.append(len(proxy.requests) - before)
    return counts


def test_an_idle_cycle_costs_a_bounded_number_of_requests_per_partition(s3_server, s3_store_uri, fault_proxy):
    options = fault_proxy.storage_options(s3_server.storage_options)
    small, large = 2, 5
    _build(f"{s3_store_uri}/small", options, small)
    _build(f"{s3_store_uri}/large", options, large)
    few = _requests_per_cycle(fault_proxy, f"{s3_store_uri}/small", options)
    many = _requests_per_cycle(fault_proxy, f"{s3_store_uri}/large", options)
    cold, warm, checkpointed = ((m - f) / (large - small) for f, m in zip(few, many, strict=True))
    assert cold <= COLD_BOUND, (few, many)
    assert warm <= WARM_BOUND, (few, many)
    assert checkpointed <= CHECKPOINTED_BOUND, (few, many)
    assert warm < cold and checkpointed < cold  # a later cycle, or the next process, reads only what changed


def _no_spark():
    raise AssertionError("the cycle asked for a Spark session")


def test_a_cycle_refreshes_each_partition_once_and_again_after_work_under_its_lease(tmp_path, clock, monkeypatch):
    """One snapshot refresh per idle partition per cycle, shared by retention's check, the ranking, VACUUM's check
    and the metrics; a partition retention worked on (under its lease) is read again, so the cycle's metrics show
    what its retention did."""
    store = Store(tmp_path / "store", clock=clock, config={"background.threads": 4})
    make_segments(store, clock, "old", 3, step_ms=HOUR, **{"retention.ms": 2 * HOUR})
    store.create_topic("idle", 3, config={"cleanup.policy": "compact"})
    for p in range(3):
        store.append("idle", p, pa.table({"key": [b"k"], "value": [b"v"]}))
    cleaner = store.log_cleaner()
    cleaner.spark = _no_spark
    refreshes: dict[tuple[str, int], int] = {}
    real = PartitionLog.snapshot

    def counted(self, version=None):
        if version is None:
            refreshes[(self.topic, self.partition)] = refreshes.get((self.topic, self.partition), 0) + 1
        return real(self, version)

    monkeypatch.setattr(PartitionLog, "snapshot", counted)
    cycle = cleaner.run_cycle()
    assert [r.log_start_offset for r in cycle.retention] == [2]
    assert all(refreshes[("idle", p)] == 1 for p in range(3)), refreshes
    assert refreshes[("old", 0)] > 1  # planned again under the lease, and read again after it
    row = {(m.topic, m.partition): m for m in cleaner.last_metrics.partitions}
    assert row[("old", 0)].log_start_offset == 2  # the metrics saw retention's commit
    refreshes.clear()
    cleaner.run_cycle()
    assert set(refreshes.values()) == {1}, refreshes  # nothing due: one look a partition
    assert not store.log_manager.in_cycle
    before = store.log("idle", 0).snapshot()  # outside a cycle every look refreshes
    store.append("idle", 0, pa.table({"key": [b"k2"], "value": [b"v"]}))
    assert store.log("idle", 0).snapshot().version == before.version + 1


def test_a_cycle_sees_the_uncleanable_marks_it_lists_and_makes(tmp_path, clock):
    store = Store(tmp_path / "store", clock=clock)
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    marks = store.log_cleaner().manager.uncleanable
    marks.mark("t", 0, ValueError("broken"), clock.now_ms())
    with marks.listed():
        assert marks.get("t", 0).message == "broken" and marks.get("t", 1) is None
        marks.mark("t", 1, ValueError("also broken"), clock.now_ms())
        assert marks.get("t", 1).message == "also broken"
        marks.reset("t", 0)
        assert marks.get("t", 0) is None
        assert [m.partition for m in marks.marks()] == [1]
    assert [m.partition for m in marks.marks()] == [1]
