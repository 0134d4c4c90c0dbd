"""The listening socket and its connections (Kafka's ``SocketServer``): one network thread (Kafka's ``Acceptor`` and
``Processor``, on a selector) accepts connections and reads and writes every one of them without blocking; complete
requests go to a bounded pool of request threads (Kafka's ``KafkaRequestHandlerPool``, ``num.io.threads``) that hand
each decoded request to :class:`~deltalog.server.kafka_apis.KafkaApis`. A connection is muted while its requests are
handled and until their responses are written, as Kafka's ``Processor`` mutes a channel, so requests are answered in
the order they came and a client that does not read its answers is not read either.

A Fetch that cannot be answered yet (less than ``min_bytes``) holds no thread: it is parked, as Kafka's
``DelayedFetch`` waits in the fetch purgatory, and tried again when this endpoint appends, every
:data:`~deltalog.server.kafka_apis.FETCH_POLL_S` (another process may have appended), and at its ``max_wait_ms``.

A frame announcing more than ``max_request_bytes`` (Kafka's ``socket.request.max.bytes``) or a negative size is not
read: the connection is closed, as Kafka's ``NetworkReceive`` does with an ``InvalidReceiveException``. A frame cut
short by a disconnect, or one whose body does not decode, is never handed to a handler, so nothing of it is written;
other connections are served meanwhile. An API key or version that is not served gets Kafka's ``UNSUPPORTED_VERSION``
where the answer can say so: ApiVersions (answered at v0 with the served versions, which is how clients negotiate)
and responses with a top-level ``error_code``; for any other the connection is closed, as Kafka's broker does when
it cannot parse a request.

A listener with TLS (:mod:`deltalog.server.security`) does each connection's handshake on the network thread without
blocking (Kafka's ``SslTransportLayer``); one with SASL hands every frame to the connection's
:class:`~deltalog.server.sasl.SaslServerAuthenticator` until it has authenticated (Kafka's
``SaslServerAuthenticator``), so nothing reaches :class:`KafkaApis` before. A PLAINTEXT listener binds a loopback
address only. What a connection may hold is bounded by :class:`~deltalog.server.limits.ConnectionLimits`
(``max.connections``, ``max.connections.per.ip``, ``connections.max.idle.ms``, the authentication time limit,
``socket.listen.backlog.size``, ``num.io.threads``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import selectors
import socket
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deltalog.scram import ScramCredentials
from deltalog.server import protocol as p
from deltalog.server import record_batches
from deltalog.server.broker_config import BrokerConfig
from deltalog.server.kafka_apis import FETCH_POLL_S, KafkaApis, fetch_deadline
from deltalog.server.limits import ConnectionLimits
from deltalog.server.placement import for_endpoint
from deltalog.server.request_metrics import RequestMetrics
from deltalog.server.security import ListenerSecurity
from deltalog.server.served_store import ServedStore

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
_PRODUCE = int(p.ProduceRequest.API_KEY)
_FETCH = int(p.FetchRequest.API_KEY)
_WRITES = {_PRODUCE, int(p.EndTxnRequest.API_KEY)}  # requests after which parked fetches look again at once
_CHUNK = 1 << 18
#: Bytes read ahead at most while a connection's requests are being handled (the frames a client pipelined, whose
#: Produce requests then share a Delta commit: :mod:`deltalog.server.group_commit`).
READ_AHEAD = 64 << 20
#: How often the network thread looks for idle and unauthenticated connections to close.
_SWEEP_S = 1.0


@dataclass
class _Parked:
    """A Fetch waiting for records (Kafka's ``DelayedFetch``): its answer as it stood when last read, the table
    versions it was read at, and the frames its connection sent after it."""

    request: p.Request
    deadline: float
    response: Any
    versions: list[tuple[Any, int]]
    rest: list[bytes] = field(default_factory=list)


@dataclass
class _Done:
    """What a request thread hands back to the network thread for one connection."""

    out: list[bytes] = field(default_factory=list)
    close: bool = False
    parked: _Parked | None = None
    wrote: bool = False  # it appended: parked fetches look again


class _Channel:
    """One connection: its socket (non-blocking), what was read and not yet handled, what is to be written."""

    def __init__(self, sock: socket.socket, peer: Any, now: float, *, tls: bool, auth: Any) -> None:
        self.sock: socket.socket | ssl.SSLSocket = sock
        self.peer = peer
        self.ip = peer[0] if isinstance(peer, tuple) else str(peer)
        self.inbuf = bytearray()
        self.out: deque[memoryview] = deque()
        self.handshaking = tls
        self.handshake_wants_write = False
        self.auth = auth  # the SASL authenticator until it completes
        self.principal = "User:ANONYMOUS"  # the SASL user once authenticated (Kafka's KafkaPrincipal)
        self.created = self.last_active = now
        self.busy = False  # a request thread holds its requests, or a Fetch of it is parked
        self.parked: _Parked | None = None
        self.park_seq = 0
        self.held: list[bytes] = []  # frames read behind a parked Fetch, handled after it
        self.closing = False  # close once what is to be written is written
        self.closed = False
        self.events = 0

    @property
    def authenticated(self) -> bool:
        return not self.handshaking and self.auth is None

    def take_frames(self, max_request_bytes: int) -> tuple[list[bytes], bool]:
        """The complete frames buffered (one at a time during SASL, whose frames have their own limit), and whether
        a frame too large came next (the connection is closed after the ones before it are answered)."""
        limit = self.auth.max_receive_size if self.auth is not None else max_request_bytes
        frames, at, too_large = self.held, 0, False
        self.held = []
        with memoryview(self.inbuf) as view:
            while len(view) - at >= 4 and not (self.auth is not None and frames):
                (size,) = _SIZE.unpack_from(view, at)
                if size < 0 or size > limit:
                    log.warning("closing %s: a request of %d bytes (%s is %d)", self.peer, size,
                                "socket.request.max.bytes" if self.auth is None else "sasl.server.max.receive.size",
                                limit)
                    too_large = True
                    break
                if len(view) - at < 4 + size:
                    break
                frames.append(bytes(view[at + 4:at + 4 + size]))
                at += 4 + size
        del self.inbuf[:at]
        return frames, too_large


class _RequestThreads:
    """Kafka's ``KafkaRequestHandlerPool``: ``n`` daemon threads running what the network thread hands them."""

    def __init__(self, n: int) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._run, name=f"deltalog-request-handler-{i}", daemon=True)
                         for i in range(n)]
        for t in self._threads:
            t.start()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    def stop(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)


class _Handlers:
    """The requests of one connection turned into response frames, on a request thread."""

    def __init__(self, apis: KafkaApis, metrics: RequestMetrics | None = None) -> None:
        self.apis = apis
        self.metrics = metrics

    def _answered(self, req: p.Request, response: Any, frame: bytes) -> bytes:
        """``frame`` (the encoded ``response``), counted in the request metrics when they are kept."""
        self._count(req, response, len(frame))
        return frame

    def _count(self, req: p.Request, response: Any, response_bytes: int) -> None:
        self._record(req.api_key, req.api_version, req.size, response, response_bytes, req.received)

    def _record(self, api_key: int, version: int, size: int, response: Any, response_bytes: int,
                received: float) -> None:
        """One request of a served API in the request metrics, at the version its header asked for (Kafka's
        ``RequestMetrics``, one per API key: an ``UNSUPPORTED_VERSION`` answer and SASL's requests count too)."""
        if self.metrics is not None and api_key in p.SERVED:
            self.metrics.record(p.SERVED[api_key].request, version, size, response, response_bytes,
                                1000 * (time.monotonic() - received))

    def _unsupported(self, req: p.Unsupported, size: int, received: float, peer: Any) -> bytes | bool:
        """The frame of :func:`unsupported_response`, counted; or False: close the connection."""
        version, response = unsupported_response(req)
        if version is None:
            log.warning("closing %s: API key %d v%d is not served", peer, req.api_key, req.api_version)
            return False
        frame = p.encode_response(req.api_key, version, req.correlation_id, response)
        self._record(req.api_key, req.api_version, size, response, len(frame), received)
        return frame

    def authenticate(self, ch: _Channel, frame: bytes) -> _Done:
        received = time.monotonic()
        token, close = ch.auth.receive(frame)
        if ch.auth.answered is not None and token is not None:
            api_key, version, response = ch.auth.answered
            self._record(api_key, version, len(frame), response, len(token), received)
        return _Done(out=[token] if token is not None else [], close=close)

    def answers(self, frames: list[bytes], peer: Any, principal: str = "User:ANONYMOUS", host: str = "") -> _Done:
        """The response frames to ``frames``, in order; consecutive Produce requests among them are handled together
        (:meth:`KafkaApis.handle_produces`); a Fetch that must wait parks the rest behind it."""
        done = _Done()
        produces: list[p.Request] = []
        for i, frame in enumerate(frames):
            received = time.monotonic()
            try:
                req = p.parse_request(frame)
                if isinstance(req, p.Request):
                    req.principal, req.host = principal, host
                    req.size, req.received = len(frame), time.monotonic()
            except p.ProtocolError as e:
                if self._flush(produces, peer, done):
                    log.warning("closing %s: %s", peer, e)
                    done.close = True
                return done
            if not isinstance(req, p.Unsupported) and req.api_key == _PRODUCE:
                produces.append(req)
                continue
            if not self._flush(produces, peer, done):
                return done
            produces = []
            if isinstance(req, p.Unsupported):
                answer = self._unsupported(req, len(frame), received, peer)
            elif req.api_key == _FETCH:
                parked = self._try_fetch(req, fetch_deadline(req), peer)
                if isinstance(parked, _Parked):
                    parked.rest = frames[i + 1:]
                    done.parked = parked
                    return done
                answer = parked
            else:
                answer = self._call(lambda r=req: self.apis.handle(r), req, peer)
                done.wrote = done.wrote or req.api_key in _WRITES
            if answer is False:
                done.close = True
                return done
            if isinstance(answer, bytes):
                done.out.append(answer)
        self._flush(produces, peer, done)
        return done

    def _try_fetch(self, req: p.Request, deadline: float, peer: Any) -> bytes | bool | _Parked:
        """A Fetch's response frame (False: close), or the Fetch parked to wait for records."""
        try:
            response, ready = self.apis.try_fetch(req)
            if not ready and time.monotonic() < deadline:
                return _Parked(req, deadline, response, self.apis.fetch_versions(req))
        except Exception:  # a handler's bug must not take the endpoint down; Kafka closes the connection too
            log.exception("closing %s: handling API key %d v%d failed", peer, req.api_key, req.api_version)
            return False
        return self._answered(req, response, p.encode_response(req.api_key, req.api_version, req.correlation_id,
                                                               response))

    def retry_fetch(self, parked: _Parked, peer: Any) -> _Done:
        """A parked Fetch looked at again: read again only if a partition has a commit since; at its deadline it is
        answered with what there is."""
        req = parked.request
        last = time.monotonic() >= parked.deadline
        try:
            changed = not parked.versions or any(log.has_commit_after(v) for log, v in parked.versions)
        except Exception:  # noqa: BLE001 - a storage error: read the partitions, which reports it per partition
            changed = True
        if not changed:
            if not last:
                return _Done(parked=parked)
            return _Done(out=[self._answered(req, parked.response, p.encode_response(
                req.api_key, req.api_version, req.correlation_id, parked.response))])
        answer = self._try_fetch(req, parked.deadline, peer)
        if isinstance(answer, _Parked):
            answer.rest = parked.rest
            return _Done(parked=answer)
        return _Done(close=True) if answer is False else _Done(out=[answer])

    def _flush(self, requests: list[p.Request], peer: Any, done: _Done) -> bool:
        """Handle the Produce requests gathered; False when the connection is to be closed."""
        if not requests:
            return True
        done.wrote = True
        try:
            responses = self.apis.handle_produces(requests)
        except Exception:  # a handler's bug must not take the endpoint down; Kafka closes the connection too
            log.exception("closing %s: handling %d Produce requests failed", peer, len(requests))
            done.close = True
            return False
        for req, response in zip(requests, responses, strict=True):
            if response is not None:
                done.out.append(self._answered(req, response, p.encode_response(
                    req.api_key, req.api_version, req.correlation_id, response)))
            else:  # acks=0: no response, still a request served
                self._count(req, None, 0)
        return True

    def _call(self, handler: Callable[[], Any], req: p.Request, peer: Any) -> bytes | bool | None:
        """The response frame; None for no response (or a Fetch to park: the handler answered None); False to close."""
        try:
            response = handler()
            if response is None:
                return None
            return self._answered(req, response, p.encode_response(req.api_key, req.api_version, req.correlation_id,
                                                                   response))
        except Exception:  # a handler's bug must not take the endpoint down; Kafka closes the connection too
            log.exception("closing %s: handling API key %d v%d failed", peer, req.api_key, req.api_version)
            return False


def unsupported_response(req: p.Unsupported) -> tuple[int, Any] | tuple[None, None]:
    """Kafka's ``UNSUPPORTED_VERSION`` answer to an API key or version that is not served (see the module doc): the
    version to encode it at and the response, or (None, None) when there is none to give (the connection closes)."""
    if req.api_key == p.API_VERSIONS_KEY:
        return 0, p.api_versions_response(0, p.UNSUPPORTED_VERSION)
    api = p.SERVED.get(req.api_key)
    if api is not None and 0 <= req.api_version <= api.response.max_version:
        cls = api.response[req.api_version]
        if "error_code" in cls.fields and cls.fields["error_code"].for_version_q(req.api_version):
            return req.api_version, cls(error_code=p.UNSUPPORTED_VERSION)
    return None, None


class _NetworkThread:
    """The selector loop: accepts, reads, writes, times out, and hands complete requests to the request threads."""

    def __init__(self, listener: socket.socket, handlers: _Handlers, security: ListenerSecurity,
                 scram_lookup: Any, limits: ConnectionLimits, max_request_bytes: int) -> None:
        self.listener = listener
        self.handlers = handlers
        self.security = security
        self.scram_lookup = scram_lookup
        self.limits = limits
        self.max_request_bytes = max_request_bytes
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.channels: set[_Channel] = set()
        self.per_ip: dict[str, int] = {}
        self._done: queue.SimpleQueue[tuple[_Channel, _Done]] = queue.SimpleQueue()
        self._timers: list[tuple[float, int, _Channel, int]] = []
        self._seq = itertools.count()
        self.threads = _RequestThreads(limits.num_io_threads)
        self.stop = threading.Event()
        self.started = threading.Event()
        self.stopped = threading.Event()

    def wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # the pipe is full: the loop is woken already

    # -- the loop ------------------------------------------------------------------------------------------------

    def run(self) -> None:
        self.started.set()
        next_sweep = time.monotonic() + _SWEEP_S
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                timeout = min(next_sweep, self._timers[0][0] if self._timers else next_sweep) - now
                for key, mask in self.selector.select(max(0.0, timeout)):
                    if key.data is None:
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        self._ready(key.data, mask)
                self._completions()
                now = time.monotonic()
                self._due_fetches(now)
                if now >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + _SWEEP_S
        finally:
            for ch in list(self.channels):
                self._close(ch)
            self.threads.stop()
            self.selector.close()
            self._wake_r.close()
            self._wake_w.close()
            self.stopped.set()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _accept(self) -> None:
        try:
            sock, peer = self.listener.accept()
        except BlockingIOError:
            return
        except OSError as e:  # out of file descriptors (EMFILE): the kernel keeps the connection queued meanwhile
            log.warning("cannot accept a connection: %s", e)
            time.sleep(0.1)  # not a busy loop on a listening socket that stays readable
            return
        ip = peer[0] if isinstance(peer, tuple) else str(peer)
        if len(self.channels) >= self.limits.max_connections:
            log.warning("closing %s: the endpoint holds max.connections=%d connections", peer,
                        self.limits.max_connections)
            sock.close()
            return
        if self.per_ip.get(ip, 0) >= self.limits.max_connections_per_ip:
            log.warning("closing %s: %s holds max.connections.per.ip=%d connections", peer, ip,
                        self.limits.max_connections_per_ip)
            sock.close()
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tls = self.security.ssl_context is not None
        if tls:
            try:
                sock = self.security.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except (ssl.SSLError, OSError) as e:
                log.warning("closing %s: TLS failed: %s", peer, e)
                sock.close()
                return
        ch = _Channel(sock, peer, time.monotonic(), tls=tls,
                      auth=self.security.authenticator(self.scram_lookup, peer))
        self.channels.add(ch)
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        self._interest(ch)
        if tls:
            self._handshake(ch)

    def _ready(self, ch: _Channel, mask: int) -> None:
        if ch.closed:
            return
        if ch.handshaking:
            self._handshake(ch)
            return
        if mask & selectors.EVENT_WRITE:
            self._write(ch)
        if mask & selectors.EVENT_READ and not ch.closed:
            self._read(ch)
        if not ch.closed:
            self._dispatch(ch)

    # -- TLS, reads, writes ---------------------------------------------------------------------------------------

    def _handshake(self, ch: _Channel) -> None:
        try:
            ch.sock.do_handshake()
        except ssl.SSLWantReadError:
            ch.handshake_wants_write = False
        except ssl.SSLWantWriteError:
            ch.handshake_wants_write = True
        except (ssl.SSLError, OSError) as e:
            log.warning("closing %s: TLS handshake failed: %s", ch.peer, e)
            self._close(ch)
            return
        else:
            ch.handshaking = False
            ch.last_active = time.monotonic()
            self._read(ch)  # the client may have sent its first request with the end of the handshake
            if not ch.closed:
                self._dispatch(ch)
            return
        self._interest(ch)

    def _read(self, ch: _Channel) -> None:
        while len(ch.inbuf) < READ_AHEAD or not ch.busy:
            try:
                chunk = ch.sock.recv(_CHUNK)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except (ConnectionError, OSError) as e:
                log.info("connection %s ended: %s", ch.peer, e)
                self._close(ch)
                return
            if not chunk:
                if ch.inbuf and not ch.busy:
                    log.info("%s disconnected in the middle of a request; nothing of it was applied", ch.peer)
                self._close(ch)
                return
            ch.inbuf += chunk
            ch.last_active = time.monotonic()
            if not ch.busy and len(ch.inbuf) >= READ_AHEAD:
                break  # handle these first: the rest waits in the socket

    def _write(self, ch: _Channel) -> None:
        while ch.out:
            try:
                n = ch.sock.send(ch.out[0])
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                break
            except (ConnectionError, OSError) as e:
                log.info("connection %s ended: %s", ch.peer, e)
                self._close(ch)
                return
            ch.last_active = time.monotonic()
            if n == len(ch.out[0]):
                ch.out.popleft()
            else:
                ch.out[0] = ch.out[0][n:]
        if not ch.out and ch.closing:
            self._close(ch)
            return
        self._interest(ch)

    def _interest(self, ch: _Channel) -> None:
        if ch.closed:
            return
        if ch.handshaking:
            events = selectors.EVENT_WRITE if ch.handshake_wants_write else selectors.EVENT_READ
        else:
            events = 0 if ch.closing or (ch.busy and len(ch.inbuf) >= READ_AHEAD) else selectors.EVENT_READ
            if ch.out:
                events |= selectors.EVENT_WRITE
        if events == ch.events:
            return
        if ch.events == 0:
            self.selector.register(ch.sock, events, ch)
        elif events == 0:
            self.selector.unregister(ch.sock)
        else:
            self.selector.modify(ch.sock, events, ch)
        ch.events = events

    def _close(self, ch: _Channel) -> None:
        if ch.closed:
            return
        ch.closed = True
        if ch.events:
            self.selector.unregister(ch.sock)
            ch.events = 0
        try:
            ch.sock.close()
        except OSError:
            pass
        self.channels.discard(ch)
        left = self.per_ip.get(ch.ip, 1) - 1
        if left:
            self.per_ip[ch.ip] = left
        else:
            self.per_ip.pop(ch.ip, None)

    # -- requests ----------------------------------------------------------------------------------------------

    def _dispatch(self, ch: _Channel) -> None:
        """Hand the connection's complete requests to a request thread, unless it is muted (requests being
        handled, a Fetch parked, or answers not yet written)."""
        if ch.busy or ch.out or ch.closing or ch.closed or ch.handshaking:
            self._interest(ch)
            return
        frames, too_large = ch.take_frames(self.max_request_bytes)
        if not frames:
            if too_large:
                self._close(ch)
            else:
                self._interest(ch)
            return
        ch.busy = True
        self._interest(ch)
        handlers = self.handlers
        if ch.auth is not None:
            job = lambda: handlers.authenticate(ch, frames[0])  # noqa: E731 - one frame at a time during SASL
        else:
            job = lambda: handlers.answers(frames, ch.peer, ch.principal, ch.ip)  # noqa: E731
        self.threads.submit(lambda: self._run(ch, job, too_large))

    def _run(self, ch: _Channel, job: Callable[[], _Done], too_large: bool = False) -> None:
        """On a request thread: ``job``, its outcome handed back to the network thread."""
        try:
            done = job()
        except Exception:  # noqa: BLE001 - a bug in one connection's handling closes that connection only
            log.exception("closing %s: handling its requests failed", ch.peer)
            done = _Done(close=True)
        if too_large and done.parked is None:
            done.close = True
        self._done.put((ch, done))
        self.wake()

    def _completions(self) -> None:
        woken = False
        while True:
            try:
                ch, done = self._done.get_nowait()
            except queue.Empty:
                break
            woken = woken or done.wrote
            if ch.closed:
                continue
            ch.busy = False
            if ch.auth is not None and ch.auth.complete:
                ch.principal = f"User:{ch.auth.principal}"
                ch.auth = None
            ch.out.extend(memoryview(b) for b in done.out)
            if done.close:
                ch.closing = True
            if done.parked is not None and not done.close:
                ch.busy = True
                ch.parked = done.parked
                ch.held = done.parked.rest + ch.held
                done.parked.rest = []
                ch.park_seq += 1
                due = min(done.parked.deadline, time.monotonic() + FETCH_POLL_S)
                heapq.heappush(self._timers, (due, next(self._seq), ch, ch.park_seq))
            self._write(ch)
            if not ch.closed:
                self._dispatch(ch)
        if woken:  # an append here: every parked Fetch looks again now, as Kafka's purgatory is checked on append
            now = time.monotonic()
            for ch in self.channels:
                if ch.parked is not None:
                    ch.park_seq += 1
                    heapq.heappush(self._timers, (now, next(self._seq), ch, ch.park_seq))

    def _due_fetches(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            _, _, ch, seq = heapq.heappop(self._timers)
            if ch.closed or ch.parked is None or seq != ch.park_seq:
                continue  # closed, answered, or looked at again since
            parked, ch.parked = ch.parked, None
            ch.park_seq += 1
            self.threads.submit(lambda ch=ch, parked=parked, h=self.handlers: self._run(
                ch, lambda: h.retry_fetch(parked, ch.peer)))

    def _sweep(self, now: float) -> None:
        """Close connections idle for ``connections.max.idle.ms`` (Kafka's ``Selector`` expiry) and those not
        authenticated within the authentication time limit."""
        idle_s = self.limits.connections_max_idle_ms / 1000
        auth_s = self.limits.authentication_timeout_ms / 1000
        for ch in list(self.channels):
            if not ch.authenticated and now - ch.created > auth_s:
                log.warning("closing %s: not authenticated within %d ms (deltalog.authentication.timeout.ms)",
                            ch.peer, self.limits.authentication_timeout_ms)
                self._close(ch)
            elif not ch.busy and now - ch.last_active > idle_s:
                log.info("closing %s: idle for connections.max.idle.ms=%d", ch.peer,
                         self.limits.connections_max_idle_ms)
                self._close(ch)


class SocketServer:
    """A Kafka endpoint on ``store`` listening on ``host``:``port`` (0: an ephemeral port, see :attr:`port`).

    :meth:`start` serves in a background thread; :meth:`serve_forever` in the calling one; :meth:`shutdown` stops
    the network thread (closing every connection) and returns once it has ended; :meth:`close` closes the listening
    socket. A request being handled when the process ends lands whole or not at all (one Delta commit).
    """

    def __init__(self, store: ServedStore, host: str = "127.0.0.1", port: int = 9092, *,
                 advertised_host: str | None = None, max_request_bytes: int = p.DEFAULT_MAX_REQUEST_BYTES,
                 security: ListenerSecurity | None = None, limits: ConnectionLimits | None = None,
                 config: BrokerConfig | None = None, metrics: RequestMetrics | None = None,
                 **registration: Any) -> None:
        """``security`` (:mod:`deltalog.server.security`): TLS and SASL; without it PLAINTEXT, loopback addresses
        only. ``limits``: :class:`~deltalog.server.limits.ConnectionLimits` (Kafka's defaults when None);
        ``config``: :class:`~deltalog.server.broker_config.BrokerConfig` (topic auto-creation, DescribeConfigs).
        ``metrics``: a :class:`~deltalog.server.request_metrics.RequestMetrics` the request threads record every
        request in (``deltalog serve --metrics-port``); None records nothing.
        ``registration``: ``node_id``, ``session_timeout_ms``, ``heartbeat_interval_ms`` of the endpoint's entry
        among the store's live endpoints (:func:`deltalog.server.placement.for_endpoint`)."""
        record_batches.warm_up()
        self.security = security or ListenerSecurity(host=host, port=port)
        self.security.host, self.security.port = host, port
        self.security.check_bind()
        self.limits = limits or ConnectionLimits()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((host, port))
            self._socket.listen(self.limits.listen_backlog)
            self._socket.setblocking(False)
        except BaseException:
            self._socket.close()
            raise
        self.host = host
        self.port = self._socket.getsockname()[1]
        advertised = (advertised_host or host, self.port)
        if self.security.advertised is not None:  # advertised.listeners: what Metadata and the registry give clients
            advertised = (self.security.advertised[0], self.security.advertised[1] or self.port)
        try:
            self.registry, placement = for_endpoint(store, advertised, self.security.name, **registration)
        except BaseException:
            self._socket.close()
            raise
        self.node_id = self.registry.node_id
        self.apis = KafkaApis(store, advertised, placement, config=config, listener=self.security.name)
        scram_lookup = ScramCredentials(store.storage).get if self.security.is_sasl else None
        self._network = _NetworkThread(self._socket, _Handlers(self.apis, metrics), self.security, scram_lookup,
                                       self.limits, max_request_bytes)
        self.metrics = metrics
        if metrics is not None:
            metrics.listener = self.security.name
            metrics.connections = lambda: self.connections
        self._thread: threading.Thread | None = None

    @property
    def connections(self) -> int:
        """Connections held now."""
        return len(self._network.channels)

    @property
    def ready(self) -> bool:
        """Whether the endpoint answers clients: its network thread runs and has not been told to stop (what
        ``deltalog serve``'s readiness endpoint reports)."""
        return self._network.started.is_set() and not self._network.stop.is_set()

    def start(self) -> SocketServer:
        self._thread = threading.Thread(target=self._network.run, name="deltalog-network-thread", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._network.run()

    def shutdown(self) -> None:
        """End the network thread (from another thread than the one in :meth:`serve_forever`)."""
        self._network.stop.set()
        self._network.wake()
        if self._thread is not None:
            self._thread.join()
        elif self._network.started.is_set():
            self._network.stopped.wait()
        self.apis.close()

    def close(self) -> None:
        """Close the listening socket (after :meth:`shutdown`, or when the loop never ran) and leave the store's live
        endpoints (a clean shutdown: the others take over its groups at once, not after its session timeout)."""
        self.registry.deregister()
        self._socket.close()

    def __enter__(self) -> SocketServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.close()
