"""The store's own clock: the time the object store (or the local disk) gives the files written to it.

Kafka's transaction coordinator stamps a transaction's start, and decides its timeout, on its own clock
(``TransactionMetadata.txnStartTimestamp`` from the coordinator's ``time.milliseconds()``, compared with the same
clock by ``TransactionStateManager.timedOutTransactions``); the producer's clock never enters. deltalog has no
coordinator process: the producer and the cleaner each run the coordinator's steps, on machines whose clocks may
disagree by hours. What every process sharing a store does agree on is the time the store stamps on what is
written to it: S3's, Azure's and GCS's ``Last-Modified``, a local disk's modification time (the OS clock of
the machine holding the disk). That is the coordinator's clock here.

Reading it costs a write: :meth:`StoreClock.now_ms` puts a tiny probe file and reads back the time the store
gave it. Object stores keep ``Last-Modified`` to the second, so on them the clock moves in whole seconds
(Kafka's default ``transaction.timeout.ms`` is a minute).
"""

from __future__ import annotations

from deltalog.errors import StorageError
from deltalog.storage import Storage

#: Where the probe goes; the same file for every process of the store (its content is only the last writer's).
PROBE = ("_deltalog", "producers", "store-clock")


class StoreClock:
    """A :class:`~deltalog.clock.Clock` that reads the store's time (see the module docstring)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.location = storage.location(*PROBE)

    def now_ms(self) -> int:
        self.storage.write_bytes(self.location, b"the store's clock: this file's modification time\n")
        info = self.storage.info(self.location)
        if info is None:  # written a moment ago: only a store that loses writes says so
            raise StorageError(f"{self.location} was written and then not found; the store's clock cannot be read "
                               "(check that the store keeps what is written to it)")
        return info.modified_ms

    def __repr__(self) -> str:
        return f"StoreClock({self.storage.root!r})"
