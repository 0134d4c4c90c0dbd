"""``deltalog serve``: a Kafka endpoint on the store, in the foreground (see :mod:`deltalog.server`).

It prints one health line when it listens (the address, the store, what is served) and stops cleanly on SIGTERM or
Ctrl-C: the listening loop ends, the connections close, and every request already handed to a handler has finished
its Delta commit (a commit is atomic: a request cut by the stop writes all of its partition's batch or none).
Security is configured with Kafka's broker configs, as ``kafka-server-start.sh server.properties``:
``deltalog serve --config server.properties`` (``listeners=SASL_SSL://0.0.0.0:9093``, ``ssl.keystore.location``,
``sasl.enabled.mechanisms``, the listener's JAAS config, ...) and ``--override key=value`` (see
:mod:`deltalog.server.security`). Without TLS or SASL (a PLAINTEXT listener, ``--listen``) the endpoint listens on a
loopback address only, and says so.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.errors import DeltalogError, ProtocolError, UsageError

DEFAULT_LISTEN = "127.0.0.1:9092"
DEFAULT_PING_TIMEOUT_MS = 30_000
#: ApiVersions (api key 18), version 0: Kafka's first request of every client, answered before any authentication.
_API_VERSIONS_KEY, _API_VERSIONS_VERSION = 18, 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve", help="serve the store to Kafka clients (kcat, librdkafka, kafka-python) on a Kafka port",
        description="Listen on a Kafka port and serve the store with Kafka's wire protocol: ApiVersions, Metadata, "
        "Produce (plain and idempotent), Fetch, ListOffsets, CreateTopics, DeleteTopics, DescribeConfigs, DeleteRecords, "
        "consumer groups and their committed offsets, transactions, CreatePartitions, DeleteGroups, AlterConfigs, "
        "OffsetDelete, DescribeCluster; several endpoints on one store are one cluster (each registers in the "
        "store; leaders and coordinators spread among the live ones); see docs/kafka-endpoint.md. Runs in the "
        "foreground; one health line on start; SIGTERM or Ctrl-C stops it cleanly. TLS and SASL (PLAIN, "
        "SCRAM-SHA-256, SCRAM-SHA-512) are configured with Kafka's broker configs in a properties file (--config "
        "server.properties, as kafka-server-start.sh) or --override; without them, loopback addresses only.",
    )
    p.add_argument("--listen", metavar="HOST:PORT", default=None,
                   help=f"a PLAINTEXT listener on a loopback address (default {DEFAULT_LISTEN}; port 0: any free "
                   "port); the same as listeners=PLAINTEXT://HOST:PORT")
    p.add_argument("--config", metavar="FILE", dest="server_config", default=None,
                   help="Kafka broker configs (server.properties): listeners, advertised.listeners, ssl.*, "
                   "sasl.enabled.mechanisms, listener.name.<listener>.plain.sasl.jaas.config, ...")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="a broker config that wins over --config's (repeatable), as kafka-server-start.sh --override")
    p.add_argument("--jaas-config", metavar="FILE", default=None,
                   help="a JAAS file whose KafkaServer section (or <listener>.KafkaServer) lists PLAIN users "
                   "(user_alice=\"...\"), as Kafka's java.security.auth.login.config")
    p.add_argument("--plain-users", metavar="FILE", default=None,
                   help="PLAIN users, one user=password line each (deltalog's shorthand for the JAAS options)")
    p.add_argument("--socket-request-max-bytes", type=int, default=None, metavar="N",
                   help="Kafka's socket.request.max.bytes: a larger request closes its connection (default 104857600)")
    p.add_argument("--node-id", "--broker-id", dest="node_id", type=int, default=None, metavar="N",
                   help="Kafka's node.id (broker.id): this endpoint's id among the store's live endpoints (default: the "
                   "lowest free one)")
    p.add_argument("--broker-session-timeout-ms", type=int, default=None, metavar="MS",
                   help="Kafka's broker.session.timeout.ms: an endpoint that stops renewing its registration for this "
                   "long is no longer live, and the others take over its groups (default 9000)")
    p.add_argument("--metrics-port", type=common.whole_number(0), metavar="PORT", default=None,
                   help="serve Kafka's request metrics for Prometheus on PORT (/metrics: kafka_network_requestmetrics_*, "
                   "kafka_server_socket_server_metrics_*), with /health and /ready (200 once clients are answered, "
                   "503 before and while stopping) for scripts and orchestrators (default: no port; 0: any free port)")
    p.add_argument("--metrics-address", metavar="HOST", default="127.0.0.1",
                   help="the address --metrics-port listens on (default 127.0.0.1; 0.0.0.0 for a scraper elsewhere)")
    output.add_output_option(p, text="the health line: where it listens, the store, what is served",
                             json_help="the health line as one object: listening, store, security, node_id, apis")
    common.add_store_option(p)
    common.needs_extras(p, "server")
    p.set_defaults(func=serve)

    p = subparsers.add_parser(
        "ping", help="wait until a Kafka endpoint (deltalog serve, or a broker) answers; for scripts",
        description="Connect to HOST:PORT and send Kafka's ApiVersions request (what kafka-broker-api-versions "
        "sends) until it is answered: exit 0 as soon as the endpoint answers, 1 when --timeout-ms passes first. "
        "A script that starts 'deltalog serve &' runs 'deltalog ping' before its first client. PLAINTEXT "
        "listeners only (a TLS listener is reachable, not checked).",
    )
    p.add_argument("address", metavar="HOST:PORT", nargs="?", default=None,
                   help=f"the endpoint (default: --bootstrap-server, else {DEFAULT_LISTEN})")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", default=None, help="the same as HOST:PORT, as Kafka's "
                   "tools name it")
    p.add_argument("--timeout-ms", type=common.whole_number(0), default=DEFAULT_PING_TIMEOUT_MS, metavar="MS",
                   help=f"how long to keep trying (default {DEFAULT_PING_TIMEOUT_MS}; 0: one try)")
    output.add_output_option(p, text="one line: answered, and how long it took",
                             json_help="one object: address, answered, seconds, api_count")
    p.set_defaults(func=ping)


def server_properties(args: argparse.Namespace) -> dict[str, str]:
    """The broker configs: ``--config``'s file, then each ``--override``, then ``--listen`` as a PLAINTEXT listener."""
    from deltalog.server.security import load_properties

    props = load_properties(args.server_config) if args.server_config else {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--override {item!r} is not KEY=VALUE, e.g. --override listeners=SASL_SSL://0.0.0.0:9093")
        props[key.strip()] = value.strip()
    if args.listen is not None:
        if props.get("listeners"):
            raise UsageError(f"--listen and listeners={props['listeners']} both name the listener: give one")
        host, port = parse_listen(args.listen)
        props["listeners"] = f"PLAINTEXT://{'[' + host + ']' if ':' in host else host}:{port}"
    props.setdefault("listeners", f"PLAINTEXT://{DEFAULT_LISTEN}")
    return props


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen {value!r} is not HOST:PORT, e.g. {DEFAULT_LISTEN}")
    return host, int(port)


def serve(args: argparse.Namespace) -> int:
    from deltalog.errors import InvalidConfigError
    from deltalog.server import protocol
    from deltalog.server.broker_config import BrokerConfig
    from deltalog.server.limits import ConnectionLimits
    from deltalog.server.security import listener_security
    from deltalog.server.socket_server import SocketServer

    try:
        props = server_properties(args)
        security = listener_security(props, plain_users_file=args.plain_users, jaas_file=args.jaas_config)
        security.check_bind()
        limits = ConnectionLimits.from_properties(props)
        config = BrokerConfig.from_properties(props)
    except InvalidConfigError as e:
        raise UsageError(str(e)) from None
    if security.unused:
        print(f"deltalog serve: these configurations were supplied but are not used: {', '.join(security.unused)}",
              file=sys.stderr, flush=True)
    host, port = security.host, security.port
    store = common.open_store(args, create=True)
    max_bytes = args.socket_request_max_bytes or security.max_request_bytes or protocol.DEFAULT_MAX_REQUEST_BYTES
    if max_bytes <= 0:
        raise UsageError(f"--socket-request-max-bytes must be > 0, not {max_bytes}")
    registration = {} if args.node_id is None else {"node_id": args.node_id}
    if args.broker_session_timeout_ms is not None:
        from deltalog.server.registry import DEFAULT_HEARTBEAT_INTERVAL_MS

        timeout = args.broker_session_timeout_ms
        if timeout < 2:
            raise UsageError(f"--broker-session-timeout-ms must be at least 2 (ms), not {timeout}")
        registration.update(session_timeout_ms=timeout, heartbeat_interval_ms=min(DEFAULT_HEARTBEAT_INTERVAL_MS,
                                                                                  max(1, timeout // 3)))
    metrics = None
    if args.metrics_port is not None:
        from deltalog import extras
        from deltalog.server.request_metrics import RequestMetrics

        extras.require("metrics", "deltalog serve --metrics-port")
        metrics = RequestMetrics()
    server = SocketServer(store, host, port, max_request_bytes=max_bytes, security=security, limits=limits, config=config,
                          metrics=metrics, **registration)
    metrics_url = None
    if metrics is not None:
        http = _serve_metrics(server, metrics, args.metrics_port, args.metrics_address)
        metrics_url = f"http://{args.metrics_address}:{http.server_port}/metrics"
        print(f"deltalog serve: metrics on {metrics_url} (health /health, readiness /ready)", file=sys.stderr,
              flush=True)

    def stop(signum: int, frame: Any) -> None:
        # shutdown() waits for the loop serve_forever runs in this thread: ask for it from another thread
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    apis = [a.request.__name__.removesuffix("Request") for a in protocol.SERVED.values()]
    if output.wants_json(args):
        output.emit({"listening": f"{host}:{server.port}", "store": store.root, "security": security.describe(),
                     "listener": security.name, "security_protocol": security.protocol,
                     "sasl_mechanisms": list(security.mechanisms), "node_id": server.node_id, "apis": apis,
                     "metrics": metrics_url})
        sys.stdout.flush()
    else:
        print(f"deltalog serve: listening on {host}:{server.port} ({security.describe()}) for "
              f"store {store.root}; node id {server.node_id}; serving {', '.join(apis)}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    print("deltalog serve: stopped", file=sys.stderr, flush=True)
    return 0


def _serve_metrics(server: Any, metrics: Any, port: int, address: str) -> Any:
    """The metrics port of ``deltalog serve`` (:mod:`deltalog.metrics_http`): the request metrics at each scrape,
    ready while the endpoint answers clients."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    from deltalog import metrics_http
    from deltalog.server.request_metrics import collector

    registry = CollectorRegistry()
    registry.register(collector(metrics))
    return metrics_http.serve(port, address, lambda: (generate_latest(registry), CONTENT_TYPE_LATEST),
                              ready=lambda: server.ready)


def ping(args: argparse.Namespace) -> int:
    """``deltalog ping``: ApiVersions until answered (see the parser's description)."""
    import time

    if args.address is not None and args.bootstrap_server is not None and args.address != args.bootstrap_server:
        raise UsageError("give the endpoint once: HOST:PORT or --bootstrap-server")
    address = args.address or args.bootstrap_server or DEFAULT_LISTEN
    host, port = parse_listen(address.split(",")[0])
    started = time.monotonic()
    deadline = started + args.timeout_ms / 1000
    last = ""
    while True:
        try:
            count = api_versions(host, port, timeout_s=max(0.5, min(5.0, deadline - time.monotonic())))
        except (OSError, ProtocolError) as e:
            last = str(e) or type(e).__name__
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
            continue
        seconds = time.monotonic() - started
        if output.wants_json(args):
            output.emit({"address": f"{host}:{port}", "answered": True, "seconds": round(seconds, 3),
                         "api_count": count})
        else:
            print(f"{host}:{port} answered ApiVersions ({count} APIs) after {seconds:.1f}s", flush=True)
        return 0
    raise DeltalogError(f"{host}:{port} did not answer Kafka's ApiVersions within {args.timeout_ms} ms ({last}); "
                        "is 'deltalog serve' running there?")


def api_versions(host: str, port: int, *, timeout_s: float) -> int:
    """Send one ApiVersions v0 request and read its answer; returns the number of APIs the endpoint lists. Raises
    ``OSError`` (refused, reset, timed out) or :class:`~deltalog.errors.ProtocolError` (no answer, or one that is not
    ApiVersions')."""
    import socket
    import struct

    from deltalog.server.frames import read_frame

    correlation = 0x6465_6C74  # any id: the answer must carry it back
    client = b"deltalog-ping"
    body = struct.pack(">hhih", _API_VERSIONS_KEY, _API_VERSIONS_VERSION, correlation, len(client)) + client
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        answer = read_frame(sock, max_bytes=1 << 20)  # ProtocolError: closed before answering, or not ApiVersions'
        if len(answer) < 6:
            raise ProtocolError(f"an answer of {len(answer)} bytes is not ApiVersions'")
    got, error_code = struct.unpack(">ih", answer[:6])
    if got != correlation:
        raise ProtocolError(f"the answer carries correlation id {got}, not {correlation}")
    if error_code != 0:
        raise ProtocolError(f"ApiVersions answered error code {error_code}")
    return struct.unpack(">i", answer[6:10])[0] if len(answer) >= 10 else 0

