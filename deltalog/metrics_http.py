"""The opt-in HTTP port of a long-running deltalog process (``deltalog serve``, ``deltalog cleaner run``,
``deltalog-cleaner``): Prometheus's ``/metrics``, and the two endpoints a script or an orchestrator polls,
``/health`` (the process answers: liveness) and ``/ready`` (it does its work: 200, else 503), each also under
Kubernetes' ``/healthz`` and ``/readyz``. The standard library's HTTP server on a daemon thread; the exposition text
comes from a function the caller passes (``prometheus_client`` stays with the callers that ask for metrics).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: The paths served, beside ``/metrics``.
HEALTH_PATHS = ("/health", "/healthz")
READY_PATHS = ("/ready", "/readyz")


def serve(port: int, address: str, metrics: Callable[[], tuple[bytes, str]],
          ready: Callable[[], bool] = lambda: True) -> ThreadingHTTPServer:
    """Serve on ``address:port`` (0: any free port; the server's ``server_port`` says which) from a daemon thread:
    ``metrics()`` gives the ``/metrics`` body and its content type; ``ready()`` the answer of ``/ready``. Stop it
    with ``shutdown()`` and ``server_close()``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, content_type = metrics()
                self._answer(200, body, content_type)
            elif path in HEALTH_PATHS:
                self._answer(200, b"ok\n")
            elif path in READY_PATHS:
                ok = ready()
                self._answer(200 if ok else 503, b"ready\n" if ok else b"not ready\n")
            else:
                self._answer(404, f"no {path}: /metrics, /health or /ready\n".encode())

        def _answer(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - a scrape a second is no log line
            pass

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="deltalog-metrics-http", daemon=True).start()
    return server
