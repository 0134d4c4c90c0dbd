"""Kafka's cleaner gauges for a monitoring stack, under the names Kafka's JMX exporter gives them: printed by
``deltalog status --prometheus``, served on a port, and pushed to a Pushgateway by ``deltalog cleaner run`` after
each cycle (a stand-in gateway here: a local HTTP server that keeps what it is sent)."""

from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from deltalog import Record, Store
from deltalog.cleaner.metrics import collect
from deltalog.cleaner.prometheus import GAUGES, CleanerExporter

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DELTALOG_STORE", None)
    return env


def dirty_store(root: Path) -> Store:
    store = Store(str(root))
    store.create_topic("t", config={"cleanup.policy": "compact", "segment.ms": "1"})
    store.append("t", 0, [Record(key=b"k", value=str(i).encode()) for i in range(4)])
    store.roll("t", 0)  # the segment closes: dirty and cleanable
    return store


def test_the_exporter_serves_kafkas_gauges(tmp_path):
    store = dirty_store(tmp_path / "store")
    exporter = CleanerExporter()
    exporter.update(collect(store.log_manager))
    server = exporter.serve(0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=30) as answer:
            text = answer.read().decode()
    finally:
        server.shutdown()
    for name, _ in GAUGES.values():
        assert f"# TYPE {name} gauge" in text
    assert 'deltalog_partition_dirty_percent{partition="0",topic="t"}' in text


@pytest.mark.subprocess
def test_status_prints_the_exposition_text(tmp_path):
    dirty_store(tmp_path / "store")
    done = subprocess.run([sys.executable, "-m", "deltalog", "--store", str(tmp_path / "store"), "status",
                           "--prometheus"], capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "kafka_log_logcleanermanager_uncleanable_partitions_count 0.0" in lines
    assert any(line.startswith("kafka_log_logcleanermanager_max_dirty_percent ") for line in lines)
    assert any(line.startswith('deltalog_partition_dirty_percent{partition="0",topic="t"} ') for line in lines)


class _Gateway(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, str]] = []

    def do_PUT(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        self.received.append((self.command, self.path, body))
        self.send_response(200)
        self.end_headers()

    do_POST = do_PUT  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.spark
@pytest.mark.subprocess
def test_cleaner_run_pushes_to_a_pushgateway(tmp_path):
    dirty_store(tmp_path / "store")
    _Gateway.received = []
    gateway = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    try:
        done = subprocess.run([sys.executable, "-m", "deltalog", "--store", str(tmp_path / "store"), "cleaner", "run",
                               "--once", "--no-vacuum", "--pushgateway", f"http://127.0.0.1:{gateway.server_port}"],
                              capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=900)
    finally:
        gateway.shutdown()
    assert done.returncode == 0, done.stderr[-3000:]
    [(method, path, body)] = _Gateway.received
    assert method == "PUT" and path == "/metrics/job/deltalog-cleaner"
    assert "kafka_log_logcleanermanager_time_since_last_run_ms" in body
    assert "kafka_log_logcleaner_max_buffer_utilization_percent" in body


@pytest.mark.subprocess
def test_the_cleaner_entry_point_takes_the_same_metrics_options(tmp_path):
    """``deltalog-cleaner`` (the job's entry point, what a Databricks wheel task runs) serves and pushes Kafka's
    cleaner gauges as ``deltalog cleaner run`` does; an idle store's cycle starts no Spark."""
    store = Store(str(tmp_path / "store"))
    store.create_topic("t", config={"cleanup.policy": "compact"})
    _Gateway.received = []
    gateway = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    entry = shutil.which("deltalog-cleaner", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    assert entry is not None, "the deltalog-cleaner entry point is not installed"
    try:
        done = subprocess.run([entry, "--store", str(tmp_path / "store"), "--once", "--metrics-port", "0",
                               "--pushgateway", f"http://127.0.0.1:{gateway.server_port}"],
                              capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=600)
    finally:
        gateway.shutdown()
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"deltalog cleaner: metrics on http://127\.0\.0\.1:\d+/metrics", done.stderr)
    [(method, path, body)] = _Gateway.received
    assert method == "PUT" and path == "/metrics/job/deltalog-cleaner"
    assert "kafka_log_logcleanermanager_uncleanable_partitions_count 0.0" in body
    refused = subprocess.run([entry, "--store", str(tmp_path / "store"), "--once", "--metrics-port", "70000"],
                             capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert refused.returncode == 1 and "job.metrics_port must be null or a port number 0-65535" in refused.stderr


def test_the_job_config_takes_the_metrics_keys():
    from deltalog.errors import InvalidConfigError
    from deltalog.jobs.cleaner_job import JobConfig

    config = JobConfig.from_mapping({"job": {"metrics_port": 9404, "pushgateway": "http://gw:9091"}}, store_uri="/s")
    assert (config.metrics_port, config.metrics_address, config.pushgateway) == (9404, "127.0.0.1", "http://gw:9091")
    with pytest.raises(InvalidConfigError, match="job.pushgateway must be null or an http"):
        JobConfig.from_mapping({"job": {"pushgateway": "gw:9091"}}, store_uri="/s")


def test_the_exporter_answers_health_and_readiness(tmp_path):
    exporter = CleanerExporter()
    server = exporter.serve(0)
    try:
        for path in ("/health", "/ready", "/healthz", "/readyz"):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}{path}", timeout=30) as answer:
                assert answer.status == 200
    finally:
        server.shutdown()
        server.server_close()


def test_the_state_tables_lag_is_a_gauge_per_partition(tmp_path):
    store = Store(str(tmp_path / "store"))
    store.create_topic("prices", 1, config={"cleanup.policy": "compact", "state.table.enable": "true"})
    store.create_topic("plain", 1, config={"cleanup.policy": "compact"})
    store.append("prices", 0, [Record(key=b"a", value=b"1")])
    store.refresh_state("prices")
    store.append("prices", 0, [Record(key=b"b", value=b"2"), Record(key=b"a", value=b"3")])
    exporter = CleanerExporter()
    exporter.update(collect(store.log_manager, state_lag=store.state_lag_of))
    lines = exporter.text().splitlines()
    assert 'deltalog_state_table_offsets_behind{partition="0",topic="prices"} 2.0' in lines
    assert any(line.startswith('deltalog_state_table_time_behind_ms{partition="0",topic="prices"} ') for line in lines)
    assert not any('topic="plain"' in line and "state_table" in line for line in lines)
    store.refresh_state("prices")
    exporter.update(collect(store.log_manager, state_lag=store.state_lag_of))
    lines = exporter.text().splitlines()
    assert 'deltalog_state_table_offsets_behind{partition="0",topic="prices"} 0.0' in lines
    assert 'deltalog_state_table_time_behind_ms{partition="0",topic="prices"} 0.0' in lines


def test_the_job_exports_the_figures_its_cycle_recorded_without_a_second_walk(tmp_path, monkeypatch):
    """``deltalog cleaner run --metrics-port/--pushgateway``: after a cycle the gauges are the figures the cycle
    recorded on its own snapshots (``cleaner.last_metrics``); the partitions are walked once for them, not again for
    the exporter (an idle store: no Spark)."""
    from deltalog.cleaner import metrics
    from deltalog.jobs import cleaner_job

    store = Store(str(tmp_path / "store"))
    store.create_topic("t", 3, config={"cleanup.policy": "compact"})
    for p in range(3):
        store.append("t", p, [Record(key=b"k", value=b"v")])
    walked: list[tuple[str, int]] = []
    one = metrics.partition_metrics

    def counted(logs, manager, topic, partition, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        walked.append((topic, partition))
        return one(logs, manager, topic, partition, *args, **kwargs)

    monkeypatch.setattr(metrics, "partition_metrics", counted)
    _Gateway.received = []
    gateway = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    config = cleaner_job.JobConfig.from_mapping(
        {"job": {"once": True, "pushgateway": f"http://127.0.0.1:{gateway.server_port}"}}, source="test",
        store_uri=str(tmp_path / "store"))
    try:
        with open(os.devnull, "w") as out:
            assert cleaner_job.run(config, out=out) == 1
    finally:
        gateway.shutdown()
    # Once before the first cycle (a scrape may come before it ends), once by the cycle's own figures: not a third time.
    assert sorted(walked) == sorted([("t", p) for p in range(3)] * 2)
    [(_, _, body)] = _Gateway.received
    assert 'deltalog_partition_dirty_percent{partition="2",topic="t"}' in body
