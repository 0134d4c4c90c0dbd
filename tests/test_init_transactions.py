"""init_transactions() once per producer, as Kafka's TransactionManager (INITIALIZING only from UNINITIALIZED): a
second call is refused with Kafka's IllegalStateException and changes nothing."""

from __future__ import annotations

import pytest

from deltalog import IllegalStateError, Record, Store
from deltalog.coordinator.transaction.transaction_coordinator import ONGOING, TransactionCoordinator
from tests.transaction_support import age_transactional_id


@pytest.fixture
def producer(store):
    store.create_topic("t", 1)
    p = store.producer(transactional_id="app")
    p.init_transactions()
    return p


def test_a_second_init_transactions_is_refused_and_bumps_nothing(store, producer):
    coordinator = TransactionCoordinator(store.log_manager)
    before = coordinator.describe("app")
    with pytest.raises(IllegalStateError, match=r"'app'.*from state READY to state INITIALIZING.*already called"):
        producer.init_transactions()
    after = coordinator.describe("app")
    assert (after.producer_id, after.producer_epoch) == (before.producer_id, before.producer_epoch)
    assert (producer.producer_id, producer.producer_epoch) == (before.producer_id, before.producer_epoch)
    producer.begin_transaction()  # the producer goes on as before: not fenced by itself
    producer.send("t", [Record("a", "1")])
    producer.commit_transaction()
    assert [r.value for r in store.read("t", 0, isolation_level="read_committed")] == [b"1"]


def test_a_second_init_transactions_inside_a_transaction_leaves_the_transaction_open(store, producer):
    producer.begin_transaction()
    producer.send("t", [Record("a", "1")])
    with pytest.raises(IllegalStateError, match="from state IN_TRANSACTION to state INITIALIZING"):
        producer.init_transactions()
    assert TransactionCoordinator(store.log_manager).describe("app").state == ONGOING
    producer.send("t", [Record("b", "2")])
    producer.commit_transaction()
    assert [r.value for r in store.read("t", 0, isolation_level="read_committed")] == [b"1", b"2"]


def test_a_new_producer_with_the_id_still_takes_it_over(store, producer):
    newer = store.producer(transactional_id="app")
    newer.init_transactions()
    assert newer.producer_epoch == producer.producer_epoch + 1


def test_a_producer_whose_id_expired_may_init_again(tmp_path, clock):
    day = 86_400_000
    store = Store(tmp_path / "s", clock=clock, config={"transactional.id.expiration.ms": day})
    store.create_topic("t", 1)
    p = store.producer(transactional_id="idle")
    p.init_transactions()
    old = p.producer_id
    age_transactional_id(store, "idle", 2 * day)  # unused for two days on the store's clock
    assert store.log_cleaner(metrics=False).maintenance.expire_transactional_ids() == ["idle"]
    p.init_transactions()  # the id no longer maps to this producer: it gets a new producer id
    assert p.producer_id != old and p.producer_epoch == 0
    p.begin_transaction()
    p.send("t", [Record("a", "1")])
    p.commit_transaction()
    assert [r.value for r in store.read("t", 0, isolation_level="read_committed")] == [b"1"]
