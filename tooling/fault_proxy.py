"""A fault-injecting HTTP reverse proxy for an object store's API (moto's S3 server in the tests).

Why: an object store's client can lose the answer to a write that landed (a timeout, a reset connection, a
gateway's 500 after the backend stored the object), and then retries it or reports an error. A Delta commit, a
conditional put or a compare-and-swap whose answer is lost must be resolved by reading what the store holds, and
the only honest way to test that is to lose real answers to real writes. The proxy sits on 127.0.0.1 between the
clients (delta-rs, obstore, Spark tasks: anything given its URL as the endpoint) and the store, forwards every
request, and fails the ones a :class:`Fault` chooses:

- ``when="before"``: the request never reaches the store; the client gets a 500 (``action="500"``), S3's 403
  ``AccessDenied`` (``action="403"``: what read-only credentials get for a write) or its connection is closed with
  no answer (``action="drop"``);
- ``when="after"``: the request is forwarded, the store applies it (the write lands), and then the client gets a
  500 or a closed connection instead of the store's answer;
- ``when="late"``: the client gets the failure at once, and the request reaches the store ``delay_s`` seconds later
  (a write held up in a gateway or a retrying client's queue): it lands after its writer was told it failed.

A fault chooses requests by method, a regular expression searched in the request's path (bucket and key,
URL-decoded), and fires at most ``times`` times, each matching request with ``probability`` (drawn from the
proxy's seeded random generator, so a run is repeatable in the sequence of draws). Every request is logged in
:attr:`FaultProxy.requests` with the fault it got, so a test can check that its fault fired.

The proxy is bounded: it runs in a process of its own (see :class:`FaultProxy` for why), listens on loopback only,
forwards to a loopback endpoint only, serves each connection in a daemon thread, and stops itself after
``max_seconds`` or when the process that started it is gone, even if its owner never stops it. It needs nothing
but the standard library.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

LOOPBACK = "127.0.0.1"
BEFORE, AFTER, LATE = "before", "after", "late"
ANSWER_500, DROP = "500", "drop"
#: S3's answer to a request the credentials do not allow (read-only credentials writing): not retried by clients.
DENIED = "403"
#: Headers that belong to one hop, not to the request or answer forwarded.
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
               "content-length"}
#: Requests to this path prefix control the proxy (add and clear faults, read the log); never forwarded.
CONTROL_PATH = "/__fault_proxy__/"
#: The request log keeps this many of the last requests.
REQUEST_LOG_LIMIT = 20_000
_ERROR_BODY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
               b"<Message>fault injected by tooling.fault_proxy</Message></Error>")
_DENIED_BODY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
                b"<Message>Access Denied (fault injected by tooling.fault_proxy)</Message></Error>")


@dataclass
class Fault:
    """Which requests to fail, when, and how (see the module's docstring)."""

    method: str = "PUT"
    key: str = ""
    when: str = AFTER
    action: str = ANSWER_500
    times: int | None = 1
    probability: float = 1.0
    delay_s: float = 2.0
    fired: int = 0
    _pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.when not in (BEFORE, AFTER, LATE):
            raise ValueError(f"when must be {BEFORE!r}, {AFTER!r} or {LATE!r}, not {self.when!r}")
        if self.action not in (ANSWER_500, DROP, DENIED):
            raise ValueError(f"action must be {ANSWER_500!r}, {DENIED!r} or {DROP!r}, not {self.action!r}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be in [0, 1], not {self.probability!r}")
        self._pattern = re.compile(self.key)

    def matches(self, method: str, path: str) -> bool:
        return (self.method in ("*", method) and (self.times is None or self.fired < self.times)
                and self._pattern.search(path) is not None)


@dataclass(frozen=True)
class Request:
    """One request the proxy saw: its method, path, and the fault it got (None: forwarded and answered)."""

    method: str
    path: str
    fault: str | None
    status: int | None


class _State:
    """The proxy's faults and request log, in the proxy's process."""

    def __init__(self, upstream_host: str, upstream_port: int, seed: int) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.faults: list[Fault] = []
        self.requests: list[Request] = []
        self.random = random.Random(seed)
        self.lock = threading.Lock()

    def choose(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path) and (fault.probability >= 1.0
                                                    or self.random.random() < fault.probability):
                    fault.fired += 1
                    return fault
        return None

    def log(self, method: str, path: str, fault: Fault | None, status: int | None) -> None:
        with self.lock:
            self.requests.append(Request(method, path, None if fault is None else f"{fault.when}:{fault.action}",
                                         status))
            del self.requests[:-REQUEST_LOG_LIMIT]

    def control(self, command: str, payload: Any) -> Any:
        with self.lock:
            if command == "add":
                self.faults.append(Fault(**payload))
                return len(self.faults) - 1
            if command == "clear":
                self.faults.clear()
                return None
            if command == "fired":
                return [f.fired for f in self.faults]
            if command == "requests":
                return [asdict(r) for r in self.requests]
        raise ValueError(f"unknown control command {command!r}")


class FaultProxy:
    """A reverse proxy on ``127.0.0.1`` in front of ``upstream`` (an ``http://host:port`` URL on loopback).

    It runs in a process of its own: delta-rs calls some of its operations without releasing Python's GIL
    (``DeltaTable.history``, measured), so a proxy served by threads of the calling process would stall until the
    client's timeout. The test talks to it over HTTP at ``/__fault_proxy__/<command>`` on the proxy's port.
    """

    def __init__(self, upstream: str, *, seed: int = 0, max_seconds: float = 900.0) -> None:
        parsed = urlparse(upstream)
        if parsed.scheme != "http" or parsed.hostname not in (LOOPBACK, "localhost"):
            raise ValueError(f"the proxy forwards to a loopback http:// endpoint only, not {upstream!r}")
        self.upstream = upstream
        self.seed = seed
        self.max_seconds = max_seconds
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    # -- faults ------------------------------------------------------------------------------------------

    def add(self, **kwargs: Any) -> int:
        """Add a :class:`Fault` (keyword arguments as its fields); returns its index for :meth:`fired`."""
        Fault(**kwargs)  # refuse a bad fault here, in the caller's process
        return self._control("add", kwargs)

    def clear(self) -> None:
        """Remove every fault: from now on every request is forwarded and answered."""
        self._control("clear", None)

    def fired(self) -> list[int]:
        """How many times each fault added since the last :meth:`clear` fired."""
        return self._control("fired", None)

    @property
    def requests(self) -> list[Request]:
        """The last requests the proxy saw (at most :data:`REQUEST_LOG_LIMIT`), oldest first."""
        return [Request(**r) for r in self._control("requests", None)]

    def faulted(self) -> list[Request]:
        """The logged requests that got a fault."""
        return [r for r in self.requests if r.fault is not None]

    def _control(self, command: str, payload: Any) -> Any:
        request = urllib.request.Request(f"{self.url}{CONTROL_PATH}{command}", data=json.dumps(payload).encode(),
                                         method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())

    # -- the process -------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the proxy is not started")
        return f"http://{LOOPBACK}:{self.port}"

    def storage_options(self, options: Mapping[str, str]) -> dict[str, str]:
        """``options`` (an S3 store's storage options) with the endpoint pointed at the proxy."""
        out = {k: v for k, v in options.items() if k.lower() not in ("aws_endpoint_url", "aws_endpoint")}
        out["aws_endpoint_url"] = self.url
        return out

    def start(self) -> FaultProxy:
        argv = [sys.executable, "-m", "tooling.fault_proxy", self.upstream, "--seed", str(self.seed),
                "--max-seconds", str(self.max_seconds), "--parent", str(os.getpid())]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])])}
        self._process = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
        assert self._process.stdout is not None
        line = self._process.stdout.readline().decode().strip()
        if not line.isdigit():
            self.stop()
            raise RuntimeError(f"the fault proxy did not start (it said {line!r})")
        self.port = int(line)
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _forward_late(owner: _State, delay_s: float, method: str, target: str, body: bytes,
                  headers: dict[str, str]) -> None:
    """Send a request its client was told failed to the store ``delay_s`` seconds later; the answer goes nowhere."""
    time.sleep(delay_s)
    conn = http.client.HTTPConnection(owner.upstream_host, owner.upstream_port, timeout=60)
    try:
        conn.request(method, target, body=body or None, headers=headers)
        conn.getresponse().read()
    except OSError:
        pass
    finally:
        conn.close()


class _Handler(BaseHTTPRequestHandler):
    state: _State
    protocol_version = "HTTP/1.1"  # keep-alive: the clients pool their connections
    timeout = 120  # an idle kept-alive connection ends its thread after this long


    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _fail(self, fault: Fault) -> None:
        if fault.action == DROP:
            self._drop()
        elif fault.action == DENIED:
            self._answer(403, _DENIED_BODY)
        else:
            self._answer(500, _ERROR_BODY)

    def _handle(self) -> None:
        owner = self.state
        body = self._body()
        path = unquote(urlparse(self.path).path)
        if path.startswith(CONTROL_PATH):
            self._control(path[len(CONTROL_PATH):], body)
            return
        fault = owner.choose(self.command, path)
        if fault is not None and fault.when == BEFORE:
            owner.log(self.command, path, fault, None)
            self._fail(fault)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        if fault is not None and fault.when == LATE:
            owner.log(self.command, path, fault, None)
            threading.Thread(target=_forward_late, args=(owner, fault.delay_s, self.command, self.path, body, headers),
                             daemon=True).start()
            self._fail(fault)
            return
        conn = http.client.HTTPConnection(owner.upstream_host, owner.upstream_port, timeout=60)
        try:
            conn.request(self.command, self.path, body=body or None, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
            status, answer_headers = answer.status, answer.getheaders()
        except OSError:
            owner.log(self.command, path, fault, None)
            self._drop()  # the store did not answer: neither does the proxy
            return
        finally:
            conn.close()
        owner.log(self.command, path, fault, status)
        if fault is not None:  # the store applied the request; its answer is lost
            self._fail(fault)
            return
        self.send_response(status)
        for k, v in answer_headers:
            if k.lower() not in _HOP_BY_HOP:
                self.send_header(k, v)
        if self.command == "HEAD":  # the size of the object, not of this (empty) answer
            length = next((v for k, v in answer_headers if k.lower() == "content-length"), "0")
            self.send_header("Content-Length", length)
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _control(self, command: str, body: bytes) -> None:
        try:
            data, status = json.dumps(self.state.control(command, json.loads(body or b"null"))).encode(), 200
        except (TypeError, ValueError) as e:
            data, status = json.dumps(str(e)).encode(), 400
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # Spark tasks and delta-rs open many connections at once



def serve(upstream: str, seed: int, max_seconds: float, parent: int | None) -> None:
    """Serve until stopped, ``max_seconds`` passed, or the ``parent`` process is gone; prints the port first."""
    parsed = urlparse(upstream)
    state = _State(parsed.hostname or LOOPBACK, parsed.port or 80, seed)

    class Handler(_Handler):
        pass

    Handler.state = state
    server = _Server((LOOPBACK, 0), Handler)
    print(server.server_address[1], flush=True)

    def watch() -> None:
        deadline = time.monotonic() + max_seconds
        while time.monotonic() < deadline and (parent is None or os.getppid() == parent):
            time.sleep(0.5)
        server.shutdown()

    threading.Thread(target=watch, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tooling.fault_proxy", description=__doc__.split("\n")[0])
    parser.add_argument("upstream", help="the store's endpoint, http://127.0.0.1:PORT")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    parser.add_argument("--parent", type=int, default=None, help="stop when this process is no longer the parent")
    args = parser.parse_args(argv)
    serve(args.upstream, args.seed, args.max_seconds, args.parent)


if __name__ == "__main__":
    main()
