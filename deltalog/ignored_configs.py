"""Kafka's client settings that configure only a network client: what the producer and the consumer both accept and
ignore, so that configurations written for kafka-python, confluent-kafka or the Java clients run unchanged.

deltalog's clients talk to no broker: a send is one Delta commit per partition, made before it returns, and a
poll reads the partition tables directly. So the settings of Kafka's ``CommonClientConfigs`` (servers, sockets,
security, metrics), the producer's send buffer (``ProducerConfig``: ``linger.ms``, ``batch.size``, ...) and the
consumer's fetch sizes and group-membership timers (``ConsumerConfig``: ``fetch.max.bytes``,
``session.timeout.ms``, ...) have nothing to act on. Each client accepts them all, by kafka-python's names
(``session_timeout_ms``) or Kafka's dotted ones (``session.timeout.ms``, as confluent-kafka takes them), and
ignores them. A setting in none of these lists, and not one the client implements, is refused with the list of
those it implements (:class:`~deltalog.errors.InvalidConfigError`): a typo, or a setting whose meaning deltalog
would silently drop (confluent-kafka's ``enable.partition.eof``, kafka-python's ``partitioner``), is never ignored.
"""

from __future__ import annotations

from collections.abc import Iterable

#: ``CommonClientConfigs`` and librdkafka's global properties that only configure the connection to brokers.
NETWORK: frozenset[str] = frozenset({
    "bootstrap_servers", "client_dns_lookup", "client_rack", "connections_max_idle_ms", "reconnect_backoff_ms",
    "reconnect_backoff_max_ms", "request_timeout_ms", "default_api_timeout_ms", "socket_connection_setup_timeout_ms",
    "socket_connection_setup_timeout_max_ms", "send_buffer_bytes", "receive_buffer_bytes", "socket_options",
    "socket_timeout_ms", "socket_keepalive_enable", "broker_address_family", "retry_backoff_max_ms",
    "api_version", "api_version_auto_timeout_ms", "api_version_request", "security_protocol",
    "ssl_context", "ssl_check_hostname", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_crlfile",
    "ssl_ciphers", "ssl_ca_location", "ssl_certificate_location", "ssl_key_location", "ssl_key_password",
    "ssl_endpoint_identification_algorithm", "sasl_mechanism", "sasl_mechanisms", "sasl_username", "sasl_password",
    "sasl_plain_username", "sasl_plain_password", "sasl_kerberos_service_name", "sasl_kerberos_domain_name",
    "sasl_oauth_token_provider", "sasl_jaas_config", "metrics_num_samples", "metrics_sample_window_ms",
    "metric_reporters", "metrics_enabled", "statistics_interval_ms", "stats_cb", "error_cb", "throttle_cb",
    "oauth_cb", "logger", "log_level", "debug", "selector", "wakeup_timeout_ms",
})

#: ``ProducerConfig`` (and librdkafka's producer properties) about batching, buffering and in-flight requests.
PRODUCER_BUFFERING: frozenset[str] = frozenset({
    "linger_ms", "batch_size", "buffer_memory", "max_in_flight_requests_per_connection", "delivery_timeout_ms",
    "max_block_ms", "compression_type", "compression_codec", "compression_level", "max_request_size",
    "metadata_max_age_ms", "queue_buffering_max_ms", "queue_buffering_max_messages", "queue_buffering_max_kbytes",
    "batch_num_messages", "message_max_bytes", "message_timeout_ms", "max_in_flight", "partitioner_ignore_keys",
    "partitioner_adaptive_partitioning_enable", "partitioner_availability_timeout_ms", "allow_auto_create_topics",
})

#: ``ConsumerConfig`` (and librdkafka's consumer properties) about fetch sizes and group membership: deltalog has
#: no coordinator, so no session, heartbeat or rebalance (see :mod:`deltalog.groups.consumer`).
CONSUMER_FETCHING: frozenset[str] = frozenset({
    "session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms", "fetch_min_bytes", "fetch_max_bytes",
    "fetch_max_wait_ms", "max_partition_fetch_bytes", "partition_assignment_strategy", "group_instance_id",
    "group_protocol", "group_remote_assignor", "check_crcs", "allow_auto_create_topics", "client_rack",
    "enable_incremental_fetch_sessions", "fetch_wait_max_ms", "fetch_message_max_bytes", "fetch_error_backoff_ms",
    "queued_min_messages", "queued_max_messages_kbytes", "coordinator_query_interval_ms", "request_timeout_ms",
    "legacy_iterator", "max_in_flight_requests_per_connection",
})

PRODUCER_IGNORED: frozenset[str] = NETWORK | PRODUCER_BUFFERING
CONSUMER_IGNORED: frozenset[str] = NETWORK | CONSUMER_FETCHING


def config_key(name: object) -> object:
    """kafka-python's spelling of a setting: ``session.timeout.ms`` -> ``session_timeout_ms``."""
    return name.replace(".", "_") if isinstance(name, str) else name


def unknown_config_message(client: str, name: object, known: Iterable[str]) -> str:
    """The words of a refused setting: what it was, what the client implements, and where the ignored ones are."""
    return (f"{name!r} is not a {client} config deltalog knows; known: {', '.join(sorted(known))} (also by Kafka's "
            f"dotted names, e.g. {'enable.idempotence' if client == 'producer' else 'auto.offset.reset'}); Kafka's "
            f"network, buffering and group-membership settings (bootstrap_servers, "
            f"{'linger_ms' if client == 'producer' else 'session_timeout_ms'}, ...) are accepted and ignored "
            f"(deltalog.ignored_configs)")


__all__ = ["CONSUMER_IGNORED", "NETWORK", "PRODUCER_IGNORED", "config_key", "unknown_config_message"]
