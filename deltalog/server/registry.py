"""The live endpoints of a store (Kafka's broker registrations: KRaft's ``BrokerRegistrationRequest`` and the
heartbeats that keep a broker unfenced, ``broker.session.timeout.ms``).

Every ``deltalog serve`` endpoint registers itself in the store, beside the Delta logs, through
:class:`~deltalog.storage.Storage`::

    <root>/_deltalog/brokers/<node id>.json     {"node_id", "host", "port", "owner", "registered_ms", "expires_ms"}

A registration is taken with a conditional put (create only if absent), or, when the file is there but its holder is
gone (expired, or a process of this machine that no longer exists: :func:`deltalog.log.lease.owner_is_dead`, as a
partition lease is taken over), by compare-and-swap on the file's etag; of two endpoints racing for one node id,
exactly one wins. The holder renews it every ``broker.heartbeat.interval.ms`` by compare-and-swap on its own etag,
pushing its expiry to now + ``broker.session.timeout.ms`` (Kafka's defaults: 2 s and 9 s); a renewal that finds
the etag changed means another endpoint took the id over after this one missed its session (Kafka fences such a
broker): it registers again, and until then it is not in the live set. A clean shutdown deletes its own file.
Expiry is measured with the store's clock (:attr:`deltalog.Store.clock`), as leases are.

Node ids are Kafka's ``node.id`` (``broker.id``): given, they are the endpoint's for as long as it lives and after a
restart; not given, the endpoint takes the lowest id no live endpoint holds (Kafka generates ids above
``reserved.broker.max.id`` and keeps them in ``meta.properties``; a deltalog endpoint has no disk of its own, so an
allocated id is stable for the life of the process, and ``--node-id`` is the way to keep one across restarts).

Nothing here needs ``rename``, ``O_EXCL`` or a coordination service: the store's conditional puts are enough, on a
local disk as on S3, Azure or GCS.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass

from deltalog.clock import Clock
from deltalog.errors import DeltalogError, DuplicateBrokerRegistrationError, InvalidConfigError
from deltalog.log.lease import default_owner, owner_is_dead
from deltalog.storage import Storage, basename

log = logging.getLogger(__name__)

BROKERS_DIR = ("_deltalog", "brokers")
#: Kafka's ``broker.session.timeout.ms`` default: a registration not renewed for this long is no longer live.
DEFAULT_SESSION_TIMEOUT_MS = 9_000
#: Kafka's ``broker.heartbeat.interval.ms`` default: how often an endpoint renews its registration.
DEFAULT_HEARTBEAT_INTERVAL_MS = 2_000
#: How long a listing of the live endpoints is reused before the store is listed again (a request's coordinator
#: check must not list the store each time; a change is seen within this, well inside a session timeout).
DEFAULT_REFRESH_MS = 500
#: The highest node id allocated (Kafka's ``node.id`` is an int32; allocation takes the lowest free one).
MAX_NODE_ID = 2**31 - 1
_SUFFIX = ".json"


@dataclass(frozen=True, order=True)
class Broker:
    """One live endpoint, as Metadata lists it (Kafka's ``Node``), and the name of its listener (Kafka's
    ``ListenerName``: clients are sent only to endpoints of the listener they came in on)."""

    node_id: int
    host: str
    port: int
    listener: str = "PLAINTEXT"


@dataclass(frozen=True)
class Registration:
    """What a registration file says."""

    broker: Broker
    owner: str
    registered_ms: int
    expires_ms: int

    def live(self, now_ms: int) -> bool:
        return now_ms < self.expires_ms and not owner_is_dead(self.owner)


def validate_node_id(node_id: object) -> int:
    """Kafka's ``node.id``: an int from 0 to 2^31-1."""
    if isinstance(node_id, bool) or not isinstance(node_id, int) or not 0 <= node_id <= MAX_NODE_ID:
        raise InvalidConfigError(f"node.id must be an int from 0 to {MAX_NODE_ID}, not {node_id!r}")
    return node_id


class BrokerRegistry:
    """This endpoint's registration in a store, and the store's live endpoints.

    :meth:`register` takes a node id (the given one, or the lowest free) and starts the heartbeat thread;
    :meth:`live` is the live endpoints by node id (cached for ``refresh_ms``); :meth:`deregister` stops the
    heartbeat and deletes this endpoint's file.
    """

    def __init__(self, storage: Storage, clock: Clock, host: str, port: int, *, listener: str = "PLAINTEXT",
                 node_id: int | None = None,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS, refresh_ms: int = DEFAULT_REFRESH_MS,
                 owner: str | None = None) -> None:
        if session_timeout_ms <= 0 or heartbeat_interval_ms <= 0 or heartbeat_interval_ms >= session_timeout_ms:
            raise InvalidConfigError(
                f"broker.heartbeat.interval.ms ({heartbeat_interval_ms}) must be > 0 and below "
                f"broker.session.timeout.ms ({session_timeout_ms}), or a live endpoint would expire between beats")
        self.storage = storage
        self.clock = clock
        self.host, self.port, self.listener = host, port, listener
        self.wanted_node_id = None if node_id is None else validate_node_id(node_id)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.refresh_ms = refresh_ms
        self.owner = owner or default_owner()
        self.node_id: int | None = None
        #: Counts the times this endpoint was not live while it ran (a renewal after its expiry, a new
        #: registration): what it coordinated meanwhile may have moved on elsewhere, so its groups are reloaded.
        self.epoch = 0
        self._expires_ms = 0
        self._etag: str | None = None
        self._registered_ms = 0
        self._lock = threading.RLock()
        self._cached: tuple[float, list[Broker]] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- files ---------------------------------------------------------------------------------------------

    def _file(self, node_id: int) -> str:
        return self.storage.location(*BROKERS_DIR, f"{node_id}{_SUFFIX}")

    def _payload(self, node_id: int, now_ms: int) -> dict[str, object]:
        return {"node_id": node_id, "host": self.host, "port": self.port, "listener": self.listener,
                "owner": self.owner,
                "registered_ms": self._registered_ms or now_ms, "expires_ms": now_ms + self.session_timeout_ms}

    @staticmethod
    def _parse(data: bytes) -> Registration | None:
        """A registration file's content; None for one that is not a registration (a torn or foreign file counts as
        no registration: its node id can be taken over by compare-and-swap, which a live holder's renewal notices)."""
        try:
            d = json.loads(data)
            broker = Broker(int(d["node_id"]), str(d["host"]), int(d["port"]), str(d.get("listener", "PLAINTEXT")))
            return Registration(broker, str(d["owner"]),
                                int(d["registered_ms"]), int(d["expires_ms"]))
        except (ValueError, KeyError, TypeError):
            return None

    def registrations(self) -> list[Registration]:
        """Every registration file's content (live or not), by node id."""
        out = []
        for f in self.storage.list_files(self.storage.location(*BROKERS_DIR)):
            name = basename(f.location)
            if not name.endswith(_SUFFIX) or not name[: -len(_SUFFIX)].isdigit():
                continue
            found = self.storage.read_versioned(f.location)
            reg = None if found is None else self._parse(found.data)
            if reg is not None:
                out.append(reg)
        return sorted(out, key=lambda r: r.broker.node_id)

    # -- this endpoint's registration ---------------------------------------------------------------------------

    def _claim(self, node_id: int) -> bool:
        """Take ``node_id`` if nobody live holds it (create, or compare-and-swap over a dead holder's file)."""
        path = self._file(node_id)
        now = self.clock.now_ms()
        found = self.storage.read_versioned(path)
        if found is None:
            etag = self.storage.create_json(path, self._payload(node_id, now))
        else:
            reg = self._parse(found.data)
            if reg is not None and reg.owner != self.owner and reg.live(now):
                return False
            etag = self.storage.replace_json(path, self._payload(node_id, now), found.etag)
        if etag is None:
            return False  # another endpoint wrote it first
        self.node_id, self._etag = node_id, etag
        self._expires_ms = now + self.session_timeout_ms
        self.epoch += 1
        if not self._registered_ms:
            self._registered_ms = now
        self._cached = None
        return True

    def _register_once(self) -> None:
        with self._lock:
            if self.wanted_node_id is not None:
                if not self._claim(self.wanted_node_id):
                    holder = next((r for r in self.registrations() if r.broker.node_id == self.wanted_node_id), None)
                    who = f" ({holder.owner} at {holder.broker.host}:{holder.broker.port})" if holder else ""
                    raise DuplicateBrokerRegistrationError(
                        f"node.id {self.wanted_node_id} is held by another live endpoint of this store{who}; give "
                        "each deltalog serve its own --node-id, or none to take a free one")
                return
            taken = {r.broker.node_id for r in self.registrations() if r.live(self.clock.now_ms())
                     and r.owner != self.owner}
            candidate = self.node_id if self.node_id is not None and self.node_id not in taken else 0
            while candidate <= MAX_NODE_ID:
                if candidate not in taken and self._claim(candidate):
                    return
                taken.add(candidate)
                candidate += 1
            raise DuplicateBrokerRegistrationError("no node id is free")  # pragma: no cover - 2^31 endpoints

    def register(self) -> int:
        """Register this endpoint and start renewing; its node id."""
        self._register_once()
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="deltalog-broker-heartbeat", daemon=True)
        self._thread.start()
        assert self.node_id is not None
        return self.node_id

    def renew(self) -> bool:
        """Push this endpoint's expiry on (a heartbeat); False when its registration was lost, after which it
        registers again (a lost configured node id held by another live endpoint stays lost until that one goes)."""
        with self._lock:
            if self.node_id is None or self._etag is None:
                return False
            now = self.clock.now_ms()
            etag = self.storage.replace_json(self._file(self.node_id), self._payload(self.node_id, now), self._etag)
            if etag is not None:
                self._etag = etag
                if now >= self._expires_ms:  # renewed late (a hung process, a pause): it was not live meanwhile
                    log.warning("node %d renewed its registration %d ms after it expired; other endpoints may have "
                                "taken over its groups meanwhile", self.node_id, now - self._expires_ms)
                    self.epoch += 1
                    self._cached = None
                self._expires_ms = now + self.session_timeout_ms
                return True
            log.warning("node %d's registration was taken over (this endpoint missed its broker.session.timeout.ms "
                        "of %d ms); registering again", self.node_id, self.session_timeout_ms)
            self._etag = None
            self._cached = None
            try:
                self._register_once()
            except DuplicateBrokerRegistrationError as e:
                log.error("%s", e)
            return False

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_interval_ms / 1000):
            try:
                if self._etag is None:
                    self._register_once()
                else:
                    self.renew()
            except DuplicateBrokerRegistrationError as e:
                log.error("%s", e)
            except Exception as e:  # noqa: BLE001 - a transient storage error: try again next beat
                log.warning("could not renew node %s's registration: %s", self.node_id, e)

    def stop_heartbeat(self) -> None:
        """Stop renewing (the registration then expires after ``broker.session.timeout.ms``)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    def deregister(self) -> None:
        """A clean shutdown: stop renewing and delete this endpoint's file, if it is still this endpoint's."""
        self.stop_heartbeat()
        with self._lock:
            if self.node_id is None:
                return
            path = self._file(self.node_id)
            try:
                found = self.storage.read_versioned(path)
                reg = None if found is None else self._parse(found.data)
                if reg is not None and reg.owner == self.owner:
                    self.storage.delete(path)
            except (DeltalogError, OSError) as e:
                log.warning("could not remove node %d's registration (it expires after %d ms): %s", self.node_id,
                            self.session_timeout_ms, e)
            self._etag = None
            self._cached = None

    # -- the live set ----------------------------------------------------------------------------------------

    def live(self, *, fresh: bool = False) -> list[Broker]:
        """The live endpoints by node id (this one among them while it is registered)."""
        with self._lock:
            now = time.monotonic()
            if not fresh and self._cached is not None and now - self._cached[0] < self.refresh_ms / 1000:
                return self._cached[1]
            now_ms = self.clock.now_ms()
            brokers = [r.broker for r in self.registrations() if r.live(now_ms)]
            self._cached = (now, brokers)
            return brokers


__all__ = ["BROKERS_DIR", "Broker", "BrokerRegistry", "Registration", "validate_node_id"]
