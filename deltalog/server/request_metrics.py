"""The endpoint's request metrics, as Kafka's broker keeps them (``kafka.network.RequestMetrics``,
``RequestChannel.updateErrorMetrics`` and the socket server's ``socket-server-metrics``).

:class:`RequestMetrics` counts, per request type (Kafka's name: ``Produce``, ``Fetch``, ...) and version, the requests
answered, their total time from decode to the response frame (``TotalTimeMs``), their sizes (``RequestBytes``), the
bytes in and out, and every error code their responses carry (``ErrorsPerSec``, ``NONE`` included, as Kafka counts
it). It is plain Python behind one lock, so the request threads pay a few dictionary updates per request; nothing
here imports ``prometheus_client``. :func:`collector` turns a snapshot into Prometheus metric families at scrape
time, named as the Prometheus JMX exporter's usual rules name Kafka's MBeans (``kafka_network_requestmetrics_*``,
``kafka_server_socket_server_metrics_*``), beside the cleaner's (:mod:`deltalog.cleaner.prometheus`).
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

#: Upper bounds of the ``TotalTimeMs`` buckets, milliseconds (a parked Fetch waits up to its ``max_wait_ms``).
TIME_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
#: Upper bounds of the ``RequestBytes`` buckets.
BYTES_BUCKETS = (128, 1024, 8192, 65536, 524288, 1048576, 8388608, 104857600)

#: Kafka's error names of the codes the endpoint answers with (``Errors``), for the ``error`` label.
_ERROR_NAMES: dict[int, str] = {}


def error_name(code: int) -> str:
    """Kafka's name of an error code (``NONE``, ``UNKNOWN_TOPIC_OR_PARTITION``, ...); the number when unknown."""
    if not _ERROR_NAMES:
        from kafka import errors  # kafka-python: the server extra the endpoint runs on

        names = {0: "NONE"}
        for cls in vars(errors).values():
            errno, message = getattr(cls, "errno", None), getattr(cls, "message", None)
            if isinstance(errno, int) and isinstance(message, str):
                names.setdefault(errno, message)
        _ERROR_NAMES.update(names)  # whole, so another request thread never reads half of it
    return _ERROR_NAMES.get(code, str(code))


def request_name(request_class: type) -> str:
    """Kafka's ``request`` label: the API's name (``ProduceRequest`` -> ``Produce``)."""
    name = request_class.__name__
    return name[: -len("Request")] if name.endswith("Request") else name


def error_codes(response: Any, depth: int = 4) -> Iterator[int]:
    """Every ``error_code`` in a response (the top level's, each topic's, each partition's), as Kafka's
    ``AbstractResponse.errorCounts`` gives them."""
    code = getattr(response, "error_code", None)
    if isinstance(code, int):
        yield code
    if depth == 0:
        return
    for name in getattr(response, "__slots__", ()):
        value = getattr(response, name, None)
        if isinstance(value, list):
            for item in value:
                if hasattr(item, "__slots__"):
                    yield from error_codes(item, depth - 1)


@dataclass
class _Histogram:
    bounds: tuple[int, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative ``(le, count)`` pairs, as Prometheus exposes a histogram."""
        counts = self.counts or [0] * (len(self.bounds) + 1)
        out, running = [], 0
        for bound, c in zip((*map(str, self.bounds), "+Inf"), counts, strict=True):
            running += c
            out.append((bound, running))
        return out


class RequestMetrics:
    """What the request threads record and a scrape reads (see the module doc). ``connections``: a function
    giving the connections held now (the socket server's count)."""

    def __init__(self, listener: str = "PLAINTEXT") -> None:
        self.listener = listener
        self.connections: Callable[[], int] = lambda: 0
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, int], int] = defaultdict(int)
        self._errors: dict[tuple[str, str], int] = defaultdict(int)
        self._time: dict[str, _Histogram] = {}
        self._bytes: dict[str, _Histogram] = {}
        self.incoming_bytes = 0
        self.outgoing_bytes = 0

    def record(self, request_class: type, version: int, request_bytes: int, response: Any, response_bytes: int,
               total_time_ms: float) -> None:
        """One request answered (``response``: the response message, or None when none is sent)."""
        name = request_name(request_class)
        codes = list(error_codes(response)) if response is not None else []
        with self._lock:
            self._requests[(name, version)] += 1
            for code in codes:
                self._errors[(name, error_name(code))] += 1
            self._time.setdefault(name, _Histogram(TIME_BUCKETS_MS)).observe(total_time_ms)
            self._bytes.setdefault(name, _Histogram(BYTES_BUCKETS)).observe(request_bytes)
            self.incoming_bytes += request_bytes
            self.outgoing_bytes += response_bytes

    def snapshot(self) -> dict[str, Any]:
        """A consistent copy: what one scrape exposes."""
        with self._lock:
            return {"requests": dict(self._requests), "errors": dict(self._errors),
                    "time": {k: (h.buckets(), h.total, h.n) for k, h in self._time.items()},
                    "bytes": {k: (h.buckets(), h.total, h.n) for k, h in self._bytes.items()},
                    "incoming_bytes": self.incoming_bytes, "outgoing_bytes": self.outgoing_bytes,
                    "connections": self.connections()}


def collector(metrics: RequestMetrics) -> Any:
    """A ``prometheus_client`` collector reading ``metrics`` at each scrape (imported only by ``serve
    --metrics-port``)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    class _Collector:
        def collect(self) -> Iterator[Any]:
            s = metrics.snapshot()
            requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                           "requests answered (kafka.network RequestMetrics RequestsPerSec)",
                                           labels=["request", "version"])
            for (name, version), n in sorted(s["requests"].items()):
                requests.add_metric([name, str(version)], n)
            yield requests
            errors = CounterMetricFamily("kafka_network_requestmetrics_errors",
                                         "error codes in responses, NONE included (RequestMetrics ErrorsPerSec)",
                                         labels=["request", "error"])
            for (name, error), n in sorted(s["errors"].items()):
                errors.add_metric([name, error], n)
            yield errors
            for key, metric, text in (("time", "kafka_network_requestmetrics_totaltimems",
                                       "milliseconds from a request's decode to its response (RequestMetrics TotalTimeMs)"),
                                      ("bytes", "kafka_network_requestmetrics_requestbytes",
                                       "request sizes in bytes (RequestMetrics RequestBytes)")):
                family = HistogramMetricFamily(metric, text, labels=["request"])
                for name, (buckets, total, _n) in sorted(s[key].items()):
                    family.add_metric([name], buckets, total)
                yield family
            labels = ["listener", "networkProcessor"]
            where = [metrics.listener, "0"]
            for name, value, text, kind in (
                    ("incoming_byte", s["incoming_bytes"], "bytes of requests read", CounterMetricFamily),
                    ("outgoing_byte", s["outgoing_bytes"], "bytes of responses written", CounterMetricFamily),
                    ("connection_count", s["connections"], "connections held now", GaugeMetricFamily)):
                family = kind(f"kafka_server_socket_server_metrics_{name}", f"{text} (socket-server-metrics)",
                              labels=labels)
                family.add_metric(where, value)
                yield family

    return _Collector()
