"""Property-based: random appends (with tombstones), rolls, clock advances and cleans, compared after every
clean with a small pure-Python model of the rules of Kafka's ``Cleaner`` (``buildOffsetMap``, ``shouldRetainRecord``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltalog import ManualClock, Record, Store

DELETE_RETENTION_MS = 1_000
TOPIC = "model"


@dataclass
class ModelRecord:
    offset: int
    key: bytes
    value: bytes | None
    horizon: int | None = None


@dataclass
class ModelLog:
    """The cleaner's rules with an unbounded map, nothing else."""

    records: list[ModelRecord] = field(default_factory=list)
    log_end: int = 0
    active_base: int = 0
    checkpoint: int = 0

    def append(self, batch: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in batch:
            self.records.append(ModelRecord(self.log_end, key, value))
            self.log_end += 1

    def roll(self) -> None:
        if self.log_end > self.active_base:
            self.active_base = self.log_end

    def clean(self, now: int) -> None:
        start, end = self.checkpoint, self.active_base
        if end <= start:
            return
        latest = {r.key: r.offset for r in self.records if start <= r.offset < end}
        kept = []
        for r in self.records:
            if r.offset >= end:
                kept.append(r)
                continue
            if r.offset < latest.get(r.key, r.offset):
                continue  # superseded by a later record of the same key
            if r.value is None:
                if r.horizon is not None and r.horizon <= now:
                    continue  # the tombstone's delete horizon has passed
                if r.horizon is None:
                    r.horizon = now + DELETE_RETENTION_MS
            kept.append(r)
        self.records = kept
        self.checkpoint = end


keys = st.sampled_from([b"a", b"b", b"c", b"d"])
values = st.one_of(st.none(), st.sampled_from([b"1", b"2", b"3"]))
operation = st.one_of(
    st.tuples(st.just("append"), st.lists(st.tuples(keys, values), min_size=1, max_size=4)),
    st.tuples(st.just("roll"), st.none()),
    st.tuples(st.just("advance"), st.integers(min_value=1, max_value=1_500)),
    st.tuples(st.just("clean"), st.none()),
)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(ops=st.lists(operation, min_size=3, max_size=14))
def test_cleaner_matches_the_model(ops, tmp_path_factory, spark):
    clock = ManualClock(0)
    store = Store(tmp_path_factory.mktemp("model"), clock=clock, spark=spark)
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "delete.retention.ms": str(DELETE_RETENTION_MS)})
    model = ModelLog()
    for name, arg in [*ops, ("roll", None), ("append", [(b"z", b"tail")]), ("clean", None)]:
        if name == "append":
            offsets = store.append(TOPIC, 0, [Record(key=k, value=v) for k, v in arg])
            assert offsets == list(range(model.log_end, model.log_end + len(arg)))
            model.append(arg)
        elif name == "roll":
            store.roll(TOPIC, 0)
            model.roll()
        elif name == "advance":
            clock.advance(arg)
        else:
            store.clean_partition(TOPIC, 0, force=True)
            model.clean(clock.now_ms())
            actual = [(r.offset, r.key, r.value, r.delete_horizon_ms) for r in store.read(TOPIC, 0, 0)]
            expected = [(r.offset, r.key, r.value, r.horizon) for r in model.records]
            assert actual == expected
            assert store.describe(TOPIC)[0].first_dirty_offset == max(model.checkpoint, 0)
