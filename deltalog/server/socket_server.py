"""The listening socket and its connections (Kafka's ``SocketServer``): one thread per connection reads size-prefixed
frames, hands each decoded request to :class:`~deltalog.server.kafka_apis.KafkaApis` and writes the response, in
request order (Kafka answers a connection's requests in the order they came).

A frame announcing more than ``max_request_bytes`` (Kafka's ``socket.request.max.bytes``) or a negative size is not
read: the connection is closed, as Kafka's ``NetworkReceive`` does with an ``InvalidReceiveException``. A frame cut
short by a disconnect, or one whose body does not decode, is never handed to a handler, so nothing of it is written;
other connections are served meanwhile. An API key or version that is not served gets Kafka's ``UNSUPPORTED_VERSION``
where the answer can say so: ApiVersions (answered at v0 with the served versions, which is how clients negotiate)
and responses with a top-level ``error_code``; for any other the connection is closed, as Kafka's broker does when
it cannot parse a request.

A listener with TLS (:mod:`deltalog.server.security`) does each connection's handshake in that connection's thread
(Kafka's ``SslTransportLayer``); one with SASL hands every frame to the connection's
:class:`~deltalog.server.sasl.SaslServerAuthenticator` until it has authenticated (Kafka's
``SaslServerAuthenticator``), so nothing reaches :class:`KafkaApis` before. A PLAINTEXT listener binds a loopback
address only.
"""

from __future__ import annotations

import logging
import select
import socket
import socketserver
import ssl
import struct
import threading
from collections.abc import Iterator
from typing import Any

from deltalog.errors import DeltalogError
from deltalog.scram import ScramCredentials
from deltalog.server import protocol as p
from deltalog.server.kafka_apis import KafkaApis
from deltalog.server.placement import for_endpoint
from deltalog.server.security import ListenerSecurity
from deltalog.server.served_store import ServedStore

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
#: How long a new connection may take to finish its TLS handshake (Kafka bounds it by ``connections.max.idle.ms``).
TLS_HANDSHAKE_TIMEOUT_S = 30.0
_PRODUCE = int(p.ProduceRequest.API_KEY)
_CHUNK = 1 << 20


class _Frames:
    """A connection's size-prefixed frames, read from the socket in chunks (Kafka's ``Selector`` reads what arrived):
    complete frames that came in behind the one being read, which a client pipelined (librdkafka keeps several
    requests in flight), are handed over together by :meth:`ready`, so their Produce requests can share a Delta
    commit (:mod:`deltalog.server.group_commit`)."""

    #: Bytes read ahead at most, beyond the frame being read.
    READ_AHEAD = 64 << 20

    def __init__(self, sock: socket.socket, max_request_bytes: int, peer: Any) -> None:
        self.sock = sock
        self.peer = peer
        self.max_request_bytes = max_request_bytes
        self.buf = bytearray()

    def _fill(self, n: int) -> bool:
        """At least ``n`` bytes buffered; False when the peer closed the connection first."""
        while len(self.buf) < n:
            chunk = self.sock.recv(max(n - len(self.buf), 1 << 16))
            if not chunk:
                return False
            self.buf += chunk
        return True

    def _size(self) -> int:
        (size,) = _SIZE.unpack_from(self.buf)
        if size < 0 or size > self.max_request_bytes:
            raise _FrameTooLarge(size)
        return size

    def next(self) -> bytes | None:
        """The next frame (waiting for it); None when the peer closed the connection before it was whole. Raises
        :class:`_FrameTooLarge` (before reading its body) for a frame of more than ``max_request_bytes``."""
        if not self._fill(4):
            if self.buf:
                log.info("%s disconnected in the middle of a request's size; nothing of it was applied", self.peer)
            return None
        size = self._size()
        if not self._fill(4 + size):
            log.info("%s disconnected in the middle of a request; nothing of it was applied", self.peer)
            return None
        return self._take(size)

    def _take(self, size: int) -> bytes:
        with memoryview(self.buf) as view:
            frame = bytes(view[4:4 + size])  # one copy (a bytearray slice would make two)
        del self.buf[:4 + size]
        return frame

    def ready(self) -> list[bytes]:
        """The complete frames that have arrived by now, without waiting for more."""
        while len(self.buf) < self.READ_AHEAD and select.select([self.sock], [], [], 0)[0]:
            chunk = self.sock.recv(_CHUNK)
            self.buf += chunk
            if len(chunk) < _CHUNK:  # the socket is drained (or closed): what arrives next waits for the next turn
                break
        frames = []
        at = 0  # the buffer is cut once at the end: cutting it after each frame would move the rest each time
        with memoryview(self.buf) as view:
            while len(view) - at >= 4:
                (size,) = _SIZE.unpack_from(view, at)
                if size < 0 or size > self.max_request_bytes or len(view) - at < 4 + size:
                    break  # a frame too large: next() meets it and closes the connection, after these are answered
                frames.append(bytes(view[at + 4:at + 4 + size]))
                at += 4 + size
        del self.buf[:at]
        return frames


class _FrameTooLarge(DeltalogError):  # never leaves this module: the connection is closed
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class _Connection(socketserver.BaseRequestHandler):
    server: _Listener

    def handle(self) -> None:
        sock: socket.socket | ssl.SSLSocket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = self.client_address
        security = self.server.security
        try:
            if security.ssl_context is not None:  # in the connection's thread: a slow handshake holds no one else
                tls = tls_handshake(security.ssl_context, self.request, peer)
                if tls is None:
                    return
                sock = tls
            frames = _Frames(sock, self.server.max_request_bytes, peer)  # on the TLS socket when there is one
            auth = security.authenticator(self.server.scram_lookup, peer)
            while True:
                frames.max_request_bytes = self.server.max_request_bytes if auth is None else auth.max_receive_size
                try:
                    frame = frames.next()
                except _FrameTooLarge as e:
                    log.warning("closing %s: a request of %d bytes (%s is %d)", peer, e.size,
                                "socket.request.max.bytes" if auth is None else "sasl.server.max.receive.size",
                                frames.max_request_bytes)
                    return
                if frame is None:
                    return
                if auth is not None:  # SASL first: nothing else is answered until it completes
                    token, close = auth.receive(frame)
                    if token is not None:
                        sock.sendall(token)
                    if close:
                        return
                    if auth.complete:
                        auth = None
                    continue
                for answer in self.server.answers([frame, *frames.ready()], peer):
                    if answer is False:
                        return
                    if isinstance(answer, bytes):
                        sock.sendall(answer)
        except (ConnectionError, OSError) as e:
            log.info("connection %s ended: %s", peer, e)
        finally:
            if sock is not self.request:
                sock.close()


def tls_handshake(context: ssl.SSLContext, sock: socket.socket, peer: Any) -> ssl.SSLSocket | None:
    """The TLS side of a new connection, or None when the handshake fails (a plaintext client on a TLS port, a
    client certificate the truststore does not accept): that connection is closed, the others go on."""
    sock.settimeout(TLS_HANDSHAKE_TIMEOUT_S)
    try:
        tls = context.wrap_socket(sock, server_side=True)
    except (ssl.SSLError, OSError) as e:
        log.warning("closing %s: TLS handshake failed: %s", peer, e)
        return None
    tls.settimeout(None)
    return tls


class _Listener(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    apis: KafkaApis
    max_request_bytes: int
    security: ListenerSecurity
    scram_lookup: Any

    def answer(self, frame: bytes, peer: Any) -> bytes | None | bool:
        """The response frame to ``frame``; None when none is due (acks=0); False to close the connection."""
        return next(iter(self.answers([frame], peer)))

    def answers(self, frames: list[bytes], peer: Any) -> Iterator[bytes | None | bool]:
        """The response frames to ``frames``, in order, as :meth:`answer` gives them, up to the first False;
        consecutive Produce requests among them are handled together (:meth:`KafkaApis.handle_produces`)."""
        produces: list[p.Request] = []
        for frame in frames:
            try:
                req = p.parse_request(frame)
            except p.ProtocolError as e:
                yield from self._produce_answers(produces, peer)
                log.warning("closing %s: %s", peer, e)
                yield False
                return
            if not isinstance(req, p.Unsupported) and req.api_key == _PRODUCE:
                produces.append(req)
                continue
            for answer in self._produce_answers(produces, peer):
                yield answer
                if answer is False:
                    return
            produces = []
            answer = unsupported_answer(req, peer) if isinstance(req, p.Unsupported) else self._handled(req, peer)
            yield answer
            if answer is False:
                return
        yield from self._produce_answers(produces, peer)

    def _produce_answers(self, requests: list[p.Request], peer: Any) -> Iterator[bytes | None | bool]:
        if not requests:
            return
        try:
            responses = self.apis.handle_produces(requests)
        except Exception:  # a handler's bug must not take the endpoint down; Kafka closes the connection too
            log.exception("closing %s: handling %d Produce requests failed", peer, len(requests))
            yield False
            return
        for req, response in zip(requests, responses, strict=True):
            yield None if response is None else p.encode_response(req.api_key, req.api_version, req.correlation_id,
                                                                  response)

    def _handled(self, req: p.Request, peer: Any) -> bytes | None | bool:
        try:
            response = self.apis.handle(req)
            if response is None:
                return None
            return p.encode_response(req.api_key, req.api_version, req.correlation_id, response)
        except Exception:  # a handler's bug must not take the endpoint down; Kafka closes the connection too
            log.exception("closing %s: handling API key %d v%d failed", peer, req.api_key, req.api_version)
            return False


def unsupported_answer(req: p.Unsupported, peer: Any) -> bytes | bool:
    """Kafka's ``UNSUPPORTED_VERSION`` answer to an API key or version that is not served (see the module doc)."""
    if req.api_key == p.API_VERSIONS_KEY:
        return p.encode_response(req.api_key, 0, req.correlation_id,
                                 p.api_versions_response(0, p.UNSUPPORTED_VERSION))
    api = p.SERVED.get(req.api_key)
    if api is not None and 0 <= req.api_version <= api.response.max_version:
        cls = api.response[req.api_version]
        if "error_code" in cls.fields and cls.fields["error_code"].for_version_q(req.api_version):
            return p.encode_response(req.api_key, req.api_version, req.correlation_id,
                                     cls(error_code=p.UNSUPPORTED_VERSION))
    log.warning("closing %s: API key %d v%d is not served", peer, req.api_key, req.api_version)
    return False


class SocketServer:
    """A Kafka endpoint on ``store`` listening on ``host``:``port`` (0: an ephemeral port, see :attr:`port`).

    :meth:`start` serves in a background thread; :meth:`serve_forever` in the calling one; :meth:`shutdown` stops
    accepting, and returns once the listening loop has ended; :meth:`close` closes the socket (connection threads are
    daemons: a request in a handler finishes its commit or, cut by the process's end, lands whole or not at all).
    """

    def __init__(self, store: ServedStore, host: str = "127.0.0.1", port: int = 9092, *,
                 advertised_host: str | None = None, max_request_bytes: int = p.DEFAULT_MAX_REQUEST_BYTES,
                 security: ListenerSecurity | None = None, **registration: Any) -> None:
        """``security`` (:mod:`deltalog.server.security`): TLS and SASL; without it PLAINTEXT, loopback addresses
        only. ``registration``: ``node_id``, ``session_timeout_ms``, ``heartbeat_interval_ms`` of the endpoint's
        entry among the store's live endpoints (:func:`deltalog.server.placement.for_endpoint`)."""
        self.security = security or ListenerSecurity(host=host, port=port)
        self.security.host, self.security.port = host, port
        self.security.check_bind()
        self._listener = _Listener((host, port), _Connection)
        self.host = host
        self.port = self._listener.server_address[1]
        self._listener.max_request_bytes = max_request_bytes
        self._listener.security = self.security
        self._listener.scram_lookup = ScramCredentials(store.storage).get if self.security.is_sasl else None
        advertised = (advertised_host or host, self.port)
        if self.security.advertised is not None:  # advertised.listeners: what Metadata and the registry give clients
            advertised = (self.security.advertised[0], self.security.advertised[1] or self.port)
        try:
            self.registry, placement = for_endpoint(store, advertised, **registration)
        except BaseException:
            self._listener.server_close()
            raise
        self.node_id = self.registry.node_id
        self.apis = KafkaApis(store, advertised, placement)
        self._listener.apis = self.apis
        self._thread: threading.Thread | None = None

    def start(self) -> SocketServer:
        self._thread = threading.Thread(target=self._listener.serve_forever, name="deltalog-socket-server",
                                        daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._listener.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        """End the listening loop (from another thread than the one in :meth:`serve_forever`)."""
        self._listener.shutdown()
        if self._thread is not None:
            self._thread.join()
        self.apis.close()

    def close(self) -> None:
        """Close the listening socket (after :meth:`shutdown`, or when the loop never ran) and leave the store's live
        endpoints (a clean shutdown: the others take over its groups at once, not after its session timeout)."""
        self.registry.deregister()
        self._listener.server_close()

    def __enter__(self) -> SocketServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.close()
