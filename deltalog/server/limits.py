"""What one ``deltalog serve`` endpoint holds at most, in Kafka's broker configs (``SocketServer``'s
``ConnectionQuotas``, the ``Selector``'s idle expiry, ``KafkaRequestHandlerPool``): connections in all and per client
address, how long a connection may stay idle or unauthenticated, the listen backlog, the request handler threads.

Kafka's names and defaults, and one limit Kafka does not have (how long authentication may take). The endpoint runs
no thread per connection (:mod:`deltalog.server.socket_server`), so an idle client costs its socket and buffers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from deltalog.errors import InvalidConfigError

#: Kafka's ``Int.MaxValue``: ``max.connections`` and ``max.connections.per.ip`` left unbounded.
UNBOUNDED = 2**31 - 1


@dataclass(frozen=True)
class ConnectionLimits:
    """Kafka's names; a value of 0 or less is refused (as Kafka's ``ConfigDef`` ranges)."""

    #: ``max.connections``: connections the endpoint holds in all; one more is closed on accept.
    max_connections: int = UNBOUNDED
    #: ``max.connections.per.ip``: connections from one client address; one more is closed on accept.
    max_connections_per_ip: int = UNBOUNDED
    #: ``connections.max.idle.ms``: a connection with no request for this long is closed.
    connections_max_idle_ms: int = 600_000
    #: ``deltalog.authentication.timeout.ms``: a connection that has not finished its TLS handshake and SASL
    #: exchange this long after it was accepted is closed (Kafka bounds it only by the idle expiry; a client
    #: trickling bytes is never idle).
    authentication_timeout_ms: int = 30_000
    #: ``socket.listen.backlog.size``: connections the kernel queues before they are accepted.
    listen_backlog: int = 50
    #: ``num.io.threads``: threads that run requests (the network thread only reads and writes).
    num_io_threads: int = 8

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ConnectionLimits:
        """The limits ``props`` (a ``server.properties`` with its overrides) set; the others keep their default.
        Raises :class:`InvalidConfigError` naming the key for a value that is not a positive integer."""
        values = {}
        for f in fields(cls):
            key = KEYS[f.name]
            raw = props.get(key)
            if raw is None or not raw.strip():
                continue
            raw = raw.strip()
            if not raw.isdigit() or int(raw) <= 0:
                raise InvalidConfigError(f"{key}={raw!r} must be a positive integer (default {f.default})")
            values[f.name] = int(raw)
        return cls(**values)


#: Field -> the broker config that sets it.
KEYS = {"max_connections": "max.connections", "max_connections_per_ip": "max.connections.per.ip",
        "connections_max_idle_ms": "connections.max.idle.ms",
        "authentication_timeout_ms": "deltalog.authentication.timeout.ms",
        "listen_backlog": "socket.listen.backlog.size", "num_io_threads": "num.io.threads"}

__all__ = ["KEYS", "UNBOUNDED", "ConnectionLimits"]
