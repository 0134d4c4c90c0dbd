"""The fruit-prices walkthrough's events go in and come back with the offsets of the walkthrough."""

from deltalog import Record


def test_fruit_prices_offsets_and_segments(store, clock):
    store.create_topic("fruit-prices", partitions=1, config={"cleanup.policy": "compact"})
    assert store.append("fruit-prices", 0, [Record(key=b"grape", value=b"2.69")]) == [0]
    assert store.append("fruit-prices", 0, [Record(key=b"lime", value=b"0.49")]) == [1]
    assert store.append("fruit-prices", 0, [Record(key=b"grape", value=None)]) == [2]
    assert store.append("fruit-prices", 0, [Record(key=b"lime", value=b"1.59")]) == [3]
    clock.advance(7 * 24 * 3600 * 1000 + 1)  # segment.ms (7 days) passes: the next append rolls
    assert store.append("fruit-prices", 0, [Record(key=b"lime", value=b"1.99")]) == [4]

    records = store.read("fruit-prices", 0, from_offset=0)
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert records[2].value is None and records[2].key == b"grape"

    state = store.describe("fruit-prices")[0]
    assert [s.base_offset for s in state.segments] == [0, 4]
    assert state.active_segment_base_offset == 4
    assert state.log_end_offset == 5
    assert state.dirty_ratio == 1.0


def test_the_embedded_session_starts_the_cleaners_python_workers(spark):
    """The warm-up (run in the background when the embedded session starts) imports and runs the cleaner's task
    code in every core's Python worker; before a pass, it cleans a tiny partition per core in a store of its own
    (pass 1's and pass 2's jobs, shared by the round); both succeed."""
    from deltalog.spark import default_parallelism
    from deltalog.sql.session import WARM_JOB_GROUP, await_warm_up, warm_python_workers

    warm = warm_python_workers(spark)
    warm.join(timeout=180)
    assert warm.workers == default_parallelism(spark) and warm.passes is None  # the round waits for a pass
    assert await_warm_up(spark, warm) == warm.seconds
    assert warm.passes == default_parallelism(spark) and warm.seconds is not None
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(WARM_JOB_GROUP)]
    statuses = [j.status for j in jobs if j is not None]
    assert "SUCCEEDED" in statuses and "FAILED" not in statuses
