"""Configuration with Kafka's names and defaults.

:class:`TopicConfig` is Kafka's ``LogConfig``: per-topic policy (``cleanup.policy``, ``segment.bytes``,
``min.cleanable.dirty.ratio``, ...). :class:`StoreConfig` is the store-wide part of Kafka's broker config
(``KafkaConfig``), with the broker's names: the ``log.cleaner.*`` resources every cleaning pass shares (what
Kafka derives its ``CleanerConfig`` from), the group coordinator's ``offsets.*`` keys and the transaction
coordinator's ``transactional.id.*`` keys.

Both are frozen dataclasses built from dotted keys. Every key is declared once in a table of
:class:`ConfigKey` (name, attribute, parser, default, doc: :class:`~deltalog.option_spec.OptionSpec`); a bad
value raises :class:`~deltalog.errors.InvalidConfigError` naming the key, the value and what is allowed. The
dataclasses' fields take their defaults from the tables, so each default is written once.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deltalog import schemas
from deltalog.errors import InvalidConfigError, shown
from deltalog.option_spec import OptionSpec, Parser, parse_options

LONG_MAX = 9_223_372_036_854_775_807
INT_MAX = 2_147_483_647
#: Bytes one entry takes in Kafka's SkimpyOffsetMap: a 16-byte MD5 of the key and an 8-byte offset.
OFFSET_MAP_BYTES_PER_ENTRY = 24
#: Kafka's broker refuses ``log.cleaner.dedupe.buffer.size / log.cleaner.threads <= 1 MiB`` (KafkaConfig.validateValues).
MIN_DEDUPE_BUFFER_PER_THREAD = 1024 * 1024

#: deltalog's default for ``file.delete.delay.ms``: Delta's ``delta.deletedFileRetentionDuration`` default of 7 days
#: (Kafka's is 60 s). The two are one setting here (see :mod:`deltalog.log.delta_retention`): a shorter delay would
#: make every Delta engine's VACUUM remove the files time travel to the version before a clean needs.
FILE_DELETE_DELAY_MS = 604_800_000
#: deltalog's default for ``offsets.topic.num.partitions`` (Kafka's is 50): see docs/consumer-groups.md.
OFFSETS_TOPIC_NUM_PARTITIONS = 10
#: deltalog's default for ``offsets.topic.segment.bytes`` (Kafka's is 100 MiB of record batches; deltalog counts
#: Parquet file bytes, about 2 KB per commit): see its row in docs/configs.md.
OFFSETS_TOPIC_SEGMENT_BYTES = 1_048_576

_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")


#: One documented config key: its dotted name, the attribute it fills, its parser and default
#: (:class:`~deltalog.option_spec.OptionSpec`, the pattern every option table of deltalog follows).
ConfigKey = OptionSpec


def _long(lo: int = -LONG_MAX - 1, hi: int = LONG_MAX) -> Parser:
    def parse(name: str, raw: Any) -> int:
        if isinstance(raw, bool):
            raise InvalidConfigError(f"Invalid value {shown(raw)} for configuration {name}: expected a whole number")
        if isinstance(raw, float):
            if not raw.is_integer():
                raise InvalidConfigError(f"Invalid value {shown(raw)} for configuration {name}: expected a whole number")
            raw = int(raw)
        # Kafka's Long.parseLong: ASCII digits with an optional sign (Python's int() also takes "1_000" and "١٢٣")
        if not isinstance(raw, int) and not _WHOLE_NUMBER.fullmatch(str(raw).strip()):
            raise InvalidConfigError(f"Invalid value {shown(raw)} for configuration {name}: expected a whole number")
        value = raw if isinstance(raw, int) else int(str(raw).strip())
        if not lo <= value <= hi:
            raise InvalidConfigError(
                f"Invalid value {shown(value)} for configuration {name}: value must be in [{lo}, {hi}]"
            )
        return value

    return parse


def _double(lo: float, hi: float, *, lo_open: bool = False) -> Parser:
    def parse(name: str, raw: Any) -> float:
        if isinstance(raw, bool):
            raise InvalidConfigError(f"Invalid value {shown(raw)} for configuration {name}: expected a number")
        try:
            if isinstance(raw, (int, float)):
                value = float(raw)
            else:
                text = str(raw).strip()
                if not text.isascii() or "_" in text:  # as Java's Double.parseDouble: ASCII, no digit separators
                    raise ValueError(text)
                value = float(text)
        except (ValueError, OverflowError):
            raise InvalidConfigError(f"Invalid value {shown(raw)} for configuration {name}: expected a number") from None
        too_low = value <= lo if lo_open else value < lo
        if math.isnan(value) or too_low or value > hi:
            bracket = "(" if lo_open else "["
            raise InvalidConfigError(
                f"Invalid value {shown(value)} for configuration {name}: value must be in {bracket}{lo}, {hi}]"
            )
        return value

    return parse


def _optional_bool(name: str, raw: Any) -> bool | None:
    """A boolean, or None (empty or not given): a topic key whose store-wide key decides when it is unset."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    return _bool(name, raw)


def _bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InvalidConfigError(f"Invalid value {shown(raw)} for configuration {name}: expected true or false")


CLEANUP_POLICIES = ("compact", "delete")
#: Kafka's ``TimestampType`` names, as ``message.timestamp.type`` takes them (case-sensitive, as Kafka's).
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def _one_of(allowed: tuple[str, ...]) -> Parser:
    def parse(name: str, raw: Any) -> str:
        text = str(raw).strip()
        if text not in allowed:
            raise InvalidConfigError(f"Invalid value {shown(raw)} for configuration {name}: "
                                     f"expected one of {', '.join(allowed)}")
        return text

    return parse


def _cleanup_policy(name: str, raw: Any) -> tuple[str, ...]:
    items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
    policies = tuple(sorted({str(p).strip().lower() for p in items if str(p).strip()}))
    bad = [p for p in policies if p not in CLEANUP_POLICIES]
    if not policies or bad:
        raise InvalidConfigError(
            f"Invalid value {shown(raw)} for configuration {name}: "
            "expected a comma-separated list of 'compact' and/or 'delete'"
        )
    return policies


TOPIC_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("cleanup.policy", "cleanup_policy", _cleanup_policy, ("delete",),
              "'delete' drops old segments by retention.ms/retention.bytes; 'compact' keeps the latest "
              "record per key; both may be given ('compact,delete')."),
    ConfigKey("segment.bytes", "segment_bytes", _long(14, INT_MAX), 1_073_741_824,
              "The active segment rolls when its files reach this many bytes; the cleaner groups "
              "consecutive segments up to this size."),
    ConfigKey("segment.ms", "segment_ms", _long(1), 604_800_000,
              "The active segment rolls, on the next append, once it has been open longer than this."),
    ConfigKey("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", _double(0.0, 1.0), 0.5,
              "A compacted partition is cleaned once cleanable bytes / (clean + cleanable bytes) exceed this."),
    ConfigKey("min.compaction.lag.ms", "min_compaction_lag_ms", _long(0), 0,
              "A record stays uncompacted for at least this long."),
    ConfigKey("max.compaction.lag.ms", "max_compaction_lag_ms", _long(1), LONG_MAX,
              "A dirty record becomes eligible for compaction at the latest after this long."),
    ConfigKey("delete.retention.ms", "delete_retention_ms", _long(0), 86_400_000,
              "How long a tombstone is kept after it first enters the clean section."),
    ConfigKey("retention.ms", "retention_ms", _long(-1), 604_800_000,
              "Segments whose newest record is older than this are deleted (delete policy); -1: no limit."),
    ConfigKey("retention.bytes", "retention_bytes", _long(-1), -1,
              "Oldest segments are deleted while the partition is larger than this (delete policy); -1: no limit."),
    ConfigKey("file.delete.delay.ms", "file_delete_delay_ms", _long(0), FILE_DELETE_DELAY_MS,
              "Files replaced by cleaning or retention are physically removed (VACUUM) only after this delay; "
              "also the Delta table property delta.deletedFileRetentionDuration, which every Delta engine's "
              "VACUUM honours, so time travel to an older version works this long (7 days: Delta's default)."),
    ConfigKey("max.message.bytes", "max_message_bytes", _long(0, INT_MAX), 1_048_588,
              "The largest record (key + value + headers) an append accepts."),
    ConfigKey("message.timestamp.type", "message_timestamp_type", _one_of(TIMESTAMP_TYPES), "CreateTime",
              "CreateTime: a record keeps the timestamp its producer gave (none given: the appending writer's clock); "
              "LogAppendTime: every record is stamped with the appending writer's clock."),
    ConfigKey("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", _long(0), LONG_MAX,
              "With CreateTime, a batch with a timestamp more than this before the appending writer's clock is "
              "refused (INVALID_TIMESTAMP)."),
    ConfigKey("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", _long(0), LONG_MAX,
              "With CreateTime, a batch with a timestamp more than this after the appending writer's clock is "
              "refused (INVALID_TIMESTAMP)."),
    ConfigKey("message.timestamp.difference.max.ms", "message_timestamp_difference_max_ms", _long(0), LONG_MAX,
              "Deprecated by Kafka 3.6 (and gone in 4.0): the bound on both sides where "
              "message.timestamp.before.max.ms / after.max.ms are not set."),
    ConfigKey("producer.id.expiration.ms", "producer_id_expiration_ms", _long(1, INT_MAX), 86_400_000,
              "A producer's state in a partition (its sequence and last batch) expires once it has not written "
              "there for this long (Kafka's broker config; here per topic, as the Delta table property "
              "delta.setTransactionRetentionDuration, measured on the wall clock)."),
    # deltalog's own: how keys and values are encoded, so SQL sees typed columns (see deltalog.schemas).
    ConfigKey("key.encoding", "key_encoding", schemas.parse_encoding, "bytes",
              "bytes, string (UTF-8) or json (an object matching key.schema); checked at append."),
    ConfigKey("value.encoding", "value_encoding", schemas.parse_encoding, "bytes",
              "bytes, string (UTF-8) or json (an object matching value.schema); checked at append."),
    ConfigKey("key.schema", "key_schema", schemas.parse_schema_config, "",
              "For key.encoding=json: a Spark DDL field list or a Spark StructType as JSON."),
    ConfigKey("value.schema", "value_schema", schemas.parse_schema_config, "",
              "For value.encoding=json: a Spark DDL field list or a Spark StructType as JSON."),
    # deltalog's own: the topic's state table (deltalog.state), one row per live key beside the log.
    ConfigKey("state.table.enable", "state_table_enable", _optional_bool, None,
              "Keep a state table for this topic: a plain Delta table of the latest read_committed record of each "
              "live key, refreshed incrementally (docs/state-table.md); empty: the store's "
              "log.state.table.enable decides."),
)


STORE_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("log.cleaner.threads", "cleaner_threads", _long(1, 1024), 1,
              "Partitions cleaned side by side; each gets an equal share of the dedupe buffer."),
    ConfigKey("log.cleaner.dedupe.buffer.size", "dedupe_buffer_size", _long(MIN_DEDUPE_BUFFER_PER_THREAD + 1),
              134_217_728,
              "Total memory for offset maps across all cleaner threads; more than 1 MiB per thread, as Kafka requires."),
    ConfigKey("log.cleaner.io.buffer.load.factor", "io_buffer_load_factor", _double(0.0, 1.0, lo_open=True), 0.9,
              "How full an offset map may get before a pass stops mapping (more = more per pass)."),
    ConfigKey("log.cleaner.backoff.ms", "backoff_ms", _long(0), 15_000,
              "How long the cleaner job sleeps when no partition is eligible."),
    ConfigKey("background.threads", "background_threads", _long(1, 1024), 10,
              "Partitions the cleaner cycle's Spark-free steps (snapshot refresh, retention, VACUUM, metrics) work "
              "on side by side, and the passes of a cleaning round doing their driver work (lease, plan, commit) at "
              "a time: their object-store requests in flight."),
    ConfigKey("log.cleaner.io.max.bytes.per.second", "io_max_bytes_per_second",
              _double(0.0, float("inf"), lo_open=True), float("inf"),
              "Throttle on the bytes a cleaning pass reads and writes per second."),
    ConfigKey("log.state.table.enable", "state_table_enable", _bool, False,
              "The default of every topic's state.table.enable: keep a state table (docs/state-table.md) for "
              "each topic that does not set it."),
    ConfigKey("log.state.table.check", "state_table_check", _bool, False,
              "After every refresh of a state table, check that it equals the latest read_committed record per "
              "key of the log up to the offsets it records (a StateTableMismatchError when not)."),
    ConfigKey("deltalog.check.after.clean", "check_after_clean", _bool, False,
              "Run the data-quality checks (store.check) on every partition a clean() pass touched."),
    # Consumer groups (deltalog.groups): the internal topic __consumer_offsets, made on first use.
    ConfigKey("offsets.topic.num.partitions", "offsets_topic_num_partitions", _long(1, 1000),
              OFFSETS_TOPIC_NUM_PARTITIONS,
              "Partitions of __consumer_offsets when it is created (a group's offsets live in partition "
              "abs(hash(group)) % this); later changes do not move it."),
    ConfigKey("offsets.topic.segment.bytes", "offsets_topic_segment_bytes", _long(14, INT_MAX),
              OFFSETS_TOPIC_SEGMENT_BYTES,
              "segment.bytes of __consumer_offsets when it is created: its segments roll, and become cleanable, "
              "at this size."),
    ConfigKey("offset.metadata.max.bytes", "offset_metadata_max_bytes", _long(0, INT_MAX), 4096,
              "The longest metadata string (UTF-8 bytes) an offset commit may carry."),
    ConfigKey("offsets.retention.minutes", "offsets_retention_minutes", _long(1, INT_MAX), 10_080,
              "A committed offset not committed again for this long is removed (a tombstone in __consumer_offsets) "
              "by the cleaner's cycle. deltalog's groups have no members, so each offset ages on its own, as "
              "Kafka's offsets of standalone consumers do."),
    ConfigKey("offsets.retention.check.interval.ms", "offsets_retention_check_interval_ms", _long(1), 600_000,
              "How often the cleaner's cycle looks for expired committed offsets."),
    # Transactions (deltalog.coordinator.transaction.transaction_coordinator).
    ConfigKey("transactional.id.expiration.ms", "transactional_id_expiration_ms", _long(1, INT_MAX), 604_800_000,
              "A transactional id with no transaction in progress and not used for this long expires (the "
              "cleaner's cycle): its producer can no longer write, and its next init_transactions() gets a new "
              "producer id."),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms",
              "transaction_remove_expired_transaction_cleanup_interval_ms", _long(1, INT_MAX), 3_600_000,
              "How often the cleaner's cycle looks for expired transactional ids."),
)


#: Each key's default, by attribute: the dataclasses' field defaults are taken from the tables above, so a default
#: is written once, beside its key's name, parser and doc.
_TOPIC_DEFAULTS: dict[str, Any] = {k.attr: k.default for k in TOPIC_KEYS}
_STORE_DEFAULTS: dict[str, Any] = {k.attr: k.default for k in STORE_KEYS}


def _build(keys: tuple[ConfigKey, ...], props: Mapping[str, Any], kind: str) -> dict[str, Any]:
    def unknown(names: list[str]) -> InvalidConfigError:
        return InvalidConfigError(
            f"Unknown {kind} config {', '.join(map(shown, names[:5]))}{' and more' if len(names) > 5 else ''}; "
            f"allowed: {', '.join(sorted(k.name for k in keys))}"
        )

    return parse_options(keys, props, unknown=unknown)


def validate_config_mapping(config: object, what: str = "config") -> dict[str, Any]:
    """A config argument must be a mapping of dotted keys (``{"cleanup.policy": "compact"}``) or None."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise InvalidConfigError(
            f"{what} must be a mapping of config keys to values, e.g. {{'cleanup.policy': 'compact'}}, "
            f"not {type(config).__name__} {config!r:.80}"
        )
    bad = [k for k in config if not isinstance(k, str)]
    if bad:
        raise InvalidConfigError(f"{what} keys must be strings such as 'cleanup.policy', not {shown(bad[0])}")
    return dict(config)


class _KafkaConfig:
    """Shared behaviour of the two config dataclasses: build from, and render to, dotted keys."""

    KEYS: tuple[ConfigKey, ...] = ()
    KIND = "config"

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None) -> Any:
        """Parse and validate dotted keys; keys not given take Kafka's defaults."""
        return cls(**_build(cls.KEYS, dict(props or {}), cls.KIND))

    def with_overrides(self, props: Mapping[str, Any]) -> Any:
        """A copy with some keys changed, validated like a new config."""
        return dataclasses.replace(self, **_build(self.KEYS, dict(props), self.KIND))  # type: ignore[type-var]

    def to_properties(self) -> dict[str, str]:
        """Every key with its value as a string, in declaration order."""
        return {k.name: k.render(getattr(self, k.attr)) for k in self.KEYS}

    @classmethod
    def key(cls, name: str) -> ConfigKey:
        for k in cls.KEYS:
            if k.name == name:
                return k
        raise InvalidConfigError(f"Unknown {cls.KIND} config {shown(name)}; allowed: {', '.join(k.name for k in cls.KEYS)}")


@dataclass(frozen=True)
class TopicConfig(_KafkaConfig):
    """Per-topic policy, as Kafka's LogConfig; stored in every partition table's properties."""

    KEYS = TOPIC_KEYS
    KIND = "topic"

    cleanup_policy: tuple[str, ...] = _TOPIC_DEFAULTS["cleanup_policy"]
    segment_bytes: int = _TOPIC_DEFAULTS["segment_bytes"]
    segment_ms: int = _TOPIC_DEFAULTS["segment_ms"]
    min_cleanable_dirty_ratio: float = _TOPIC_DEFAULTS["min_cleanable_dirty_ratio"]
    min_compaction_lag_ms: int = _TOPIC_DEFAULTS["min_compaction_lag_ms"]
    max_compaction_lag_ms: int = _TOPIC_DEFAULTS["max_compaction_lag_ms"]
    delete_retention_ms: int = _TOPIC_DEFAULTS["delete_retention_ms"]
    retention_ms: int = _TOPIC_DEFAULTS["retention_ms"]
    retention_bytes: int = _TOPIC_DEFAULTS["retention_bytes"]
    file_delete_delay_ms: int = _TOPIC_DEFAULTS["file_delete_delay_ms"]
    max_message_bytes: int = _TOPIC_DEFAULTS["max_message_bytes"]
    message_timestamp_type: str = _TOPIC_DEFAULTS["message_timestamp_type"]
    message_timestamp_before_max_ms: int = _TOPIC_DEFAULTS["message_timestamp_before_max_ms"]
    message_timestamp_after_max_ms: int = _TOPIC_DEFAULTS["message_timestamp_after_max_ms"]
    message_timestamp_difference_max_ms: int = _TOPIC_DEFAULTS["message_timestamp_difference_max_ms"]
    producer_id_expiration_ms: int = _TOPIC_DEFAULTS["producer_id_expiration_ms"]
    key_encoding: str = _TOPIC_DEFAULTS["key_encoding"]
    value_encoding: str = _TOPIC_DEFAULTS["value_encoding"]
    key_schema: str = _TOPIC_DEFAULTS["key_schema"]
    value_schema: str = _TOPIC_DEFAULTS["value_schema"]
    state_table_enable: bool | None = _TOPIC_DEFAULTS["state_table_enable"]

    def __post_init__(self) -> None:
        for side in ("key", "value"):  # a json encoding needs its schema
            if getattr(self, f"{side}_encoding") == "json" and not getattr(self, f"{side}_schema"):
                raise InvalidConfigError(
                    f"Conflict: {side}.encoding=json needs {side}.schema, a Spark DDL field list such as "
                    "'price DOUBLE, currency STRING' or a Spark StructType in JSON"
                )
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"Conflict: min.compaction.lag.ms ({self.min_compaction_lag_ms}) must not be greater than "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})"
            )

    @property
    def compact(self) -> bool:
        """True for ``compact`` and ``compact,delete``."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """True for ``delete`` and ``compact,delete``: retention applies."""
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        """``message.timestamp.type=LogAppendTime``: the appending writer's clock stamps every record."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def timestamp_before_max_ms(self) -> int:
        """The effective ``message.timestamp.before.max.ms``: the deprecated ``difference.max.ms`` where it is unset
        (Kafka's ``LogConfig.getMessageTimestampBeforeMaxMs``)."""
        before = self.message_timestamp_before_max_ms
        return before if before != LONG_MAX else self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """The effective ``message.timestamp.after.max.ms`` (as :attr:`timestamp_before_max_ms`)."""
        after = self.message_timestamp_after_max_ms
        return after if after != LONG_MAX else self.message_timestamp_difference_max_ms

    def state_table(self, store: StoreConfig) -> bool:
        """Whether the topic keeps a state table: its own ``state.table.enable`` when set, else the store's
        ``log.state.table.enable`` (as a Kafka topic config overrides the broker's ``log.*`` default)."""
        return store.state_table_enable if self.state_table_enable is None else self.state_table_enable


@dataclass(frozen=True)
class StoreConfig(_KafkaConfig):
    """Store-wide settings with the broker's names, as Kafka's ``KafkaConfig`` holds them for a broker: the
    cleaner's (``log.cleaner.*``, from which Kafka builds its ``CleanerConfig``), the offsets topic's and the
    transaction coordinator's."""

    KEYS = STORE_KEYS
    KIND = "store"

    cleaner_threads: int = _STORE_DEFAULTS["cleaner_threads"]
    dedupe_buffer_size: int = _STORE_DEFAULTS["dedupe_buffer_size"]
    io_buffer_load_factor: float = _STORE_DEFAULTS["io_buffer_load_factor"]
    backoff_ms: int = _STORE_DEFAULTS["backoff_ms"]
    background_threads: int = _STORE_DEFAULTS["background_threads"]
    io_max_bytes_per_second: float = _STORE_DEFAULTS["io_max_bytes_per_second"]
    state_table_enable: bool = _STORE_DEFAULTS["state_table_enable"]
    state_table_check: bool = _STORE_DEFAULTS["state_table_check"]
    check_after_clean: bool = _STORE_DEFAULTS["check_after_clean"]
    offsets_topic_num_partitions: int = _STORE_DEFAULTS["offsets_topic_num_partitions"]
    offsets_topic_segment_bytes: int = _STORE_DEFAULTS["offsets_topic_segment_bytes"]
    offset_metadata_max_bytes: int = _STORE_DEFAULTS["offset_metadata_max_bytes"]
    offsets_retention_minutes: int = _STORE_DEFAULTS["offsets_retention_minutes"]
    offsets_retention_check_interval_ms: int = _STORE_DEFAULTS["offsets_retention_check_interval_ms"]
    transactional_id_expiration_ms: int = _STORE_DEFAULTS["transactional_id_expiration_ms"]
    transaction_remove_expired_transaction_cleanup_interval_ms: int = _STORE_DEFAULTS[
        "transaction_remove_expired_transaction_cleanup_interval_ms"]

    def __post_init__(self) -> None:
        # Kafka's KafkaConfig.validateValues: strictly more than 1 MiB per thread (its message says "at least").
        if self.dedupe_buffer_size // self.cleaner_threads <= MIN_DEDUPE_BUFFER_PER_THREAD:
            raise InvalidConfigError(
                f"log.cleaner.dedupe.buffer.size ({self.dedupe_buffer_size}) must be more than 1 MiB "
                f"({MIN_DEDUPE_BUFFER_PER_THREAD} bytes) per cleaner thread; with log.cleaner.threads="
                f"{self.cleaner_threads} it must be at least {self.cleaner_threads * MIN_DEDUPE_BUFFER_PER_THREAD + self.cleaner_threads}"
            )

    def offset_map_slots(self, threads: int | None = None) -> int:
        """Slots of one thread's map: Kafka's ``SkimpyOffsetMap(min(buffer / threads, Int.MaxValue)).slots``,
        memory / 24 bytes an entry."""
        per_thread = min(self.dedupe_buffer_size // (threads or self.cleaner_threads), INT_MAX)
        return per_thread // OFFSET_MAP_BYTES_PER_ENTRY

    def offset_map_capacity_for(self, threads: int | None = None, *, slots: int | None = None) -> int:
        """Keys one pass may map: Kafka's ``maxDesiredMapSize = (slots * loadFactor).toInt``, for a map of
        ``slots`` (a cleaner given its map's size), else of one of ``threads`` threads' share of the buffer. The
        one place the formula is written."""
        return int((slots if slots is not None else self.offset_map_slots(threads)) * self.io_buffer_load_factor)

    @property
    def offset_map_capacity(self) -> int:
        """Keys one pass may map when ``log.cleaner.threads`` passes share the buffer (5,033,164 by default).

        A section with more distinct keys than this is cleaned in several passes.
        """
        return self.offset_map_capacity_for()
