"""A partition's log positions read once per process and then from the new commits only (log/app_txns.py), always
equal to what delta-rs's own replay says."""

from __future__ import annotations

import shutil

import pyarrow as pa

from deltalog import Record, Store
from deltalog.log import app_txns, delta
from deltalog.log.partition_log import snapshot_of

POSITIONS = (delta.TXN_LOG_END_OFFSET, delta.TXN_LOG_START_OFFSET, delta.TXN_ACTIVE_SEGMENT,
             delta.TXN_ACTIVE_SEGMENT_OPENED, delta.TXN_CLEANER_CHECKPOINT)


def delta_rs(store, topic, partition):
    dt = delta.open_table(store.storage, store.log(topic, partition).uri)
    return {a: dt.transaction_version(a) for a in POSITIONS}


def positions(store, topic, partition):
    plog = store.log(topic, partition)
    dt = delta.open_table(store.storage, plog.uri)
    return app_txns.txn_versions(dt, store.storage, plog.uri, POSITIONS)


def test_positions_follow_appends_rolls_deletes_and_checkpoints(tmp_path, clock):
    store = Store(tmp_path / "store", clock=clock)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    app_txns.forget()
    for i in range(3):
        store.append("t", 0, [Record(f"k{i}", "v")])
        assert positions(store, "t", 0) == delta_rs(store, "t", 0)  # incrementally, from the cached version
    store.roll("t", 0)
    store.append("t", 0, [Record("k", "v")])
    store.delete_records("t", 0, 2)
    assert positions(store, "t", 0) == delta_rs(store, "t", 0)
    assert positions(store, "t", 0)[delta.TXN_LOG_START_OFFSET] == 2
    # a checkpoint, then a cold read (a fresh process) from it and the commits after
    delta.open_table(store.storage, store.log("t", 0).uri).create_checkpoint()
    store.append("t", 0, [Record("after", "checkpoint")])
    app_txns.forget()
    assert positions(store, "t", 0) == delta_rs(store, "t", 0)
    assert positions(store, "t", 0)[delta.TXN_LOG_END_OFFSET] == 5


def test_a_topic_created_again_at_the_same_place_is_read_afresh(tmp_path, clock):
    store = Store(tmp_path / "store", clock=clock)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    store.append("t", 0, pa.table({"key": [b"a", b"b", b"c"], "value": [b"1", b"2", b"3"]}))
    first = positions(store, "t", 0)
    assert first[delta.TXN_LOG_END_OFFSET] == 3
    store.delete_topic("t")
    shutil.rmtree(tmp_path / "store" / "topics" / "t", ignore_errors=True)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record("only", "one")])  # the same version as before, another table
    assert positions(store, "t", 0) == delta_rs(store, "t", 0)
    assert positions(store, "t", 0)[delta.TXN_LOG_END_OFFSET] == 1


def test_a_version_older_than_the_one_read_asks_delta_rs(tmp_path, clock):
    store = Store(tmp_path / "store", clock=clock)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    for i in range(3):
        store.append("t", 0, [Record(f"k{i}", "v")])
    plog = store.log("t", 0)
    assert plog.snapshot().log_end_offset == 3
    old = plog.table_at(1)
    snap = snapshot_of(old, "t", 0, store.storage, plog.uri)
    assert snap.version == 1 and snap.log_end_offset == 1
