"""The options of ``format("deltalog")``: Spark's Kafka source options, parsed and checked once on the driver
side (plain data: pickled to the tasks)."""


from __future__ import annotations

import json
import re
from collections.abc import Mapping

import pyarrow as pa

from deltalog.errors import InvalidArgumentError
from deltalog.log import transactions
from deltalog.option_spec import OptionSpec, by_name, parse_options
from deltalog.sql.source import STORAGE_OPTION_PREFIX
from deltalog.storage import Storage

SOURCE_NAME = "deltalog"
#: Kafka's ``ListOffsets`` sentinels in ``startingOffsets``/``endingOffsets`` JSON.
EARLIEST = -2
LATEST = -1
#: The ``headers`` column of a staged or read record (Kafka's record headers).
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]))





# -- options -----------------------------------------------------------------------------------------------


def _bool(name: str, raw: str) -> bool:
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise InvalidArgumentError(f"option {name!r} must be 'true' or 'false', not {raw!r}")
    return text == "true"


def _positive(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidArgumentError(f"option {name!r} must be a positive integer, not {raw!r}")
    return value


def _text(name: str, raw: str) -> str:
    return str(raw)


def _timestamp(name: str, raw: str) -> int:
    """Spark's ``startingTimestamp``/``endingTimestamp``: one long, milliseconds since the epoch."""
    text = str(raw).strip()
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgumentError(f"option {name!r}: Expected a single long value, got {text}") from None
    if value < 0:
        raise InvalidArgumentError(f"option {name!r} must be a timestamp in milliseconds since the epoch (>= 0), "
                                   f"not {text}")
    return value


def _strategy(name: str, raw: str) -> str:
    value = str(raw).strip().lower()
    if value not in ("error", "latest"):
        raise InvalidArgumentError(f"option {name!r} must be 'error' (fail when a partition has no record at or "
                                   f"after the time) or 'latest' (start such a partition at its latest offset), "
                                   f"not {raw!r}")
    return value


def _mode(name: str, raw: str) -> str:
    value = str(raw).strip().lower()
    if value not in ("log", "current"):
        raise InvalidArgumentError(f"option 'mode' must be 'log' (every record) or 'current' (the latest "
                                   f"record per key), not {raw!r}")
    return value


def _isolation(name: str, raw: str) -> str:
    return transactions.isolation_level(raw, transactions.READ_COMMITTED)


def _offsets(name: str, raw: str) -> str | dict[str, dict[int, int]]:
    return _parse_offsets(name, raw)  # type: ignore[return-value]


def _timestamps(name: str, raw: str) -> dict[str, dict[int, int]]:
    return _parse_timestamps(name, raw)


#: Every option ``format("deltalog")`` implements (names are case-insensitive, as Spark's options): Spark's Kafka
#: source and sink options first, then deltalog's own. The strategy options (subscribe, subscribePattern,
#: assign) and the store (``store``/``path``, ``storage.*``) are read by :class:`Options` itself.
SPECS: tuple[OptionSpec, ...] = (
    OptionSpec("subscribe", "subscribe_text", _text, None, "A comma-separated list of topics to read."),
    OptionSpec("subscribePattern", "pattern_text", _text, None, "A regular expression; the topics it matches whole."),
    OptionSpec("assign", "assign_text", _text, None, 'Specific topic partitions, JSON: {"topicA":[0,1]}.'),
    OptionSpec("startingOffsets", "starting", _offsets, None,
               "'earliest', 'latest' (streaming) or JSON of offsets per partition (-2 earliest, -1 latest)."),
    OptionSpec("endingOffsets", "ending", _offsets, None,
               "Batch reads: 'latest' or JSON of offsets per partition (-1 latest)."),
    OptionSpec("startingOffsetsByTimestamp", "starting_by_timestamp", _timestamps, None,
               'JSON of a timestamp per partition: {"topicA":{"0":1700000000000}}; each partition starts at its '
               "earliest offset whose timestamp is at or after it."),
    OptionSpec("endingOffsetsByTimestamp", "ending_by_timestamp", _timestamps, None,
               "Batch reads: as startingOffsetsByTimestamp, for the end (exclusive); no such offset: latest."),
    OptionSpec("startingTimestamp", "starting_timestamp", _timestamp, None,
               "One timestamp for every partition (wins over startingOffsetsByTimestamp and startingOffsets)."),
    OptionSpec("endingTimestamp", "ending_timestamp", _timestamp, None,
               "Batch reads: one timestamp for every partition's end (wins over endingOffsetsByTimestamp)."),
    OptionSpec("startingOffsetsByTimestampStrategy", "on_no_match", _strategy, "error",
               "When no record is at or after a starting timestamp: 'error' (the default) or 'latest'."),
    OptionSpec("failOnDataLoss", "fail_on_data_loss", _bool, True,
               "Fail when offsets a read wants are gone (retention, DeleteRecords); false: skip them."),
    OptionSpec("includeHeaders", "include_headers", _bool, False, "Add the headers column."),
    OptionSpec("maxOffsetsPerTrigger", "max_offsets_per_trigger", _positive, None,
               "Streaming: at most this many offsets a micro-batch, shared by the partitions."),
    OptionSpec("minPartitions", "min_partitions", _positive, None,
               "Batch reads: at least this many Spark partitions, offset ranges split if needed."),
    OptionSpec("kafka.isolation.level", "isolation_level", _isolation, transactions.READ_COMMITTED,
               "read_committed (the default: up to the last stable offset, aborted transactions left out) or "
               "read_uncommitted.", aliases=("isolation.level", "isolationLevel")),
    OptionSpec("topic", "topic", _text, None, "Writes: the topic of every row (overrides a topic column)."),
    OptionSpec("checkpointLocation", "checkpoint", _text, None, "Streaming writes: Spark's checkpoint."),
    # deltalog's own
    OptionSpec("store", "root", _text, None, "The store's location (or load(<uri>) / save(<uri>)).",
               aliases=("path",)),
    OptionSpec("mode", "mode", _mode, "log", "Batch reads: 'log' (every record) or 'current' (latest per key)."),
    OptionSpec("pushFilters", "push_filters", _bool, False,
               "Batch reads: prune topics, partitions and offset ranges by pushed filters."),
    OptionSpec("transactional.id", "transactional_id", _text, None,
               "Streaming writes: the app id of each micro-batch's Delta transaction identifier.",
               aliases=("transactionalId",)),
)

#: Kafka client settings that only configure a network client (servers, security, timeouts, buffers,
#: batching): a deltalog store has no broker to reach, so they are accepted and ignored, and code written for
#: ``format("kafka")`` runs unchanged. Names after ``kafka.``; a name ending in ``.`` is a prefix.
IGNORED_CLIENT_SETTINGS = (
    "bootstrap.servers", "client.id", "client.dns.lookup", "client.rack", "security.protocol", "security.",
    "sasl.", "ssl.", "request.timeout.ms", "default.api.timeout.ms", "session.timeout.ms",
    "heartbeat.interval.ms", "retry.backoff.", "reconnect.backoff.", "socket.connection.setup.timeout.",
    "connections.max.idle.ms", "metadata.max.age.ms", "receive.buffer.bytes", "send.buffer.bytes",
    "fetch.min.bytes", "fetch.max.bytes", "fetch.max.wait.ms", "max.partition.fetch.bytes", "max.poll.records",
    "max.poll.interval.ms", "group.id", "group.instance.id", "check.crcs", "metrics.", "acks", "linger.ms",
    "batch.size", "buffer.memory", "compression.", "max.request.size", "max.block.ms", "delivery.timeout.ms",
    "retries", "max.in.flight.requests.per.connection",
)
#: Spark's own options that tune its Kafka consumer's polling and retries: accepted and ignored likewise.
IGNORED_SPARK_OPTIONS = ("kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
                         "groupIdPrefix")

#: Kafka client settings Spark's source and sink refuse (KafkaSourceProvider.validateGeneralOptions,
#: kafkaParamsForProducer), refused here in Spark's words.
REFUSED_CLIENT_SETTINGS = {
    "auto.offset.reset": "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
                         "'startingoffsets' to 'earliest' or 'latest' to specify where to start. Structured "
                         "Streaming manages which offsets are consumed internally, rather than relying on the "
                         "kafkaConsumer to do it.",
    "key.deserializer": "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte arrays "
                        "with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the keys.",
    "value.deserializer": "Kafka option 'value.deserializer' is not supported as values are deserialized as byte "
                          "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize "
                          "the values.",
    "key.serializer": "Kafka option 'key.serializer' is not supported as keys are serialized with "
                      "ByteArraySerializer.",
    "value.serializer": "Kafka option 'value.serializer' is not supported as values are serialized with "
                        "ByteArraySerializer.",
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}


def _ignored(name: str) -> bool:
    lower = name.lower()
    if lower in {n.lower() for n in IGNORED_SPARK_OPTIONS}:
        return True
    if not lower.startswith("kafka."):
        return False
    rest = lower[len("kafka."):]
    return any(rest.startswith(n) if n.endswith(".") else rest == n for n in IGNORED_CLIENT_SETTINGS)


def _check_names(options: Mapping[str, str]) -> None:
    """Refuse what ``format("deltalog")`` does not implement, naming what it does."""
    for name in options:
        lower = name.lower()
        if lower.startswith("kafka.") and lower[len("kafka."):] in REFUSED_CLIENT_SETTINGS:
            raise InvalidArgumentError(REFUSED_CLIENT_SETTINGS[lower[len("kafka."):]])
    known = by_name(SPECS, case_insensitive=True)
    unknown = sorted(n for n in options if n.lower() not in known and not n.lower().startswith(STORAGE_OPTION_PREFIX)
                     and not _ignored(n))
    if unknown:
        raise InvalidArgumentError(
            f"format('deltalog') does not implement the option(s) {', '.join(map(repr, unknown))}. It takes: "
            f"{', '.join(spec.name for spec in SPECS)}, {STORAGE_OPTION_PREFIX}<name> (storage options); and it "
            f"accepts and ignores the settings of a Kafka network client (kafka.bootstrap.servers, "
            f"kafka.security.*, kafka.sasl.*, kafka.ssl.*, timeouts and buffer sizes) and "
            f"{', '.join(IGNORED_SPARK_OPTIONS)}. See docs/spark-kafka-source.md.")


class Options:
    """The options of one ``format("deltalog")`` read or write, parsed and checked once against :data:`SPECS`
    (plain data: it is pickled to the tasks)."""

    starting: str | dict[str, dict[int, int]] | None
    ending: str | dict[str, dict[int, int]] | None
    starting_by_timestamp: dict[str, dict[int, int]] | None
    ending_by_timestamp: dict[str, dict[int, int]] | None
    starting_timestamp: int | None
    ending_timestamp: int | None
    on_no_match: str
    fail_on_data_loss: bool
    include_headers: bool
    push_filters: bool
    isolation_level: str
    mode: str
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    topic: str | None
    checkpoint: str | None
    transactional_id: str | None

    def __init__(self, options: Mapping[str, str]) -> None:
        _check_names(options)
        opts = {k.lower(): v for k, v in options.items()}
        values = parse_options(SPECS, options, case_insensitive=True, defaults=True)
        root = values.pop("root")
        if not root:
            raise InvalidArgumentError(
                "format('deltalog') needs the store: option('store', <uri>) or load(<uri>) / save(<uri>)")
        self.root: str = root
        self.storage_options = {k[len(STORAGE_OPTION_PREFIX):]: v for k, v in opts.items()
                                if k.startswith(STORAGE_OPTION_PREFIX)}
        subscribe, pattern, assign = values.pop("subscribe_text"), values.pop("pattern_text"), values.pop("assign_text")
        self.__dict__.update(values)
        strategies = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k) is not None]
        self.strategy = strategies[0] if len(strategies) == 1 else None
        self.strategy_error = None
        if len(strategies) > 1:
            self.strategy_error = ("only one of the options subscribe, subscribePattern, assign can be given; got "
                                   + ", ".join(strategies))
        elif not strategies:
            self.strategy_error = "one of the options subscribe, subscribePattern, assign is required to read"
        self.subscribe: list[str] = []
        self.pattern: str | None = None
        self.assign: dict[str, list[int]] = {}
        if self.strategy == "subscribe":
            self.subscribe = [t.strip() for t in subscribe.split(",") if t.strip()]
            if not self.subscribe:
                raise InvalidArgumentError(f"no topics to subscribe to in option 'subscribe': {subscribe!r}")
        elif self.strategy == "subscribepattern":
            self.pattern = pattern.strip()
            if not self.pattern:
                raise InvalidArgumentError("option 'subscribePattern' is empty")
            try:
                re.compile(self.pattern)
            except re.error as e:
                raise InvalidArgumentError(f"option 'subscribePattern' is not a regular expression: {e}") from None
        elif self.strategy == "assign":
            self.assign = _parse_assign(assign)
        _check_limits(self)

    @property
    def starts_by_time(self) -> bool:
        return self.starting_timestamp is not None or self.starting_by_timestamp is not None

    @property
    def ends_by_time(self) -> bool:
        return self.ending_timestamp is not None or self.ending_by_timestamp is not None

    def require_strategy(self) -> None:
        if self.strategy_error:
            raise InvalidArgumentError(self.strategy_error)

    def storage(self) -> Storage:
        return Storage(self.root, self.storage_options or None)


def _check_limits(opts: Options) -> None:
    """Spark's ``checkOffsetLimitValidity``, before anything is resolved: specific start offsets (or start
    timestamps) past the matching end ones, for partitions given in both."""
    pairs = []
    if not opts.starts_by_time and not opts.ends_by_time:
        if isinstance(opts.starting, dict) and isinstance(opts.ending, dict):
            pairs.append(("offset", opts.starting, opts.ending))
    elif (opts.starting_timestamp is None and opts.ending_timestamp is None and opts.starting_by_timestamp is not None
          and opts.ending_by_timestamp is not None):
        pairs.append(("timestamp", opts.starting_by_timestamp, opts.ending_by_timestamp))
    elif opts.starting_timestamp is not None and opts.ending_timestamp is not None:
        if opts.starting_timestamp > opts.ending_timestamp:
            raise InvalidArgumentError(f"[UNRESOLVED_START_TIMESTAMP_GREATER_THAN_END_TIMESTAMP] The specified start "
                                       f"timestamp {opts.starting_timestamp} is greater than the end timestamp "
                                       f"{opts.ending_timestamp}.")
    for what, start, end in pairs:
        for topic, parts in start.items():
            for p, s in parts.items():
                e = end.get(topic, {}).get(p)
                if e is not None and s >= 0 and e >= 0 and s > e:
                    kind = "OFFSET" if what == "offset" else "TIMESTAMP"
                    raise InvalidArgumentError(
                        f"[UNRESOLVED_START_{kind}_GREATER_THAN_END_{kind}] The specified start {what} {s} is greater "
                        f"than the end {what} {e} for topic {topic} partition {p}.")


def _parse_assign(text: str) -> dict[str, list[int]]:
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if (not isinstance(value, dict) or not value
            or not all(isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                                    for p in ps) for ps in value.values())):
        raise InvalidArgumentError(f"option 'assign': expected e.g. {example}, got {text!r}")
    return {str(t): sorted(set(ps)) for t, ps in value.items()}


def _parse_timestamps(name: str, text: str) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": 1700000000000, ...}}``: a timestamp (ms since the epoch) per partition (Spark's
    ``JsonUtils.partitionTimestamps``)."""
    example = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
    try:
        value = json.loads(text)
        if not isinstance(value, dict) or not value:
            raise ValueError
        out: dict[str, dict[int, int]] = {}
        for topic, parts in value.items():
            if not isinstance(parts, dict) or not parts:
                raise ValueError
            if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in parts.values()):
                raise ValueError
            out[str(topic)] = {int(p): int(t) for p, t in parts.items()}
        return out
    except (ValueError, TypeError):
        raise InvalidArgumentError(f"option {name!r}: JSON of a timestamp (milliseconds since the epoch, >= 0) per "
                                   f"partition, such as {example}, got {text!r}") from None


def _parse_offsets(name: str, text: str | None) -> str | dict[str, dict[int, int]] | None:
    """``earliest``, ``latest`` or ``{"topic": {"0": 23, "1": -1}}`` (-2 earliest, -1 latest)."""
    if text is None:
        return None
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return word
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError
        out: dict[str, dict[int, int]] = {}
        for topic, parts in value.items():
            if not isinstance(parts, dict):
                raise ValueError
            out[str(topic)] = {int(p): int(o) for p, o in parts.items()}
            if any(o < EARLIEST or isinstance(o, bool) for o in out[str(topic)].values()):
                raise ValueError
        return out
    except (ValueError, TypeError):
        raise InvalidArgumentError(f"option {name!r}: 'earliest', 'latest' or JSON such as {example} (-2: earliest, "
                                   f"-1: latest), got {text!r}") from None


