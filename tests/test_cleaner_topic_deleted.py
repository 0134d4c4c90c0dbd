"""A topic deleted under a running pass (Kafka's LogCleanerIntegrationTest, concurrent log cleanup and topic
deletion): the pass is aborted, not a fault; the loop returns and goes on with the other partitions. And a
failure whose cause chain loops back on itself cannot make the cleaner spin."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from deltalog import CorruptLogError, Record, Store
from deltalog.errors import DeltalogError, error_chain

#: Seconds a pass on a few records may take on a busy two-core machine before the test calls it hung.
HUNG_AFTER_S = 120


def dirty(store: Store, topic: str, partition: int, rounds: int = 2) -> None:
    for r in range(rounds):
        store.append(topic, partition, [Record(f"k{i}", f"v{r}") for i in range(3)])
        store.roll(topic, partition)
    store.append(topic, partition, [Record("active", "a")])


def returns_within(seconds: float, fn):
    """``fn()``'s outcome (its result, or the error it raised), failing the test if it has not returned after
    ``seconds`` (the thread is a daemon: a spinning cleaner does not keep the test run alive)."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} had not returned after {seconds} s"
    return outcome


def test_a_chain_of_causes_that_loops_back_is_walked_once():
    a, b = ValueError("a"), KeyError("b")
    a.__cause__, b.__context__ = b, a  # a -> b -> a
    assert list(error_chain(a)) == [a, b]
    c = DeltalogError("c")
    c.__cause__ = c  # raise c from c
    assert list(error_chain(c)) == [c]
    assert list(error_chain(None)) == []


@pytest.mark.subprocess
def test_a_pass_whose_topic_another_process_deletes_is_dropped_and_the_loop_moves_on(spark_store):
    """Kafka aborts the cleaning of a deleted log (LogCleanerManager.abortCleaning): no uncleanable mark, no
    failure; the cleaner thread goes on to the next log.

    The doomed partition's dirty section is one aborted transaction and its marker, which pass 1 maps without a
    Spark task, so the pass first finds the deleted files on the driver (the first record a group keeps), with
    the CorruptLogError the pass once made its own cause: the loop then spun for ever."""
    store = spark_store
    store.create_topic("doomed", 1, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    for r in range(2):
        store.append("doomed", 0, [Record(f"k{i}", f"v{r}") for i in range(3)])
        store.roll("doomed", 0)
    store.clean("doomed")
    producer = store.producer(transactional_id="doomed-writer")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("doomed", [Record("k0", "aborted")], partition=0)
    producer.abort_transaction()
    store.roll("doomed", 0)
    store.append("doomed", 0, [Record("active", "a")])
    store.create_topic("other", 1, config={"cleanup.policy": "compact"})
    dirty(store, "other", 0)
    deleted = []

    def listener(status) -> None:  # told as each pass starts, before it reads anything
        if status.state == "started" and status.partition == "doomed-0":
            deleted.append(status.partition)
            subprocess.run([sys.executable, "-c", f"from deltalog import Store; Store({str(store.root)!r})"
                            ".delete_topic('doomed')"], check=True, env={**os.environ}, timeout=HUNG_AFTER_S)

    cleaner = store.log_cleaner(progress=listener, threads=1)
    outcome = returns_within(HUNG_AFTER_S, cleaner.clean_filthiest_logs)
    assert "error" not in outcome, outcome.get("error")
    cleaning = outcome["result"]
    assert deleted == ["doomed-0"]  # the deletion did happen mid-pass
    assert "doomed" not in store.list_topics()
    assert [(c.topic, c.partition) for c in cleaning.cleans] == [("other", 0)]
    assert cleaning.failures == () and cleaning.errors == ()
    assert cleaner.manager.uncleanable.marks() == []
    left = [os.path.join(d, f) for d, _, files in os.walk(os.path.join(store.root, "topics", "doomed")) for f in files]
    assert left == []  # the aborted pass left nothing of its own in the deleted topic's place


def test_a_pass_failing_on_the_driver_with_a_deltalog_error_returns(spark_store):
    """Pass 2 reads a cleaned file on the driver (the first record a group keeps); when it is gone (its topic
    deleted, or the file lost) the pass fails with the CorruptLogError the read raised, which the pass once
    re-raised as its own cause: the walk for signs of a stopped Spark then went round for ever."""
    store = spark_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    dirty(store, "t", 0)
    store.clean("t")
    log = store.log("t", 0)
    cleaned = [f for f in log.snapshot().files if f.max_offset < log.snapshot().log_end_offset - 1]
    assert cleaned
    for f in cleaned:
        os.remove(os.path.join(log.uri, f.path))
    dirty(store, "t", 0)
    outcome = returns_within(HUNG_AFTER_S, lambda: store.log_cleaner().clean_partition("t", 0, force=True))
    error = outcome.get("error")
    assert isinstance(error, CorruptLogError), outcome
    assert error.__cause__ is not error
    assert "is missing" in str(error)
