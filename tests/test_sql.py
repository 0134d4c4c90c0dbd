"""SQL views: the current state matches a plain Python model before, during and after compaction."""

from __future__ import annotations

import json
import random

import pytest
from conftest import clean_with_small_map, map_slots_for

from deltalog import InvalidTopicError, Record, Store
from deltalog.cli import main

TOPIC = "fruit-prices"


def model_state(store: Store, topic: str) -> set[tuple[int, int, bytes, bytes]]:
    """The current state computed in Python from store.read: latest record per key per partition."""
    out = set()
    for p in store.partitions(topic):
        latest: dict[bytes, Record] = {}
        for r in store.read(topic, p, "earliest"):
            latest[r.key] = r
        out |= {(p, r.offset, r.key, r.value) for r in latest.values() if r.value is not None}
    return out


def view_state(store: Store, query: str) -> set[tuple[int, int, bytes, bytes]]:
    return {(r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in store.sql(query).collect()}


def produce(store: Store, rng: random.Random, n: int) -> None:
    for p in store.partitions(TOPIC):
        batch = []
        for _ in range(n):
            key = f"k{rng.randrange(12)}".encode()
            value = None if rng.random() < 0.2 else f"v{rng.randrange(1000)}".encode()
            batch.append(Record(key=key, value=value))
        store.append(TOPIC, p, batch)


@pytest.mark.slow
def test_current_state_before_during_and_after_compaction(tmp_path, clock, spark):
    # A tiny offset map (4 keys a pass) makes one pass clean only part of the dirty section: "during".
    store = Store(tmp_path / "s", clock=clock, spark=spark)
    store.create_topic(TOPIC, partitions=2, config={"cleanup.policy": "compact", "delete.retention.ms": 0})
    rng = random.Random(4)
    query = "SELECT * FROM fruit_prices_current"
    produce(store, rng, 40)
    assert view_state(store, query) == model_state(store, TOPIC)  # before: nothing cleaned yet
    for p in store.partitions(TOPIC):
        store.roll(TOPIC, p)
    produce(store, rng, 10)

    partial = store.log_cleaner(map_slots=map_slots_for(4)).clean_partition(TOPIC, 0)
    assert partial is not None and partial.end_offset < partial.first_uncleanable_offset  # a partial pass
    assert view_state(store, query) == model_state(store, TOPIC)  # during

    clean_with_small_map(store, 4, TOPIC)
    assert store.describe(TOPIC)[0].first_dirty_offset > 0
    assert view_state(store, query) == model_state(store, TOPIC)  # after
    produce(store, rng, 15)  # new updates and tombstones for keys of the clean section
    assert view_state(store, query) == model_state(store, TOPIC)
    df = store.current_state(TOPIC)
    assert {"key", "value", "offset", "partition", "timestamp_ms"} <= set(df.columns)
    assert df.count() == len(model_state(store, TOPIC))


def test_full_log_view_and_clean_section_is_not_deduplicated_again(spark_store, clock):
    store = spark_store
    store.create_topic(TOPIC, partitions=2, config={"cleanup.policy": "compact"})
    for key, value in [(b"grape", b"2.69"), (b"lime", b"0.49"), (b"grape", None), (b"lime", b"1.59")]:
        store.append(TOPIC, 0, [Record(key=key, value=value)])
    store.append(TOPIC, 1, [Record(key=b"lime", value=b"9.99")])  # keys are partition-local
    rows = store.sql("SELECT partition, offset FROM fruit_prices ORDER BY partition, offset").collect()
    assert [tuple(r) for r in rows] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    assert view_state(store, "SELECT * FROM `fruit_prices_current`") == model_state(store, TOPIC)

    store.roll(TOPIC, 0)
    assert store.clean_partition(TOPIC, 0) is not None
    snap = store.log(TOPIC, 0).snapshot()
    assert snap.first_dirty_offset == snap.log_end_offset  # everything is in the clean section
    from deltalog.sql.views import partition_current_state

    plan = partition_current_state(store.spark, store.log(TOPIC, 0), snap)._jdf.queryExecution().optimizedPlan().toString()
    assert "Aggregate" not in plan and "Join" not in plan  # the clean section is read as it is
    assert view_state(store, "SELECT * FROM fruit_prices_current") == model_state(store, TOPIC)


def test_ambiguous_view_names_are_refused(spark_store):
    store = spark_store
    store.create_topic("a.b")
    store.create_topic("a_b")
    store.create_topic("c")
    with pytest.raises(InvalidTopicError, match="ambiguous"):
        store.sql("SELECT * FROM a_b")
    assert store.sql("SELECT count(*) AS n FROM c_current").collect()[0].n == 0


def test_cli_sql_prints_rows(spark_store, capsys):
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    store.append(TOPIC, 0, [Record(key=b"lime", value=b"0.49"), Record(key=b"lime", value=b"1.59")])
    code = main(["--store", store.root, "sql", "--engine", "spark", "--json",
                 "SELECT key, value, offset FROM fruit_prices_current"])
    out = capsys.readouterr().out
    assert code == 0 and [json.loads(line) for line in out.splitlines()] == [
        {"key": "lime", "value": "1.59", "offset": 1}
    ]
    assert main(["--store", store.root, "sql", "--engine", "spark", "SELECT nope FROM fruit_prices"]) == 1
