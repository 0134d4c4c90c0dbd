"""The processes the harness starts and kills: ``python -m tooling.reliability.worker <role> '<json spec>'``.

* ``producer``: a :class:`~tooling.reliability.model.Producer` appending its workload for a number of
  batches or seconds, recording intents and acknowledgements in its side file. Options of the spec, for the
  attacks (:mod:`tooling.reliability.attacks`): ``mode`` (``append``, the default; ``idempotent``: Kafka's
  idempotent producer, ``store.producer()``; ``transactional``: one transaction per batch, with
  ``transactional_id`` and ``transaction_timeout_ms``), ``clock_offset_ms`` (the process's store clock runs that
  far ahead, or behind when negative, of the wall clock: clock skew between machines), ``tolerate`` (a failed
  send is written to the side file and the producer goes on), and ``open_transaction`` (after its batches a
  transactional producer opens one more transaction, sends a batch in it, and then ``"die"``: SIGKILLs itself;
  or ``"wait:<path>"``: waits for that file, then commits, printing the outcome as a JSON line);
* ``clean``: ``Store(location).clean()``, the Python API's way into the cleaning loop (the harness runs the
  other two, ``deltalog cleaner run`` and the job, as the commands they are).

Each writes a marker line to stderr once it is about to do its work (:data:`READY`), so a kill "at a random
moment" is timed from there rather than from the interpreter's start-up.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from typing import Any

#: The line a worker writes to stderr when its work starts.
READY = "tooling.reliability: ready"


#: The line a transactional producer with ``open_transaction`` writes once its last transaction is open and
#: its batch in it acknowledged.
IN_TRANSACTION = "tooling.reliability: in transaction"


class SkewedClock:
    """The wall clock moved by ``offset_ms``: a process on a machine whose clock is off (NTP not running, a
    VM restored from a snapshot). Only the process's own store sees it; the other processes keep the wall
    clock, so the store's documents carry times from clocks that disagree, as they do across machines."""

    def __init__(self, offset_ms: int) -> None:
        self.offset_ms = int(offset_ms)

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms


def _store(spec: dict[str, Any]) -> Any:
    from deltalog.store import Store

    options = spec.get("storage_options")
    clock = SkewedClock(spec["clock_offset_ms"]) if spec.get("clock_offset_ms") else None
    return Store(spec["store"], **({"storage_options": options} if options else {}),
                 **({"clock": clock} if clock else {}))


def _kafka_send(kafka: Any, transactional: bool) -> Any:
    def send(topic: str, partition: int, records: list[Any]) -> list[int]:
        if transactional:
            kafka.begin_transaction()
        try:
            offsets = kafka.send(topic, records, partition=partition).offsets.tolist()
            if transactional:
                kafka.commit_transaction()
        except BaseException:
            if transactional:
                try:
                    kafka.abort_transaction()
                except Exception:  # noqa: BLE001 - the send's own error is the one to report
                    pass
            raise
        return offsets

    return send


def producer(spec: dict[str, Any]) -> int:
    from deltalog.errors import DeltalogError
    from tooling.reliability.model import Producer, Workload

    store = _store(spec)
    mode = spec.get("mode", "append")
    kafka = None
    send = None
    if mode in ("idempotent", "transactional"):
        configs: dict[str, Any] = {}
        if mode == "transactional":
            configs = {"transactional_id": spec["transactional_id"],
                       "transaction_timeout_ms": spec.get("transaction_timeout_ms", 60_000)}
        kafka = store.producer(**configs)
        if mode == "transactional":
            kafka.init_transactions()
        send = _kafka_send(kafka, mode == "transactional")
    tolerate = (Exception,) if spec.get("tolerate") else ()
    p = Producer(store, spec["name"], spec["side"], Workload.from_json(spec["workload"]), seed=spec.get("seed"),
                 send=send, tolerate=tolerate)
    for topic in p.workload.topics:  # open every partition first: the kill should land in appends, not imports
        for partition in range(p.workload.topics[topic]):
            try:
                store.log(topic, partition).head()
            except Exception:
                if not tolerate:
                    raise
    print(READY, file=sys.stderr, flush=True)
    p.run(batches=spec.get("batches"), seconds=spec.get("seconds"))
    if kafka is not None and kafka.producer_id is not None:  # the verdict checks no two producers got one id
        p.side.write({"producer_id": kafka.producer_id, "transactional_id": spec.get("transactional_id"),
                      "name": spec["name"]})
    opening = spec.get("open_transaction")
    if opening:
        assert kafka is not None and mode == "transactional"
        kafka.begin_transaction()
        p._send = lambda topic, partition, records: kafka.send(topic, records, partition=partition).offsets.tolist()
        p.batch(ack=False)
        print(IN_TRANSACTION, file=sys.stderr, flush=True)
        if opening == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        path = opening.split(":", 1)[1]
        deadline = time.monotonic() + 300
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            kafka.commit_transaction()
            p.acknowledge()
            print(json.dumps({"committed": True}), flush=True)
        except DeltalogError as e:
            print(json.dumps({"committed": False, "type": type(e).__name__, "message": str(e)[:2000]}), flush=True)
    p.close()
    return 0


def clean(spec: dict[str, Any]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    store = _store(spec)
    store.spark  # noqa: B018 - start the session before the marker: the kill should land in the cleaning
    print(READY, file=sys.stderr, flush=True)
    results = store.clean()
    print(json.dumps({"passes": len(results)}), flush=True)
    return 0


def main(argv: list[str]) -> int:
    role, spec = argv[0], json.loads(argv[1])
    return {"producer": producer, "clean": clean}[role](spec)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
