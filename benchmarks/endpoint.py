"""The Kafka endpoint's rows: a Kafka client no one here wrote (confluent-kafka, librdkafka) producing and consuming
through ``deltalog serve``'s endpoint, side by side with the Python API doing the same work in one process.

* **Produce** (row 18): the append batches' records (``append_records`` of the preset, keys and values as bytes)
  sent one by one with confluent-kafka's ``Producer.produce`` to one partition and flushed (librdkafka batches them;
  the endpoint appends one Delta commit per partition batch), vs ``store.produce`` of the same records as
  :class:`~deltalog.Record` s to one partition. Target <= 2.0x (at least half the throughput).
* **Consume** (row 19): the records read back from offset 0 with confluent-kafka's ``Consumer.consume`` (assigned,
  no group) through the endpoint's Fetch, vs ``store.read`` of the partition. Target <= 2.0x.

The endpoint is a ``deltalog serve`` process on an ephemeral loopback port, as it is deployed: the client's
Python loop and the endpoint's threads do not share one interpreter's lock (in one process each waited for the
other, and the endpoint's figure carried the client's). Besides the wall times, each produce side's CPU seconds are
kept (``endpoint_produce_cpu_s``: the ``deltalog serve`` process's; ``api_produce_cpu_s``: the harness's during
``store.produce``): on a loaded machine they move less than wall times do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from benchmarks.check import BenchmarkFailure
from benchmarks.workload import append_batches
from deltalog.log.record import KEY, VALUE, Record
from tooling.services import stop_process

if TYPE_CHECKING:
    from benchmarks.runner import Bench

ENDPOINT_PRODUCE = "confluent-kafka producer through the endpoint, 1 partition"
API_PRODUCE = "store.produce of the same records, 1 partition"
ENDPOINT_CONSUME = "confluent-kafka consumer through the endpoint"
API_READ = "store.read of the same partition"


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``, its own threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(root: str) -> tuple[subprocess.Popen[str], int]:
    """A ``deltalog serve`` process on ``root`` and its port, read from its health line."""
    proc = subprocess.Popen([sys.executable, "-m", "deltalog", "serve", "--store", root, "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline() if proc.stdout is not None else ""
    if "listening on 127.0.0.1:" not in line:
        proc.kill()
        proc.wait()
        raise BenchmarkFailure(f"deltalog serve did not start: {line!r}")
    return proc, int(line.split("listening on 127.0.0.1:")[1].split()[0])


def cases(bench: Bench, rnd: int) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    batches = append_batches(bench.w)
    pairs = [(k, v) for b in batches for k, v in zip(b.column(KEY).to_pylist(), b.column(VALUE).to_pylist(),
                                                    strict=True)]
    records = [Record(key=k, value=v) for k, v in pairs]
    n = len(pairs)
    api = bench.store(bench.fresh("endpoint-api"))
    api.create_topic("t", 1, config={"cleanup.policy": "compact"})
    wire = bench.store(bench.fresh("endpoint-wire"))
    wire.create_topic("t", 1, config={"cleanup.policy": "compact"})

    def ends(store: object, what: str) -> None:
        got = store.log("t", 0).head().log_end_offset  # type: ignore[attr-defined]
        if got != n:
            raise BenchmarkFailure(f"{what} left {got} records, expected {n}")

    server, port = _serve(wire.root)
    try:
        bootstrap = f"127.0.0.1:{port}"
        cpu: dict[str, float] = {}

        def run_wire() -> None:
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                                 "queue.buffering.max.messages": max(100_000, n)})
            if not producer.list_topics("t", 30).topics.get("t"):  # connected, metadata known, before the CPU count
                raise BenchmarkFailure("the endpoint's Metadata did not list topic t")
            started = _cpu_seconds(server.pid)
            for k, v in pairs:
                producer.produce("t", key=k, value=v, partition=0)
            if producer.flush(600) != 0:
                raise BenchmarkFailure("confluent-kafka's producer did not deliver every record")
            cpu["endpoint"] = _cpu_seconds(server.pid) - started

        def run_api() -> None:
            started = time.process_time()
            api.produce("t", records, partition=0)
            cpu["api"] = time.process_time() - started

        bench._time(ENDPOINT_PRODUCE, run_wire, lambda: ends(wire, "the endpoint"))
        bench._time(API_PRODUCE, run_api, lambda: ends(api, "store.produce"))
        bench.t.figures.setdefault("endpoint_produce_cpu_s", []).append(round(cpu["endpoint"], 3))
        bench.t.figures.setdefault("api_produce_cpu_s", []).append(round(cpu["api"], 3))
        got: dict[str, int] = {}

        def run_consume() -> None:
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                                 "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760})
            consumer.assign([TopicPartition("t", 0, 0)])
            count = 0
            while count < n:
                msgs = consumer.consume(10_000, 10.0)
                if not msgs:
                    break
                count += sum(1 for m in msgs if m.error() is None)
            consumer.close()
            got["wire"] = count

        def run_read() -> None:
            got["api"] = len(api.read("t", 0))

        def counted(side: str) -> None:
            if got.get(side) != n:
                raise BenchmarkFailure(f"{side} read {got.get(side)} records, expected {n}")

        bench._time(ENDPOINT_CONSUME, run_consume, lambda: counted("wire"))
        bench._time(API_READ, run_read, lambda: counted("api"))
    finally:
        stop_process(server, 30)
    bench.t.figures["endpoint_records"] = n
