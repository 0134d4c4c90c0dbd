"""``deltalog serve --metrics-port``, as a monitoring stack and a script see it: a real ``deltalog serve`` process, a
real Kafka client (confluent-kafka: librdkafka) producing and creating topics through it, then its port scraped for
Kafka's request metrics under the JMX exporter's names, and its readiness endpoint polled as a script would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tooling.services import stop_process

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DELTALOG_STORE", None)
    return env


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _value(text: str, name: str, **labels: str) -> float:
    """A sample's value from the exposition text (labels in any order); fails when absent."""
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1).split(",") for k, v in labels.items()):
            return float(m.group(2))
    raise AssertionError(f"no {name}{labels} in:\n{text}")


def test_serve_exposes_kafkas_request_metrics_and_readiness(tmp_path):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic
    serve = subprocess.Popen([sys.executable, "-m", "deltalog", "--store", str(tmp_path / "store"), "-o", "json",
                              "serve", "--listen", "127.0.0.1:0", "--metrics-port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path,
                             start_new_session=True)
    try:
        health = json.loads(serve.stdout.readline())
        bootstrap, metrics_url = health["listening"], health["metrics"]
        base = metrics_url.removesuffix("/metrics")
        assert _get(f"{base}/health") == (200, "ok\n")
        deadline = time.monotonic() + 60
        while _get(f"{base}/ready")[0] != 200:  # what a script polls before its first client
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.2)

        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for i in range(5):
            producer.produce("orders", key=f"k{i}", value=f"v{i}")
        assert producer.flush(60) == 0
        admin = AdminClient({"bootstrap.servers": bootstrap})
        again = admin.create_topics([NewTopic("orders", 1)])["orders"]
        with pytest.raises(confluent_kafka.KafkaException, match="already exists"):
            again.result(60)

        code, text = _get(metrics_url)
        assert code == 200
        produced = sum(float(v) for v in re.findall(
            r'kafka_network_requestmetrics_requests_total\{request="Produce",version="\d+"\} (\S+)', text))
        assert produced >= 1
        assert _value(text, "kafka_network_requestmetrics_requests_total", request="ApiVersions") >= 1
        assert _value(text, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") >= 1
        assert _value(text, "kafka_network_requestmetrics_errors_total", request="CreateTopics",
                      error="TOPIC_ALREADY_EXISTS") == 1
        assert _value(text, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == produced
        assert _value(text, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf") == produced
        assert _value(text, "kafka_network_requestmetrics_requestbytes_sum", request="Produce") > 5 * len("k0v0")
        assert _value(text, "kafka_server_socket_server_metrics_incoming_byte_total", listener="PLAINTEXT") > 0
        assert _value(text, "kafka_server_socket_server_metrics_outgoing_byte_total", listener="PLAINTEXT") > 0
        assert _value(text, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 1
        assert _get(f"{base}/nothing")[0] == 404
    finally:
        stop_process(serve, 60)
        serve.stdout.close()
        serve.stderr.close()
    assert serve.returncode == 0
