"""The transactional rows: what Kafka's exactly-once costs here, side by side with the same work done
without transactions.

* **Transactional produce** (row 13): the append batches of row 6 produced to 3 partitions (Kafka's partitioner)
  in one transaction (``begin_transaction``, every batch through ``send``, ``commit_transaction``: the records,
  then the coordinator's decision, then one COMMIT marker per partition) vs ``store.produce`` of the same
  batches. Target <= 1.5x.
* **Cleaning with aborted data** (row 14): one partition written by a transactional producer, one batch per
  transaction and every tenth transaction aborted (10% of the records), vs the same batches appended without
  transactions; a forced pass over each (fresh copies every round). Target <= 1.2x. The transactional pass
  also reads the producer columns, drops the aborted records whatever their keys and stamps the markers.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from benchmarks.check import BenchmarkFailure
from deltalog.log.record import KEY, VALUE

if TYPE_CHECKING:
    from benchmarks.runner import Bench

TXN_PRODUCE = "transactional producer.send + commit, 3 partitions"
PLAIN_PRODUCE = "store.produce, 3 partitions"
TXN_CLEAN = "clean pass, 10% aborted transactions"
PLAIN_CLEAN = "clean pass, same log without transactions"
TOPIC = "txn"
#: One transaction in ten is aborted.
ABORT_EVERY = 10


def produce_in_transaction(bench: Bench, arrow: list[pa.Table], n: int) -> None:
    """Row 13's transactional side (its baseline, ``store.produce``, is timed by ``Bench.produces``)."""
    store = bench.store(bench.fresh("produce-transactional"))
    store.create_topic("produce", 3, config={"cleanup.policy": "compact"})
    producer = store.producer(transactional_id="bench")
    producer.init_transactions()

    def run() -> None:
        producer.begin_transaction()
        for b in arrow:
            producer.send("produce", b)
        producer.commit_transaction()

    def check() -> None:
        logs = [store.log("produce", p) for p in range(3)]
        got = sum(log.head().log_end_offset for log in logs)
        committed = sum(len(log.read_table(0, isolation_level="read_committed")) for log in logs)
        if got != n + 3 or committed != n:
            raise BenchmarkFailure(f"the transaction left {got} offsets and {committed} committed records in 3 "
                                   f"partitions, expected {n} records and 3 markers")

    bench._time(TXN_PRODUCE, run, check)


class AbortedLogs:
    """The two pristine stores of row 14, written once: the same batches with and without transactions."""

    def __init__(self, bench: Bench) -> None:
        w = bench.w
        self.bench = bench
        rng = np.random.default_rng(w.seed + 15)
        # Four times the appends (800,000 records on the small preset): a pass long enough that the fixed cost of
        # its two Spark jobs does not decide the ratio.
        records = max(4 * w.append_records, w.append_batch * ABORT_EVERY)
        batches = records // w.append_batch
        keys = rng.integers(0, w.keys, size=batches * w.append_batch)
        values = rng.integers(0, 256, size=(batches * w.append_batch, w.value_bytes), dtype=np.uint8)
        self.batches = []
        for i in range(batches):
            sl = slice(i * w.append_batch, (i + 1) * w.append_batch)
            key_col = pa.array([f"k{k:010d}".encode() for k in keys[sl]], pa.binary())
            flat = values[sl].reshape(-1)
            offsets = np.arange(0, flat.size + 1, w.value_bytes, dtype=np.int32)
            value_col = pa.BinaryArray.from_buffers(pa.binary(), len(key_col),
                                                    [None, pa.py_buffer(offsets), pa.py_buffer(flat)])
            self.batches.append(pa.table({KEY: key_col, VALUE: value_col}))
        self.aborted = {i for i in range(batches) if i % ABORT_EVERY == ABORT_EVERY - 1}
        self.txn_root = bench.fresh("aborted-pristine-txn")
        self.plain_root = bench.fresh("aborted-pristine-plain")
        self._write()
        self.expected_txn = self._latest(skip_aborted=True)
        self.expected_plain = self._latest(skip_aborted=False)

    def _write(self) -> None:
        txn = self.bench.store(self.txn_root)
        plain = self.bench.store(self.plain_root)
        for store in (txn, plain):
            store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact"})
        producer = txn.producer(transactional_id="bench-aborts")
        producer.init_transactions()
        for i, b in enumerate(self.batches):
            producer.begin_transaction()
            producer.send(TOPIC, b, partition=0)
            producer.abort_transaction() if i in self.aborted else producer.commit_transaction()
            plain.append(TOPIC, 0, b)
        for store in (txn, plain):
            store.roll(TOPIC, 0)  # every record in a closed segment: the pass cleans the whole log

    def _latest(self, *, skip_aborted: bool) -> int:
        """How many keys have a live latest value (what a pass leaves, tombstones aside: there are none)."""
        keys: set[bytes] = set()
        for i, b in enumerate(self.batches):
            if skip_aborted and i in self.aborted:
                continue
            keys.update(b.column(KEY).to_pylist())
        return len(keys)

    def time_passes(self, rnd: int) -> None:
        # The two passes swap places every round: whichever runs second follows the other's untimed check (a
        # read of the whole table), and that alone moved the ratio by 10-15% on a quiet machine.
        cases = [(TXN_CLEAN, self.txn_root, self.expected_txn), (PLAIN_CLEAN, self.plain_root, self.expected_plain)]
        for name, root, expected in cases if rnd % 2 == 0 else cases[::-1]:
            copy = self.bench.fresh(f"aborted-clean-{'txn' if root == self.txn_root else 'plain'}")
            shutil.copytree(root, copy)
            store = self.bench.store(copy, now_ms=self.bench.store(root).clock.now_ms() + 1 + rnd)
            holder: dict[str, Any] = {}

            def run(store: Any = store, holder: dict[str, Any] = holder) -> None:
                holder["result"] = store.clean_partition(TOPIC, 0, force=True)

            def check(store: Any = store, expected: int = expected, copy: str = copy) -> None:
                rows = store.log(TOPIC, 0).read_table(0, isolation_level="read_committed")
                if rows.num_rows != expected or len(set(rows.column(KEY).to_pylist())) != expected:
                    raise BenchmarkFailure(f"{copy}: the pass left {rows.num_rows} committed records, expected the "
                                           f"latest of {expected} keys")
                shutil.rmtree(copy, ignore_errors=True)

            self.bench._time(name, run, check)


def cases(bench: Bench, rnd: int) -> None:
    """Row 14, once a round (row 13 runs inside ``Bench.produces``, beside its baseline)."""
    logs = getattr(bench, "_aborted_logs", None)
    if logs is None:
        logs = bench._aborted_logs = AbortedLogs(bench)
    logs.time_passes(rnd)
