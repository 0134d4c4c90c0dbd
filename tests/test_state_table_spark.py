"""The state table through cleans (the Spark cleaner) and in the quality suites (Great Expectations on Spark)."""

from __future__ import annotations

import random

from deltalake import DeltaTable

from deltalog import Record


def test_state_table_stays_equal_through_cleans_and_the_quality_suite_proves_it(spark_store, clock):
    store = spark_store
    store.create_topic("t", 2, config={"cleanup.policy": "compact", "state.table.enable": "true",
                                       "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"})
    rnd = random.Random(7)
    for _ in range(2):
        for p in (0, 1):
            store.append("t", p, [Record(f"k{rnd.randrange(40)}", None if rnd.random() < 0.2 else "v")
                                  for _ in range(60)])
            store.roll("t", p)
        store.refresh_state("t", check=True)
        clock.advance(1000)
        # records the table has not applied yet get cleaned first: their keys' older records go
        for p in (0, 1):
            store.append("t", p, [Record(f"k{rnd.randrange(40)}", "late") for _ in range(20)])
            store.roll("t", p)
        store.clean("t")
        assert store.compare_state("t").equal
    store.refresh_state("t", check=True)
    comparison = store.compare_state("t")
    assert comparison.equal and comparison.pending_keys == 0
    result = store.check("t", save=False)
    [state_suite] = [s for s in result.suites if s.suite == "state"]
    assert state_suite.success and result.success, result.summary()
    DeltaTable(store.state_table_location("t")).delete("partition = 0")  # another engine breaks it
    result = store.check("t", save=False)
    [state_suite] = [s for s in result.suites if s.suite == "state"]
    assert not state_suite.success
    assert state_suite.expectations[0].unexpected_count == len([k for k in comparison.details.to_pylist()
                                                                if k["partition"] == 0])
    assert "state table, state suite" in result.summary()
