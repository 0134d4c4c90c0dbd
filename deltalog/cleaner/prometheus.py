"""The cleaner's metrics for Prometheus, under the names Kafka's JMX exporter gives them.

Kafka's cleaner publishes its figures as JMX gauges (``kafka.log:type=LogCleaner,name=max-dirty-percent``, ...),
which a monitoring stack scrapes through the Prometheus JMX exporter as ``kafka_log_logcleaner_max_dirty_percent``
and the like. :class:`CleanerExporter` keeps the same gauges, under the same names, in a registry of its own and
sets them from :class:`~deltalog.cleaner.metrics.StoreMetrics` (the figures ``deltalog status`` prints and the
metrics table holds) and from each cycle's passes: served on an opt-in port (``deltalog cleaner run
--metrics-port``), or pushed to a Pushgateway where nothing scrapes a job that ends (``--pushgateway``). The
``prometheus_client`` package is imported only here, and only by the runs that ask for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deltalog.cleaner.cleaner import CleanResult
    from deltalog.cleaner.metrics import StoreMetrics

#: Kafka's gauge (its JMX name) -> the Prometheus name the JMX exporter gives it, and its help text.
GAUGES = {
    "max-dirty-percent": ("kafka_log_logcleanermanager_max_dirty_percent",
                          "the dirtiest partition's dirty bytes, % of its cleanable bytes (LogCleanerManager)"),
    "uncleanable-partitions-count": ("kafka_log_logcleanermanager_uncleanable_partitions_count",
                                     "partitions marked uncleanable (LogCleanerManager)"),
    "uncleanable-bytes": ("kafka_log_logcleanermanager_uncleanable_bytes",
                          "cleanable bytes of the uncleanable partitions (LogCleanerManager)"),
    "time-since-last-run-ms": ("kafka_log_logcleanermanager_time_since_last_run_ms",
                               "milliseconds since the cleaner's last cycle (LogCleanerManager)"),
    "max-clean-time-secs": ("kafka_log_logcleaner_max_clean_time_secs",
                            "the longest pass of the last cycle, seconds (LogCleaner)"),
    "max-buffer-utilization-percent": ("kafka_log_logcleaner_max_buffer_utilization_percent",
                                       "the fullest offset map of the last cycle, % (LogCleaner)"),
    "max-compaction-delay-secs": ("kafka_log_logcleaner_max_compaction_delay_secs",
                                  "the longest a cleanable record has waited past max.compaction.lag.ms (LogCleaner)"),
    "cleaner-recopy-percent": ("kafka_log_logcleaner_cleaner_recopy_percent",
                               "bytes written of bytes read by the last cycle's passes, % (LogCleaner)"),
}
PARTITION_DIRTY = "deltalog_partition_dirty_percent"
#: A state table's lag (docs/state-table.md), per partition of the topics that keep one.
STATE_OFFSETS_BEHIND = "deltalog_state_table_offsets_behind"
STATE_TIME_BEHIND = "deltalog_state_table_time_behind_ms"


class CleanerExporter:
    """Kafka's cleaner gauges in a ``prometheus_client`` registry of their own (so a process that serves them
    serves nothing else), set with :meth:`update`."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Gauge  # only the runs that export metrics import it

        self.registry = CollectorRegistry()
        self.gauges = {kafka: Gauge(name, text, registry=self.registry) for kafka, (name, text) in GAUGES.items()}
        self.dirty = Gauge(PARTITION_DIRTY, "a partition's dirty bytes, % of its cleanable bytes",
                           ["topic", "partition"], registry=self.registry)
        self.state_offsets = Gauge(STATE_OFFSETS_BEHIND, "a state table's offsets not yet applied of a partition "
                                   "(up to its last stable offset)", ["topic", "partition"], registry=self.registry)
        self.state_time = Gauge(STATE_TIME_BEHIND, "at most how long a state table's records not yet applied of a "
                                "partition have waited, ms (0: up to date)", ["topic", "partition"],
                                registry=self.registry)

    def update(self, metrics: StoreMetrics, cleans: Sequence[CleanResult] = ()) -> None:
        """Set every gauge from the store's figures and, for ``cleaner-recopy-percent``, the cycle's passes (a
        cycle without a pass leaves it as it was, as Kafka's stays at its last run's)."""
        g = self.gauges
        g["max-dirty-percent"].set(metrics.max_dirty_percent)
        g["uncleanable-partitions-count"].set(metrics.uncleanable_partitions_count)
        g["uncleanable-bytes"].set(metrics.uncleanable_bytes)
        g["max-compaction-delay-secs"].set(metrics.max_compaction_delay_ms / 1000)
        if metrics.time_since_last_run_ms is not None:
            g["time-since-last-run-ms"].set(metrics.time_since_last_run_ms)
        if metrics.max_clean_time_ms is not None:
            g["max-clean-time-secs"].set(metrics.max_clean_time_ms / 1000)
        if metrics.max_buffer_utilization is not None:
            g["max-buffer-utilization-percent"].set(100 * metrics.max_buffer_utilization)
        read = sum(c.bytes_read for c in cleans)
        if read:
            g["cleaner-recopy-percent"].set(100 * sum(c.bytes_written for c in cleans) / read)
        for gauge in (self.dirty, self.state_offsets, self.state_time):
            gauge.clear()  # a deleted topic's partitions go
        for p in metrics.partitions:
            self.dirty.labels(p.topic, str(p.partition)).set(p.dirty_percent)
            if p.state_offsets_behind is not None:
                self.state_offsets.labels(p.topic, str(p.partition)).set(p.state_offsets_behind)
                self.state_time.labels(p.topic, str(p.partition)).set(p.state_time_behind_ms or 0)

    def serve(self, port: int, address: str = "127.0.0.1") -> Any:
        """Serve ``/metrics`` (and ``/health``, ``/ready``: :mod:`deltalog.metrics_http`) on ``address:port`` from a
        daemon thread; returns the HTTP server (its ``server_port`` is the port bound, for port 0)."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        from deltalog import metrics_http

        return metrics_http.serve(port, address, lambda: (generate_latest(self.registry), CONTENT_TYPE_LATEST))

    def push(self, gateway: str, job: str = "deltalog-cleaner", grouping: dict[str, str] | None = None) -> None:
        """Push every gauge to a Pushgateway (``http://host:9091``), replacing the job's earlier push."""
        from prometheus_client import push_to_gateway

        push_to_gateway(gateway, job=job, registry=self.registry, grouping_key=grouping or {})

    def text(self) -> str:
        """The exposition text a scrape would get."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode("utf-8")
