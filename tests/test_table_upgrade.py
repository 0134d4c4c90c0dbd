"""A partition table an earlier deltalog made gets this version's table properties and description when a store
of this version first opens it (``deltalog.log.table_upgrade``): once, as deltalog's own commits, cheaply, safely
with several processes at once, and never failing a read where the store may only be read."""

from __future__ import annotations

import logging
import threading

import pytest
from deltalake import DeltaTable

from deltalog import Record, Store
from deltalog.config import TopicConfig
from deltalog.log import delta, delta_retention, foreign_commits, table_upgrade
from deltalog.storage import Storage

OLD_RETENTION = {delta_retention.DELETED_FILE_RETENTION: "interval 1 hour"}


def _as_an_earlier_deltalog_left_it(store: Store, topic: str, extra: dict[str, str] | None = None) -> str:
    """Replace partition 0 of ``topic`` with a table made the way deltalog made them before the engine properties,
    the retention properties and the description existed (with one record, appended by this version)."""
    log = store.log(topic, 0)
    store.storage.delete_many([f.location for f in store.storage.list_files(log.uri)])
    config = TopicConfig.from_properties({"cleanup.policy": "compact"})
    props = {delta.PROP_TOPIC: topic, delta.PROP_PARTITION: "0", delta.PROP_FORMAT: delta.FORMAT_VERSION,
             **{delta.CONFIG_PREFIX + k: v for k, v in config.to_properties().items()}, **(extra or {})}
    delta.create_table(store.storage, log.uri, props,
                       {delta.TXN_LOG_END_OFFSET: 0, delta.TXN_LOG_START_OFFSET: 0, delta.TXN_ACTIVE_SEGMENT: 0})
    meta = DeltaTable(log.uri, storage_options=store.storage.delta_options).metadata()
    assert not table_upgrade.is_current(meta.configuration, meta.description, topic, 0)
    return log.uri


def _upgrades(uri: str, options: dict[str, str] | None = None) -> list[dict]:
    return [h for h in DeltaTable(uri, storage_options=options).history()
            if h.get("deltalog.operation") == table_upgrade.OPERATION]


def _assert_current(uri: str, topic: str, options: dict[str, str] | None = None) -> dict[str, str]:
    meta = DeltaTable(uri, storage_options=options).metadata()
    assert table_upgrade.is_current(meta.configuration, meta.description, topic, 0)
    assert meta.description == delta.table_description(topic, 0)
    for key, value in delta.ENGINE_PROPERTIES.items():
        assert meta.configuration[key] == value
    return meta.configuration


def test_what_is_stale_engine_properties_set_retention_only_added():
    wanted = {delta.SET_TXN_RETENTION: "interval 5 milliseconds", **delta_retention.table_properties(60_000),
              "deltalog.topic.retention.ms": "5"}
    old = {delta.PROP_TOPIC: "t", "delta.enableDeletionVectors": "true", **OLD_RETENTION}
    stale = table_upgrade.stale_properties(old, wanted)
    assert stale["delta.enableDeletionVectors"] == "false" and stale["deltalog.other_engines"]
    assert delta_retention.DELETED_FILE_RETENTION not in stale  # another engine's (tolerated) value stays
    assert stale[delta_retention.LOG_RETENTION] == wanted[delta_retention.LOG_RETENTION]
    assert stale[delta.SET_TXN_RETENTION] == "interval 5 milliseconds"
    assert "deltalog.topic.retention.ms" not in stale  # a config the table does not name keeps the default
    assert table_upgrade.stale_properties({**old, **stale}, wanted) == {}


def test_an_earlier_deltalogs_table_is_brought_up_to_date_once_as_deltalogs_own_commits(tmp_path):
    store = Store(str(tmp_path / "store"))
    store.create_topic("t", 1)
    uri = _as_an_earlier_deltalog_left_it(store, "t", OLD_RETENTION)
    reopened = Store(store.root)
    assert reopened.read("t", 0, 0) == []  # a read is what opens it first
    props = _assert_current(uri, "t")
    assert props[delta_retention.DELETED_FILE_RETENTION] == "interval 1 hour"  # kept, as read back before
    assert reopened.topic_config("t").file_delete_delay_ms == 3_600_000
    assert props[delta.SET_TXN_RETENTION] == f"interval {TopicConfig().producer_id_expiration_ms} milliseconds"
    upgrades = _upgrades(uri)
    assert [h["operation"] for h in upgrades] == ["UPDATE TABLE METADATA", "SET TBLPROPERTIES"]
    assert all(foreign_commits.classify(h) == foreign_commits.DELTALOG for h in upgrades)
    assert [e.kind for e in reopened.history("t", 0)] == ["upgrade_table", "upgrade_table", "create"]
    # once: other stores of this version open it and commit nothing; the log works as before
    version = DeltaTable(uri).version()
    third = Store(store.root)
    assert third.append("t", 0, [Record(b"k", b"v")]) == [0]
    assert [r.value for r in Store(store.root).read("t", 0, 0)] == [b"v"]
    assert DeltaTable(uri).version() == version + 1


def test_two_processes_upgrading_at_once_make_one_upgrade(tmp_path):
    store = Store(str(tmp_path / "store"))
    store.create_topic("t", 1)
    uri = _as_an_earlier_deltalog_left_it(store, "t")
    stores = [Store(store.root) for _ in range(4)]  # each with its own table handle, as a process has
    start, errors = threading.Barrier(len(stores)), []

    def open_and_append(s: Store) -> None:
        start.wait()
        try:
            s.append("t", 0, [Record(b"k", b"v")])
        except Exception as e:  # noqa: BLE001 - collected for the assertion below
            errors.append(e)

    threads = [threading.Thread(target=open_and_append, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _assert_current(uri, "t")
    assert len(_upgrades(uri)) == 2  # one properties commit, one description commit: the losers found it done
    assert sorted(r.offset for r in store.read("t", 0, 0)) == [0, 1, 2, 3]


def test_read_only_credentials_read_an_earlier_deltalogs_table_as_it_is(faulty_s3, fault_proxy, caplog):
    uri, options = faulty_s3
    writer = Store(uri, storage_options=options)
    writer.create_topic("t", 1)
    table = _as_an_earlier_deltalog_left_it(writer, "t")
    writer.append("t", 0, [Record(b"k", b"v")])  # this store can write: its first open upgraded the table
    _assert_current(table, "t", options)
    Storage(uri, options).delete_many([f.location for f in Storage(uri, options).list_files(table)])
    table = _as_an_earlier_deltalog_left_it(writer, "t")  # an old table again, with nothing in it
    before = DeltaTable(table, storage_options=options).version()
    for method in ("PUT", "POST", "DELETE"):  # what read-only credentials are refused
        fault_proxy.add(method=method, key="", when="before", action="403", times=None)
    with caplog.at_level(logging.WARNING, logger=table_upgrade.__name__):
        reader = Store(uri, storage_options=options, create=False)
        assert reader.read("t", 0, 0) == []
        assert reader.describe("t")[0].log_end_offset == 0
    assert fault_proxy.faulted()  # it did try
    assert DeltaTable(table, storage_options=options).version() == before
    assert [r for r in caplog.records if "could not bring the partition table" in r.getMessage()]
    fault_proxy.clear()
    Store(uri, storage_options=options).log("t", 0).table()  # the next process that can write upgrades it
    _assert_current(table, "t", options)


@pytest.mark.parametrize("kept", [True, False])
def test_a_current_table_costs_no_commit(tmp_path, kept):
    store = Store(str(tmp_path / "store"))
    store.create_topic("t", 1, config={"file.delete.delay.ms": 1000} if kept else None)
    uri = store.log("t", 0).uri
    version = DeltaTable(uri).version()
    Store(store.root).read("t", 0, 0)
    assert DeltaTable(uri).version() == version and _upgrades(uri) == []
