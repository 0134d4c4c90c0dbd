"""The processes the harness starts and kills: ``python -m tooling.reliability.worker <role> '<json spec>'``.

* ``producer``: a :class:`~tooling.reliability.model.Producer` appending its workload for a number of
  batches or seconds, recording intents and acknowledgements in its side file;
* ``clean``: ``Store(location).clean()``, the Python API's way into the cleaning loop (the harness runs the
  other two, ``deltalog cleaner run`` and the job, as the commands they are).

Each writes a marker line to stderr once it is about to do its work (:data:`READY`), so a kill "at a random
moment" is timed from there rather than from the interpreter's start-up.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

#: The line a worker writes to stderr when its work starts.
READY = "tooling.reliability: ready"


def _store(spec: dict[str, Any]) -> Any:
    from deltalog.store import Store

    options = spec.get("storage_options")
    return Store(spec["store"], **({"storage_options": options} if options else {}))


def producer(spec: dict[str, Any]) -> int:
    from tooling.reliability.model import Producer, Workload

    store = _store(spec)
    p = Producer(store, spec["name"], spec["side"], Workload.from_json(spec["workload"]), seed=spec.get("seed"))
    for topic in p.workload.topics:  # open every partition first: the kill should land in appends, not imports
        for partition in range(p.workload.topics[topic]):
            store.log(topic, partition).head()
    print(READY, file=sys.stderr, flush=True)
    p.run(batches=spec.get("batches"), seconds=spec.get("seconds"))
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
