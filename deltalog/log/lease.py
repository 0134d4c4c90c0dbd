"""Partition leases: at most one maintenance operation (cleaning, retention, VACUUM) on a partition at a time.

Kafka keeps this rule with an in-memory state machine (``LogCleanerManager.inProgress`` and its
``LogCleaningState``s: retention pauses the cleaner, the cleaner marks a partition InProgress). deltalog's
cleaner runs as scheduled jobs, possibly two overlapping runs in different processes or on different
machines, so the state lives in files beside the data, through :class:`~deltalog.storage.Storage`::

    <root>/_deltalog/leases/<topic>/<partition>/<generation>.lease     {"owner", "purpose", "expires_ms", ...}

The holder is the owner of the highest generation, unless that lease is expired or released. A lease is
taken by creating generation ``g + 1`` with a conditional put (create only if absent: ``If-None-Match: *`` on
an object store, a hard link on a local disk) after reading generation ``g`` and finding it free (or finding
none), so of two processes racing for the same partition exactly one creates the file. Generations only
grow: a release rewrites the holder's own file as released rather than deleting it, so a generation number is
never created twice, and a process that read a stale listing finds a higher generation after its create and
gives up. Superseded generations are deleted by the next holder. A process that died leaves a lease that
expires after its TTL (or at once, when its pid is gone from this machine) and is then taken over the same
way. Nothing here needs ``flock``, ``rename`` or ``O_EXCL``, so it works on S3, Azure and GCS as on a disk.

Expiry is measured with the store's injected clock. A holder renews its lease (:meth:`Lease.renew`, or a
heartbeat thread for long Spark passes) by rewriting its own generation's file; one that fails to renew
within the TTL may be taken over, and then Delta's conflict detection is what keeps the data safe: two
commits that remove the same files, or carry the same app id, cannot both succeed. The lease is there so
that the work is never done twice at once, not as the last line of defence.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from deltalog.clock import Clock
from deltalog.errors import InvalidConfigError, PartitionBusyError, StorageFullError
from deltalog.storage import Storage, as_storage, basename

log = logging.getLogger(__name__)

LEASES_DIR = ("_deltalog", "leases")
#: A lease not renewed for this long may be taken over. Long passes renew it from a heartbeat thread.
DEFAULT_LEASE_TTL_MS = 10 * 60 * 1000
_SUFFIX = ".lease"
_READ_ATTEMPTS = 5
#: The owner shown for a lease file that cannot be parsed.
UNREADABLE = "<unreadable>"
#: How long a lease file that cannot be read still holds its partition (see :meth:`LeaseManager._read`).
UNREADABLE_GRACE_MS = 5_000


def default_owner() -> str:
    """``host:pid:nonce``: unique per process and per :class:`LeaseManager`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class LeaseInfo:
    """What a lease file says: who holds the partition, for what, and until when."""

    owner: str
    purpose: str
    acquired_ms: int
    expires_ms: int
    generation: int
    released: bool = False

    def expired(self, now_ms: int) -> bool:
        return now_ms >= self.expires_ms

    def abandoned(self) -> bool:
        """The holder was a process on this machine that no longer exists (it crashed or was killed).

        Such a lease need not wait out its TTL: Kafka's in-progress state dies with the broker, and a
        scheduled job that crashed should not block the next run. A holder on another machine, or a pid
        that now belongs to some other process, keeps its lease until it expires (the safe direction).
        """
        return owner_is_dead(self.owner)

    def free(self, now_ms: int) -> bool:
        """Whether the lease may be taken: released, expired, or abandoned by a dead local process."""
        return self.released or self.expired(now_ms) or self.abandoned()


def owner_is_dead(owner: str) -> bool:
    """Whether ``owner`` (``host:pid:nonce``, :func:`default_owner`) was a process of this machine that no
    longer exists. An owner on another machine, or a pid now used by another process, counts as alive."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists but belongs to someone else
        return False
    return False


class Lease:
    """A held lease. Release it (or leave the ``with`` block of :meth:`LeaseManager.hold`) when done."""

    def __init__(self, manager: LeaseManager, topic: str, partition: int, purpose: str, generation: int,
                 acquired_ms: int) -> None:
        self.manager = manager
        self.topic = topic
        self.partition = partition
        self.purpose = purpose
        self.generation = generation
        self.acquired_ms = acquired_ms
        self.released = False
        self._heartbeat_stop: threading.Event | None = None
        self._heartbeat: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"Lease({self.topic}-{self.partition}, {self.purpose}, gen={self.generation}, {self.manager.owner})"

    @property
    def path(self) -> str:
        return self.manager._file(self.topic, self.partition, self.generation)

    def still_held(self) -> bool:
        """True while this lease's file is ours and no later generation exists."""
        if self.released:
            return False
        gens = self.manager._generations(self.topic, self.partition)
        if not gens or gens[-1] != self.generation:
            return False
        info = self.manager._read(self.topic, self.partition, self.generation)
        return info is not None and info.owner == self.manager.owner and not info.released

    def renew(self) -> None:
        """Push the expiry to now + TTL. Raises :class:`PartitionBusyError` if the lease was lost."""
        if not self.still_held():
            raise PartitionBusyError(
                f"lease on {self.topic}-{self.partition} for {self.purpose} was lost (expired and taken over, "
                f"or released); the operation must stop"
            )
        now = self.manager.clock.now_ms()
        self.manager.storage.write_json(self.path, self._payload(now), indent=None)

    def _payload(self, now_ms: int, *, released: bool = False) -> dict[str, object]:
        payload: dict[str, object] = {
            "owner": self.manager.owner, "purpose": self.purpose, "acquired_ms": self.acquired_ms,
            "expires_ms": now_ms + self.manager.ttl_ms, "topic": self.topic, "partition": self.partition,
        }
        if released:
            payload["released"] = True
            payload["expires_ms"] = now_ms
        return payload

    def start_heartbeat(self, interval_s: float | None = None) -> None:
        """Renew the lease every ``interval_s`` seconds (default: a third of the TTL) until released."""
        if self._heartbeat is not None:
            return
        interval = interval_s if interval_s is not None else max(self.manager.ttl_ms / 3000.0, 0.05)
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    self.renew()
                except PartitionBusyError as e:
                    log.warning("%s", e)
                    return
                except Exception as e:  # noqa: BLE001 - a transient storage error: try again next beat
                    log.warning("could not renew %r: %s", self, e)

        self._heartbeat_stop = stop
        self._heartbeat = threading.Thread(target=beat, name=f"lease-{self.topic}-{self.partition}", daemon=True)
        self._heartbeat.start()

    def release(self) -> None:
        """Give the partition back. Releasing twice, or after losing the lease, does nothing."""
        if self._heartbeat_stop is not None:
            self._heartbeat_stop.set()
            if self._heartbeat is not None and self._heartbeat is not threading.current_thread():
                self._heartbeat.join()
        if self.released:
            return
        self.released = True
        for hook in self.manager.released_hooks:
            hook(self.topic, self.partition, self.purpose)
        # Rewritten as released, not deleted: the generation stays taken, so nobody can create it again.
        gens = self.manager._generations(self.topic, self.partition)
        info = self.manager._read(self.topic, self.partition, self.generation)
        if gens and gens[-1] == self.generation and info is not None and info.owner == self.manager.owner:
            try:
                self.manager.storage.write_json(self.path, self._payload(self.manager.clock.now_ms(), released=True),
                                                indent=None)
            except StorageFullError:
                # No space to rewrite it: delete it instead (a delete needs none), or the partition would stay
                # busy for the TTL after the disk is freed. The generation may then be created again, which
                # only a holder of this very generation could mistake, and that holder is this one, done.
                log.warning("no space to mark the lease %s released; deleted it instead", self.path)
                self.manager.storage.delete(self.path)


class LeaseManager:
    """Takes and gives back partition leases for one owner (a job run, a process) in one store."""

    def __init__(self, storage: Storage | str, clock: Clock, *, owner: str | None = None,
                 ttl_ms: int = DEFAULT_LEASE_TTL_MS) -> None:
        if ttl_ms <= 0:
            raise InvalidConfigError(f"lease ttl_ms must be > 0, not {ttl_ms}")
        self.storage = as_storage(storage)
        self.root = self.storage.root
        self.clock = clock
        self.owner = owner or default_owner()
        self.ttl_ms = ttl_ms
        #: Called with (topic, partition, purpose) when a lease of this manager's is released: the holder's work on
        #: the partition is done, and what was read of it before may be out of date.
        self.released_hooks: list[Callable[[str, int, str], None]] = []

    def _dir(self, topic: str, partition: int) -> str:
        return self.storage.location(*LEASES_DIR, topic, str(partition))

    def _file(self, topic: str, partition: int, generation: int) -> str:
        return self.storage.location(*LEASES_DIR, topic, str(partition), f"{generation:012d}{_SUFFIX}")

    def _generations(self, topic: str, partition: int) -> list[int]:
        names = [basename(f.location) for f in self.storage.list_files(self._dir(topic, partition))]
        return sorted(int(n[: -len(_SUFFIX)]) for n in names if n.endswith(_SUFFIX) and n[: -len(_SUFFIX)].isdigit())

    def _read(self, topic: str, partition: int, generation: int) -> LeaseInfo | None:
        """The lease file's content; None if it is gone. A file still being written (empty or cut short)
        is read again a few times. Every write of a lease puts the whole document at once (a conditional put; on a
        disk, a hard link of a written file), so one that stays unreadable is damage: it counts as held for
        :data:`UNREADABLE_GRACE_MS` after it was written (a filesystem without hard links creates the file before
        writing it), then it is taken over like an expired lease, with a warning naming the file; a damaged lease
        stalls its partition for moments, not for its TTL."""
        path = self._file(topic, partition, generation)
        for attempt in range(_READ_ATTEMPTS):
            found = self.storage.read_versioned(path)
            if found is None:
                return None
            mtime_ms = found.modified_ms
            try:
                d = json.loads(found.data)
                return LeaseInfo(str(d["owner"]), str(d["purpose"]), int(d["acquired_ms"]), int(d["expires_ms"]),
                                 generation, bool(d.get("released", False)))
            except (ValueError, KeyError, TypeError):
                if attempt + 1 < _READ_ATTEMPTS:
                    time.sleep(0.01)
        log.warning("the lease file %s is damaged (not a lease document); it holds %s-%d for %d ms after it was "
                    "written, then the partition is taken over (a holder renews by rewriting it whole, so a torn "
                    "file is damage, not a write in progress)", path, topic, partition, UNREADABLE_GRACE_MS)
        return LeaseInfo(UNREADABLE, "<unknown>", mtime_ms, mtime_ms + min(UNREADABLE_GRACE_MS, self.ttl_ms),
                         generation)

    def holder(self, topic: str, partition: int) -> LeaseInfo | None:
        """The live lease on a partition, or None when it is free (no lease, or only expired ones)."""
        gens = self._generations(topic, partition)
        if not gens:
            return None
        info = self._read(topic, partition, gens[-1])
        if info is None or info.free(self.clock.now_ms()):
            return None
        return info

    def acquire(self, topic: str, partition: int, purpose: str) -> Lease | None:
        """Take the lease on a partition, or return None if someone else holds a live one."""
        for _ in range(5):
            gens = self._generations(topic, partition)
            now = self.clock.now_ms()
            if gens:
                info = self._read(topic, partition, gens[-1])
                if info is None:
                    continue  # released under our feet: look again
                if not info.free(now):
                    return None
                if info.owner != UNREADABLE and not info.released:
                    log.info("taking over the %s lease of %s on %s-%d (%s, expires at %d)",
                             "expired" if info.expired(now) else "abandoned", info.owner, topic, partition,
                             info.purpose, info.expires_ms)
            target = gens[-1] + 1 if gens else 0
            lease = Lease(self, topic, partition, purpose, target, now)
            if self.storage.create_json(lease.path, lease._payload(now)) is None:
                return None  # another process took this generation first
            later = [g for g in self._generations(topic, partition) if g > target]
            if later:  # we read a stale listing and someone already moved past us
                lease.released = True
                self.storage.delete(lease.path)  # below the highest generation: nobody reads it
                return None
            # The generations we superseded (ours is the highest: nobody can hold them any more).
            self.storage.delete_many([self._file(topic, partition, g) for g in gens if g < target])
            return lease
        return None

    @contextmanager
    def hold(self, topic: str, partition: int, purpose: str, *, heartbeat: bool = False) -> Iterator[Lease]:
        """``with leases.hold(t, p, "clean"):`` run with the lease; raises :class:`PartitionBusyError` if taken."""
        lease = self.acquire(topic, partition, purpose)
        if lease is None:
            info = self.holder(topic, partition)
            who = f"{info.owner} ({info.purpose}, until {info.expires_ms})" if info else "another process"
            raise PartitionBusyError(
                f"partition {topic}-{partition} is busy: {who} holds its lease; try again later"
            )
        if heartbeat:
            lease.start_heartbeat()
        try:
            yield lease
        finally:
            lease.release()
