"""The store: a thin facade over deltalog's services, holding the Spark session.

``Store(uri)`` is what users hold. It owns three things and delegates everything else:

* the :class:`~deltalog.log.log_manager.LogManager` (topics, partition logs, leases) over the store's
  :class:`~deltalog.storage.Storage` (a local path or an object-store URI with its storage options), which
  appends and reads through delta-rs and pyarrow directly, so producing and consuming never start Spark;
* the Spark session: the one given as ``spark=`` (classic or Spark Connect, used as it is; or a function that
  returns one, called the first time a Spark job runs, as the scheduled job gives it), or the embedded
  one created the first time a Spark job runs (:mod:`deltalog.sql.session`: a Spark Connect session when
  ``SPARK_REMOTE`` is set, else a local classic one);
* the store-wide settings (:class:`~deltalog.config.StoreConfig`, Kafka's broker keys: ``log.cleaner.*``,
  ``offsets.*``, ``transactional.id.*``).

Cleaning goes through the one cleaning loop (:class:`~deltalog.cleaner.log_cleaner.LogCleaner`), SQL through
:mod:`deltalog.sql.views` (Spark) or :mod:`deltalog.sql.embedded` (DuckDB, no JVM), view DDL for other engines
through :mod:`deltalog.sql.ddl`, checks through :mod:`deltalog.quality`, retention and VACUUM through
:mod:`deltalog.log.retention` and :mod:`deltalog.log.vacuum`. See ``docs/ARCHITECTURE.md``.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from deltalog import extras
from deltalog.cleaner.progress import DEFAULT_PROGRESS_INTERVAL_S, ProgressListener
from deltalog.cleaner.uncleanable import UncleanablePartitions
from deltalog.clock import Clock, WallClock
from deltalog.config import StoreConfig, TopicConfig, validate_config_mapping
from deltalog.coordinator.group.offsets_topic import OffsetsTopic
from deltalog.coordinator.transaction import hanging
from deltalog.describe import PartitionState, TopicDescription
from deltalog.errors import (
    CheckFailedError,
    CorruptStateError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTopicError,
    InvalidTypeError,
    UnknownTopicOrPartitionError,
    shown,
)
from deltalog.groups import admin as group_admin
from deltalog.groups.consumer import Consumer
from deltalog.log import arrow_records, damage, encoding, time_travel
from deltalog.log import history as history_
from deltalog.log.lease import LeaseManager
from deltalog.log.log_manager import (
    STATE_DIR,
    TOPICS_DIR,
    LogManager,
    is_internal_topic,
    validate_topic_name,
)
from deltalog.log.partition_log import PartitionLog
from deltalog.log.record import Record
from deltalog.log.retention import DeleteRecordsResult, RetentionResult, apply_retention, delete_records
from deltalog.log.vacuum import VacuumResult, vacuum_staged, vacuum_store, vacuum_temp_files
from deltalog.log.walk import each_partition
from deltalog.producer.kafka_producer import KafkaProducer
from deltalog.producer.router import PartitionRouter, ProduceResult
from deltalog.state import equality as state_equality
from deltalog.state import increment as state_increment
from deltalog.state import refresh as state_refresh
from deltalog.state import table as state_table
from deltalog.state.lag import StateLag
from deltalog.state.lag import state_lag as compute_state_lag
from deltalog.state.table import StateTable
from deltalog.storage import Storage
from deltalog.structs import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from deltalog.admin import AdminClient
    from deltalog.cleaner.cleaner import CleanResult
    from deltalog.cleaner.log_cleaner import LogCleaner
    from deltalog.groups.confluent_consumer import ConfluentConsumer
    from deltalog.quality import CheckFailedError, CheckResult

__all__ = ["STATE_DIR", "TOPICS_DIR", "Store", "validate_topic_name"]


SQL_ENGINES = ("spark", "embedded")


#: Said (once per process) when the default engine falls back to Spark: DuckDB is missing, Spark is here.
SQL_FALLBACK_NOTE = ("DuckDB, the embedded SQL engine, is not installed, so this query runs on Spark SQL (which "
                     "starts a JVM); pip install 'deltalog[sql]' to answer without Spark")
_fallback_noted = False


def default_sql_engine() -> str:
    """The engine of a query that names none on a store without a Spark session: the embedded one (no JVM to
    start), or Spark when DuckDB is not installed and Spark is (``pip install 'deltalog[spark]'`` alone, or a
    Databricks runtime): the query gets an answer rather than an error naming an extra. With neither, the
    embedded engine's error names the smaller install, ``deltalog[sql]``."""
    if extras.missing("sql") is not None and extras.missing("spark") is None:
        return "spark"
    return "embedded"


def sql_engine(engine: str | None, *, spark_given: bool) -> str:
    """The engine a query runs on: the one asked for (``spark`` or ``embedded``), else Spark for a store given
    a Spark session (its user works in Spark) and :func:`default_sql_engine` for any other (a fall back to Spark
    warns once per process, with :data:`SQL_FALLBACK_NOTE`)."""
    if engine is None:
        if spark_given:
            return "spark"
        chosen = default_sql_engine()
        global _fallback_noted
        if chosen == "spark" and not _fallback_noted:
            _fallback_noted = True
            warnings.warn(SQL_FALLBACK_NOTE, UserWarning, stacklevel=3)
        return chosen
    e = str(engine).strip().lower()
    if e not in SQL_ENGINES:
        raise InvalidArgumentError(f"unknown SQL engine {engine!r}; expected one of {', '.join(SQL_ENGINES)}")
    return e


class Store:
    """A deltalog store at a URI: topics of partitions, each partition one Delta table.

    ``uri`` is a local path (or ``file://`` URI) or an object-store URI: ``s3://bucket/prefix``,
    ``az://container/prefix``, ``abfss://container@account.dfs.core.windows.net/prefix``, ``gs://bucket/prefix``.
    Credentials and endpoints come from each cloud's standard environment variables (``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID``, ... ``AZURE_STORAGE_ACCOUNT_NAME``, ...) and from ``storage_options``, which
    delta-rs and the object store both read (e.g. ``{"AWS_REGION": "eu-west-1"}``). A location with no store
    becomes one (its marker ``_deltalog/store.json`` is created).
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        spark: SparkSession | Callable[[], SparkSession] | None = None,
        config: Mapping[str, Any] | None = None,
        create: bool = True,
    ) -> None:
        #: The one filesystem layer every data and state file of the store goes through (it refuses a root no
        #: filesystem or object store can hold before anything is created).
        self.storage = Storage(uri, storage_options)
        #: The normalized root: an absolute local path, or the URI without a trailing slash.
        self.root = self.storage.root
        if clock is not None and not callable(getattr(clock, "now_ms", None)):
            raise InvalidArgumentError(f"clock must be a deltalog Clock (with now_ms()), such as ManualClock(0), "
                                       f"not {shown(clock)}")
        self.clock: Clock = clock or WallClock()
        self.config = StoreConfig.from_properties(validate_config_mapping(config, "store config"))
        # A function that returns the session (the scheduled job's) is called the first time a Spark job runs,
        # so a cycle with nothing to clean never starts a JVM; a session is used as it is.
        self._spark_factory: Callable[[], SparkSession] | None = None
        if spark is not None and callable(spark) and not hasattr(spark, "createDataFrame"):
            self._spark_factory, spark = spark, None
        self._spark = spark
        self._spark_given = spark is not None or self._spark_factory is not None
        self._embedded: Any = None
        #: The registry of topics and partition logs every service works on (``create=False``: raises
        #: :class:`~deltalog.errors.NoStoreError` where there is no store).
        try:
            self.log_manager = LogManager(self.storage, self.clock, create=create,
                                          walk_threads=self.config.background_threads)
        except OSError as e:  # a file where the store should be, no permission, ...
            raise InvalidArgumentError(f"cannot use {self.root} as a store: {e.strerror or e}") from None
        self._producer: PartitionRouter | None = None
        self._offsets: OffsetsTopic | None = None
        #: the state tables' versions this store proved equal to the log (the next check after a refresh on top of
        #: one proves only what the refresh changed: deltalog.state.increment)
        self._state_proven: state_increment.Proven = {}

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    # -- Spark ----------------------------------------------------------------------------------------

    @property
    def spark(self) -> SparkSession:
        """The session Spark jobs run on: the one given, or the embedded one (created on first use)."""
        if self._spark is None:
            if self._spark_factory is not None:
                self._spark = self._spark_factory()
                return self._spark
            # Imported here, not at the top: pyspark is slow to import, and producers never need it.
            from deltalog.sql.session import local_session

            self._spark = local_session()
        return self._spark

    def start_spark(self) -> None:
        """Begin starting the embedded Spark session, and its warm-up, on a thread of its own: for a caller that
        knows a Spark job will follow and has Spark-free work to do first (``deltalog clean`` ranks, leases and
        plans before its first pass). :attr:`spark` then waits for it. A session given as it is, or one already
        made, is left alone."""
        if self._spark is not None:
            return
        from deltalog.sql.session import SessionStarter, local_session  # pyspark only where Spark will run

        if self._spark_factory is None:
            self._spark_factory = SessionStarter(local_session)
        if isinstance(self._spark_factory, SessionStarter):
            self._spark_factory.start()

    def _spark_session(self) -> SparkSession:
        """The session a cleaning pass runs on: :attr:`spark`, once the embedded session's warm-up has run (none
        for a session given as it is), so the pass does not share the cores with it (docs/scale.md)."""
        session = self.spark
        from deltalog.sql.session import await_warm_up  # pyspark is imported by now: the session exists

        await_warm_up(session)
        return session

    # -- topics ---------------------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int = 1, *, config: Mapping[str, Any] | None = None) -> TopicConfig:
        """Create a topic of ``partitions`` empty partition tables with the given Kafka topic configs.

        A failure leaves no half-created topic and two concurrent creators cannot both succeed. deltalog's internal
        topics (``__consumer_offsets``, ``__transaction_state``) are made by deltalog on first use, with the format
        and configs it reads them with, so a user cannot create them (other names starting with ``__`` are legal,
        as in Kafka).
        """
        if isinstance(topic, str) and is_internal_topic(topic):
            raise InvalidTopicError(f"Creation of internal topic {topic} is prohibited: deltalog creates it on first "
                                    "use (committing a consumer group's offsets makes __consumer_offsets)")
        return self.log_manager.create_topic(topic, partitions, config)

    def list_topics(self) -> list[str]:
        """Every topic, a topic whose marker is damaged included (never silently left out): every operation on
        such a topic raises :class:`~deltalog.errors.CorruptStateError` naming the file, and
        :meth:`damaged_topics` says which they are and why."""
        return self.log_manager.list_topics(include_damaged=True)

    def damaged_topics(self) -> dict[str, CorruptStateError]:
        """The topics whose marker (``topics/<topic>/_topic.json``) is damaged, each with the error that names the
        file and how to recover."""
        return self.log_manager.damaged_topics()

    def topic_exists(self, topic: str) -> bool:
        return self.log_manager.topic_exists(topic)

    def partitions(self, topic: str) -> list[int]:
        """The partition numbers of a topic, in order."""
        return self.log_manager.partitions(topic)

    def delete_topic(self, topic: str) -> None:
        """Remove a topic and all its data (Kafka's DeleteTopics), the cleaner's state about it and every consumer
        group's committed offsets of it. Irreversible."""
        self.log_manager.delete_topic(topic)
        if not is_internal_topic(topic):
            self.offsets_topic.delete_topic_offsets(topic, self.clock.now_ms())  # as Kafka's coordinator does
        else:
            self._offsets = None  # its partition count and replays were of the topic just deleted
        UncleanablePartitions(self.storage).forget_topic(topic)
        from deltalog.cleaner import metrics  # the cleaner's modules: only where the store cleans (start-up time)

        metrics.forget_topic(self.log_manager, topic)
        StateTable(self.storage, topic).delete()

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The :class:`PartitionLog` of one partition; raises if the topic or partition does not exist."""
        return self.log_manager.log(topic, partition)

    def logs(self, topic: str | None = None) -> list[PartitionLog]:
        """Every partition log of one topic, or of the whole store."""
        return self.log_manager.logs(topic)

    def topic_config(self, topic: str) -> TopicConfig:
        return self.log_manager.topic_config(topic)

    def alter_topic_config(self, topic: str, config: Mapping[str, Any]) -> TopicConfig:
        """Set some topic configs (Kafka's incrementalAlterConfigs SET); the others keep their values.

        The whole change is validated before any partition is touched.
        """
        return self.log_manager.alter_topic_config(topic, config)

    # -- producing and consuming ------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: Sequence[Record] | pa.Table | pa.RecordBatch) -> list[int]:
        """Append records to a partition as one batch; returns their offsets, in order.

        ``records`` may also be a ``pyarrow.Table``/``RecordBatch`` with columns ``key``, ``value`` and
        optionally ``headers``, ``timestamp_ms`` (see :mod:`deltalog.log.arrow_records`)."""
        if isinstance(records, Record):
            records = [records]
        if not arrow_records.is_arrow(records):
            if isinstance(records, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(records, Iterable):
                raise InvalidRecordError(
                    f"records must be a list of deltalog.Record or a pyarrow Table/RecordBatch, not "
                    f"{type(records).__name__} {shown(records, 60)}"
                )
            records = list(records)
        return self.log(topic, partition).append(records, self.clock.now_ms())

    def produce(self, topic: str, records: Sequence[Record] | Record | pa.Table | pa.RecordBatch, *,
                partition: int | None = None) -> ProduceResult:
        """Send records to ``topic``, each to the partition Kafka's producer would pick; returns each record's
        :class:`~deltalog.producer.router.RecordMetadata` (topic, partition, offset, timestamp), in input order.

        A keyed record goes to murmur2(key) & 0x7fffffff % partitions (Kafka's default partitioner), a keyless one
        to the sticky partitioner's current partition (KIP-480), unless ``partition`` (for every record) or a
        ``partition`` column of an Arrow batch (per record, null: the partitioner chooses) says otherwise. One
        append, one Delta commit, per partition the call touches. See :mod:`deltalog.producer.router`.
        """
        if self._producer is None:
            self._producer = PartitionRouter(self.log_manager)
        return self._producer.send(topic, records, self.clock.now_ms(), partition=partition)

    def producer(self, config: Mapping[str, Any] | None = None, /, **configs: Any) -> KafkaProducer:
        """Kafka's producer with its configs (``enable_idempotence`` (default True), ``transactional_id``, ``acks``,
        ``retries``, ...; also by Kafka's dotted names, and as one dict, as confluent-kafka's ``Producer(conf)``
        takes them): ``init_transactions``, ``send``/``produce``, ``poll``, ``flush``, ``close``. An idempotent
        producer's retried batch lands once; see :mod:`deltalog.producer.kafka_producer`."""
        return KafkaProducer(self.log_manager, **{**dict(config or {}), **configs})

    def find_hanging_transactions(self, topic: str | None = None, partition: int | None = None, *,
                                  max_transaction_timeout_ms: int = hanging.DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
                                  ) -> list[hanging.OpenTransaction]:
        """Transactions open in the store's partitions (one topic's, or one partition's) for longer than
        ``max_transaction_timeout_ms`` that no transactional id's state will ever end: they hold their partition's
        last stable offset back for ever (Kafka's ``kafka-transactions.sh find-hanging``). End one with
        :meth:`abort_transaction`. See :mod:`deltalog.coordinator.transaction.hanging`."""
        return hanging.find_hanging(self.log_manager, topic=topic, partition=partition,
                                    max_transaction_timeout_ms=max_transaction_timeout_ms)

    def abort_transaction(self, topic: str, partition: int, *, start_offset: int | None = None,
                          producer_id: int | None = None, producer_epoch: int | None = None,
                          coordinator_epoch: int = hanging.NO_COORDINATOR_EPOCH) -> int:
        """Abort the transaction open in ``topic``-``partition`` that starts at ``start_offset`` (or that of
        ``producer_id`` at ``producer_epoch``) by writing its ABORT marker; returns the marker's offset (Kafka's
        ``Admin.abortTransaction``, ``kafka-transactions.sh abort``). A last resort for a hanging transaction:
        its records are dropped for ``read_committed`` readers and the cleaner."""
        return hanging.abort_transaction(self.log_manager, topic, partition, start_offset=start_offset,
                                         producer_id=producer_id, producer_epoch=producer_epoch,
                                         coordinator_epoch=coordinator_epoch)

    def roll(self, topic: str, partition: int) -> int:
        """Close the active segment now; returns the base offset of the new active segment."""
        return self.log(topic, partition).roll(self.clock.now_ms())

    def read(
        self,
        topic: str,
        partition: int,
        from_offset: int | Literal["earliest", "latest"] = 0,
        *,
        max_records: int | None = None,
        isolation_level: str = "read_uncommitted",
        version_as_of: int | None = None,
        timestamp_as_of: time_travel.Timestamp | None = None,
        decode: bool = True,
    ) -> list[Record]:
        """Records from ``from_offset`` on, in offset order (``"earliest"``: the log start offset).

        Keys and values come as the topic declares them (``key.encoding`` / ``value.encoding``): ``str`` on a
        ``string`` topic, the decoded JSON (a ``dict`` for an object) on a ``json`` one, as ``deltalog consume``
        prints them and SQL reads them; bytes on a ``bytes`` topic (the default) and with ``decode=False``. Data
        written before the topic declared its encoding, which does not decode, comes as bytes. (Before this
        version every read returned bytes.)

        A position that compaction emptied reads on from the next record; an offset below the log start
        or past the log end raises :class:`~deltalog.errors.OffsetOutOfRangeError`. ``isolation_level`` is
        Kafka's: ``read_uncommitted`` (the Kafka consumer's default) reads to the log end, records of open and
        aborted transactions included; ``read_committed`` stops at the last stable offset and leaves aborted
        records out. Transaction markers are never returned.

        ``version_as_of`` (a Delta version of this partition's table) or ``timestamp_as_of`` (a ``datetime``, an ISO
        8601 string or epoch milliseconds) read the partition as it was then (Delta's ``versionAsOf`` /
        ``timestampAsOf``; see :mod:`deltalog.log.time_travel`): offsets, log start and end of that version.
        """
        log = self.log(topic, partition)
        at_ = time_travel.as_of(version_as_of, timestamp_as_of)
        snap = None if at_ is None else time_travel.snapshot_as_of(log, at_)
        if from_offset == "earliest":
            from_offset = log.head().log_start_offset if snap is None else snap.log_start_offset
        elif from_offset == "latest":
            from_offset = log.head().log_end_offset if snap is None else snap.log_end_offset
        elif isinstance(from_offset, bool) or not isinstance(from_offset, int):
            raise InvalidConfigError(f"from_offset must be an int, 'earliest' or 'latest', not {shown(from_offset)}")
        if max_records is not None and (isinstance(max_records, bool) or not isinstance(max_records, int)
                                        or max_records < 0):
            raise InvalidConfigError(f"max_records must be None or an int >= 0, not {shown(max_records)}")
        if max_records is not None and max_records >= 2**63:  # more than any partition holds; Arrow takes int64
            max_records = None
        records = log.read(from_offset, max_records, isolation_level=isolation_level, at=snap)
        if not decode or not records:
            return records
        config = log.head().config if snap is None else snap.config
        return encoding.decoded_records(records, config.key_encoding, config.value_encoding)

    def history(self, topic: str, partition: int | None = None, *, limit: int | None = None
                ) -> list[history_.HistoryEntry]:
        """The Delta commits of every partition of ``topic`` (or of one), newest first, as Delta's
        ``DESCRIBE HISTORY [LIMIT n]`` lists a table's: version, time, what happened (deltalog's appends, cleans,
        retention, transaction markers, ... and other engines' operations), the figures recorded and the files
        added and removed. ``limit`` is per partition, as DESCRIBE HISTORY's is per table. See
        :mod:`deltalog.log.history`."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise InvalidArgumentError(f"limit must be None or an int >= 1, not {shown(limit)}")
        if limit is not None and limit >= 2**31:  # more than any log holds; delta-rs takes a bounded integer
            limit = None
        logs = [self.log(topic, partition)] if partition is not None else self.log_manager.logs(topic)
        entries = [e for log in logs for e in history_.history(log, limit)]
        # newest first on the monotonic times, which follow each partition's version order under any clock skew
        entries.sort(key=lambda e: (-(e.timestamp_ms or 0), e.partition, -e.version))
        return entries

    # -- consumer groups ------------------------------------------------------------------------------

    @property
    def offsets_topic(self) -> OffsetsTopic:
        """The store's committed offsets (``__consumer_offsets``, created on the first commit); one per store
        object, which keeps each partition's replay (see :mod:`deltalog.coordinator.group.offsets_topic`)."""
        if self._offsets is None:
            self._offsets = OffsetsTopic(self.log_manager, self.config)
        return self._offsets

    @overload
    def consumer(self, conf: Mapping[str, Any], /, **configs: Any) -> ConfluentConsumer: ...

    @overload
    def consumer(self, *topics: str, **configs: Any) -> Consumer: ...

    def consumer(self, *topics: Any, **configs: Any) -> Consumer | ConfluentConsumer:  # type: ignore[misc]
        """A consumer with Kafka's names (kafka-python's ``KafkaConsumer(*topics, group_id=..., ...)``; configs also
        by Kafka's dotted names): ``subscribe``/``assign``, ``poll``/iteration, ``commit``, ``committed``,
        ``position``, ``seek``, ``offsets_for_times``, ``close``. See :mod:`deltalog.groups.consumer` for what differs
        from Kafka's. Given one configuration dict, as ``confluent_kafka.Consumer(conf)`` takes it
        (``store.consumer({"group.id": "g"})``), confluent-kafka's consumer shape instead (``poll(timeout)`` -> one
        message or None, ``consume``, ``commit(message=...)``; :mod:`deltalog.groups.confluent_consumer`)."""
        if len(topics) == 1 and isinstance(topics[0], Mapping):
            from deltalog.groups.confluent_consumer import ConfluentConsumer  # only confluent-shaped code needs it

            return ConfluentConsumer(lambda **c: Consumer(self.log_manager, self.offsets_topic, self.clock, **c),
                                     {**topics[0], **configs})
        return Consumer(self.log_manager, self.offsets_topic, self.clock, *topics, **configs)

    def admin(self) -> AdminClient:
        """Kafka's AdminClient calls with the names both Python clients use (``create_topics([NewTopic(...)])``,
        ``delete_topics``, ``describe_configs``, ``incremental_alter_configs``, ``create_partitions``,
        ``list_consumer_groups``, ``delete_records``), answering with done futures as confluent-kafka's; see
        :mod:`deltalog.admin`."""
        from deltalog.admin import AdminClient  # the facade imports the store's modules; kept out of start-up

        return AdminClient(self)

    def list_consumer_groups(self) -> list[str]:
        """The ids of the groups with committed offsets, sorted."""
        return group_admin.list_groups(self.offsets_topic)

    def list_consumer_group_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets; :class:`~deltalog.errors.GroupIdNotFoundError` if it has none."""
        return group_admin.group_offsets(self.offsets_topic, group_id)

    def describe_consumer_group(self, group_id: str) -> list[group_admin.PartitionOffsets]:
        """Per committed partition: offset, log end offset and lag (``kafka-consumer-groups --describe``)."""
        return group_admin.describe_group(self.log_manager, self.offsets_topic, group_id)

    def alter_consumer_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | int]
                                     ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Commit ``offsets`` for the group (Kafka's AdminClient ``alterConsumerGroupOffsets``)."""
        return group_admin.alter_offsets(self.offsets_topic, group_id, offsets, self.clock.now_ms())

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """Remove every committed offset of each group (Kafka's ``deleteConsumerGroups``)."""
        if isinstance(group_ids, str):
            group_ids = [group_ids]
        try:
            group_ids = list(group_ids)
        except TypeError:
            raise InvalidTypeError(f"delete_consumer_groups() takes a list of group ids, not {shown(group_ids)}") \
                from None
        for g in group_ids:
            group_admin.delete_group(self.offsets_topic, g, self.clock.now_ms())

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Remove the group's committed offsets of ``partitions`` (Kafka's ``deleteConsumerGroupOffsets``)."""
        return group_admin.delete_offsets(self.offsets_topic, group_id, partitions, self.clock.now_ms())

    # -- state ----------------------------------------------------------------------------------------

    def describe(self, topic: str) -> TopicDescription:
        """Per partition: log start/end offsets, segments with sizes, clean/dirty bytes, dirty ratio.

        A damaged partition (its Delta log, or a data file missing or of another size than its commit says)
        raises :class:`~deltalog.errors.CorruptLogError` naming the partition and the file; one that holds an
        offset twice says so in ``duplicated_offsets`` and ``duplicates`` (and is eligible for cleaning)."""
        return self.describe_topics([topic])[0]

    def describe_topics(self, topics: Sequence[str]) -> list[TopicDescription]:
        """:meth:`describe` of each topic, in order: their partitions ``background.threads`` at a time (each one's
        Delta log and one listing of its files are its own round trips), the uncleanable marks listed once. The
        first damaged partition in order raises, as describing the topics one after another would."""
        topics = [validate_topic_name(t) for t in topics]  # a bad name is refused before any partition is read
        now = self.clock.now_ms()
        marks = UncleanablePartitions(self.storage)
        logs = [log for topic in topics for log in self.log_manager.logs(topic)]

        def state(log: PartitionLog) -> tuple[PartitionState, TopicConfig]:
            snap = log.snapshot()  # a damaged Delta log raises CorruptLogError naming the file
            damage.raise_data_damage(log.storage, log.uri, snap.files)  # one listing: missing or resized files
            mark = marks.get(snap.topic, snap.partition, snap.topic_id)
            reason = None if mark is None else f"{mark.error_type}: {mark.message}"
            return PartitionState.of(snap, now, uncleanable_reason=reason, txns=log.txn_index(snap),
                                     duplicated=log.duplicated_offsets(snap)), snap.config

        with marks.listed():
            walked = each_partition(logs, state, self.log_manager.walk_threads)
        by_topic: dict[str, list[tuple[PartitionState, TopicConfig]]] = {t: [] for t in topics}
        for w in walked:
            if w.error is not None:
                raise w.error
            by_topic[w.item.topic].append(w.result)  # type: ignore[arg-type] - set when there is no error
        out = []
        for topic in topics:
            found = by_topic[topic]
            config = found[0][1] if found else self.topic_config(topic)  # the table properties head() reads too
            lag = (self.state_lag(topic) if config.state_table(self.config) or StateTable(self.storage, topic).exists()
                   else None)
            out.append(TopicDescription(topic, config, tuple(st for st, _ in found), lag))
        return out

    # -- state tables (deltalog.state, docs/state-table.md) ------------------------------------------------

    def state_table_enabled(self, topic: str) -> bool:
        """Whether ``topic`` keeps a state table: its ``state.table.enable``, else the store's
        ``log.state.table.enable``."""
        return self.topic_config(topic).state_table(self.config)

    def state_table_topics(self) -> list[str]:
        """The topics that keep a state table (internal topics never do)."""
        return [t for t in self.list_topics() if not is_internal_topic(t) and self.state_table_enabled(t)]

    def state_table_location(self, topic: str) -> str:
        """Where the state table of ``topic`` is (``<store>/state/<topic>``), for any Delta reader."""
        validate_topic_name(topic)
        return StateTable(self.storage, topic).uri

    def refresh_state(self, topic: str, *, full: bool = False, check: bool | None = None,
                      progress: Callable[[int, int, str], None] | None = None) -> state_refresh.RefreshResult:
        """Bring the state table of ``topic`` up to each partition's last stable offset, in one Delta commit
        (:mod:`deltalog.state.refresh`); ``full`` rebuilds it from the log. ``check`` (default: the store's
        ``log.state.table.check``): then prove it equal to the log, raising
        :class:`~deltalog.errors.CheckFailedError` when it is not. A topic without ``state.table.enable`` (nor the
        store's default) raises :class:`~deltalog.errors.InvalidConfigError`. ``progress``: told ``(steps done,
        steps in all, what runs now)``: each partition read, then the merge."""
        if not self.state_table_enabled(topic):
            raise InvalidConfigError(f"topic {topic!r} keeps no state table: set its state.table.enable=true "
                                     "(deltalog configs --alter) or the store's log.state.table.enable=true")
        result = state_refresh.refresh(self.log_manager, topic, full=full, progress=progress)
        if self.config.state_table_check if check is None else check:
            result = state_increment.check_refresh(self.log_manager, topic, result, self._state_proven)
        return result

    def refresh_states(self) -> list[state_refresh.RefreshResult]:
        """:meth:`refresh_state` of every topic that keeps a state table (what the cleaner job runs each cycle)."""
        return [self.refresh_state(t) for t in self.state_table_topics()]

    def state(self, topic: str, *, version_as_of: int | None = None,
              timestamp_as_of: time_travel.Timestamp | None = None, columns: Sequence[str] | None = None,
              format: Literal["arrow", "pandas", "polars"] = "arrow") -> Any:  # noqa: A002 (the reader's word)
        """The state table of ``topic`` (one row per live key) as Arrow, pandas or Polars, read by delta-rs: no
        Spark. ``version_as_of`` / ``timestamp_as_of``: the table as of a version or a time (the log's option
        names; :meth:`state_history` maps versions to log offsets). Raises
        :class:`~deltalog.errors.UnknownTopicOrPartitionError` when the topic has no state table yet."""
        if format not in ("arrow", "pandas", "polars"):
            raise InvalidArgumentError(f"format must be 'arrow', 'pandas' or 'polars', not {shown(format)}")
        table = StateTable(self.storage, topic)
        dt = table.open()
        if dt is None:
            self.partitions(topic)  # an unknown topic says so
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no state table yet: set state.table.enable=true "
                                               "and run store.refresh_state(topic) (deltalog state refresh)")
        version = state_table.version_as_of(dt, topic, version_as_of, timestamp_as_of)
        if version is not None:
            dt = table.open(version)
        rows = state_table.read(dt, list(columns) if columns is not None else None)  # type: ignore[arg-type]
        if format == "pandas":
            return rows.to_pandas()
        if format == "polars":
            extras.require("polars", "store.state(..., format='polars')")
            import polars as pl  # only when asked for

            return pl.from_arrow(rows)
        return rows

    def state_history(self, topic: str, *, limit: int | None = None) -> list[state_table.StateVersion]:
        """The versions of the state table of ``topic``, newest first, each with the log offsets (and the
        partitions' Delta versions) it holds the state up to. Times are those ``state(timestamp_as_of=...)`` resolves
        on: made monotonic as Delta does, each refresher's own clock in ``writer_timestamp_ms``."""
        dt = StateTable(self.storage, topic).open()
        return [] if dt is None else state_table.history(dt, limit, monotonic=True)

    def compare_state(self, topic: str, *, version_as_of: int | None = None) -> state_equality.StateComparison:
        """The state table (latest, or ``version_as_of``) against the latest read_committed record of each key of
        the log up to the offsets it records (:mod:`deltalog.state.equality`)."""
        dt = StateTable(self.storage, topic).open(version_as_of)
        if dt is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no state table yet")
        return state_equality.compare(self.log_manager, topic, dt)

    def state_lag_of(self, topic: str) -> StateLag | None:
        """:meth:`state_lag`, or None where ``topic`` keeps no state table (``state.table.enable``): what the
        cleaner's metrics record each cycle (``state_offsets_behind``, ...)."""
        if not self.state_table_enabled(topic):  # from the topic's config: no request for a topic without one
            return None
        return self.state_lag(topic)

    def state_lag(self, topic: str) -> StateLag:
        """How far the state table of ``topic`` is behind its log (offsets, and time since its last refresh by the
        wall clock, which Delta's commit timestamps use)."""
        import time

        return compute_state_lag(self.log_manager, topic, int(time.time() * 1000))

    # -- SQL and data-quality checks ----------------------------------------------------------------------
    # deltalog.sql imports pyspark and deltalog.quality great-expectations, both slow to import: imported on first
    # use, so producers and the cleaner's Spark workers never pay for them.

    def sql(self, query: str, *, engine: str | None = None, version_as_of: time_travel.Versions | None = None,
            timestamp_as_of: time_travel.Timestamp | None = None) -> Any:
        """SQL over the store: ``<topic>`` is the full log, ``<topic>_current`` the current state
        (``.``/``-`` in topic names become ``_``; see :mod:`deltalog.sql.views`).

        ``engine`` (:func:`sql_engine`): ``"spark"`` runs Spark SQL on the store's session and returns a Spark
        DataFrame; ``"embedded"`` runs DuckDB in this process (:mod:`deltalog.sql.embedded`, the ``sql``
        extra), without starting Spark, and returns DuckDB's relation (``.fetchall()``, ``.arrow()``, ``.df()``,
        ``.show()``) wrapped so that Spark DataFrame code keeps working (``.collect()``, ``.toPandas()``,
        ``.count()``: :class:`~deltalog.sql.embedded.SQLResult`). By default a store given a Spark session (``spark=``) uses Spark, any other the
        embedded engine. Both have the same views, columns and rows. ``timestamp_as_of`` / ``version_as_of``:
        every view the query names as of then (see :meth:`current_state`)."""
        at = time_travel.as_of(version_as_of, timestamp_as_of)
        if sql_engine(engine, spark_given=self._spark_given) == "spark":
            from deltalog.sql import views

            return views.sql(self.log_manager, self.spark, query, as_of=at)
        if self._embedded is None:
            from deltalog.sql.embedded import EmbeddedSQL  # duckdb, on first use (start-up time)

            self._embedded = EmbeddedSQL(self.log_manager)
        return self._embedded.sql(query, as_of=at)

    def view_ddl(self, engine: str = "spark", *, topics: Iterable[str] | None = None, catalog: str | None = None,
                 schema: str | None = None) -> str:
        """The plain-SQL view definitions of ``topics`` (all by default) for ``engine`` (``spark``,
        ``databricks``, ``duckdb``, ``trino``): the log and the current state over the partition Delta tables,
        to run where deltalog is not installed (:mod:`deltalog.sql.ddl`). ``catalog``/``schema`` qualify the
        names (Unity Catalog's three-part names; Trino's connector catalog)."""
        from deltalog.sql import ddl

        statements = ddl.view_statements(self.log_manager, engine, topics=topics, catalog=catalog, schema=schema)
        return ddl.script(statements, str(engine).strip().lower())

    def current_state(self, topic: str, *, isolation_level: str = "read_committed",
                      version_as_of: time_travel.Versions | None = None,
                      timestamp_as_of: time_travel.Timestamp | None = None) -> DataFrame:
        """The latest non-tombstone record of every key, per partition, as a Spark DataFrame
        (``partition, offset, key, value, headers, timestamp_ms``; key/value decoded per the topic's encodings),
        among committed records unless ``isolation_level="read_uncommitted"``.

        As of a point (Delta's ``timestampAsOf`` / ``versionAsOf``, see :mod:`deltalog.log.time_travel`):
        ``timestamp_as_of`` reads each partition at its version of that time; ``version_as_of`` is a version of a
        one-partition topic's table, or ``{partition: version}`` (only those partitions). What key K held
        yesterday: ``store.current_state(t, timestamp_as_of=datetime.now(timezone.utc) - timedelta(days=1))``."""
        from deltalog.sql import views

        return views.current_state(self.log_manager, self.spark, topic, isolation_level=isolation_level,
                                   as_of=time_travel.as_of(version_as_of, timestamp_as_of))

    def log_frame(self, topic: str, *, isolation_level: str = "read_committed",
                  version_as_of: time_travel.Versions | None = None,
                  timestamp_as_of: time_travel.Timestamp | None = None) -> DataFrame:
        """Every record of every partition of ``topic`` as a Spark DataFrame, with a ``partition`` column
        (committed records unless ``isolation_level="read_uncommitted"``; never transaction markers); as of a
        version or a time as :meth:`current_state`."""
        from deltalog.sql import views

        return views.log_frame(self.log_manager, self.spark, topic, isolation_level=isolation_level,
                               as_of=time_travel.as_of(version_as_of, timestamp_as_of))

    def check(self, topic: str, *, partitions: Sequence[int] | None = None,
              cleans: str | Mapping[int, Sequence[int]] = "last", data_docs: bool = False,
              save: bool = True, context: Any = None,
              progress: Callable[[int, int, str], None] | None = None) -> CheckResult:
        """Run the compaction-guarantee suites (Great Expectations) on ``topic``; results are saved under
        ``<root>/_deltalog/checks/``. ``cleans``: "last", "all", "none", or partition -> clean versions;
        ``data_docs`` builds the HTML site. ``context``: a Great Expectations data context or the directory of
        a file context to keep the suites, checkpoints and results in (default: an ephemeral one; see
        :mod:`deltalog.quality.ge_context`). ``progress``: told ``(partitions done, partitions in all, what is
        validated now)`` as it goes. See :mod:`deltalog.quality`."""
        extras.require("quality", "Store.check")
        from deltalog.quality import check_topic

        return check_topic(self.log_manager, self.spark, topic, partitions=partitions, cleans=cleans, data_docs=data_docs,
                           save=save, context=context, progress=progress)

    def _check_after_clean(self, topic: str, results: Sequence[CleanResult], *, context: Any = None
                           ) -> dict[int, CheckFailedError]:
        extras.require("quality", "deltalog.check.after.clean")
        from deltalog.quality import check_after_clean  # see above: great-expectations takes seconds to import

        return check_after_clean(self.log_manager, self.spark, topic, results, context=context)

    # -- retention, DeleteRecords, VACUUM, leases ----------------------------------------------------------

    @property
    def leases(self) -> LeaseManager:
        """This store object's partition leases: cleaning, retention and VACUUM never overlap on a partition."""
        return self.log_manager.leases

    def delete_old_segments(self, topic: str | None = None, *,
                            progress: Callable[[int, int, str], None] | None = None) -> list[RetentionResult]:
        """Retention (``delete`` and ``compact,delete`` topics; a log start breach on any topic) over every
        partition of ``topic`` or of the store; partitions another run holds are skipped. ``progress``: told
        ``(partitions done, partitions in all, the partition now)`` as it goes."""
        return apply_retention(self.log_manager, topic, progress=progress)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> DeleteRecordsResult:
        """Kafka's DeleteRecords: raise the log start offset to ``before_offset`` (-1: the log end) and
        remove the files entirely below it. Raises ``OffsetOutOfRangeError`` past the log end."""
        return delete_records(self.log(topic, partition), before_offset, self.clock.now_ms())

    def vacuum(self, topic: str | None = None, *, dry_run: bool = True,
               progress: Callable[[int, int, str], None] | None = None) -> list[VacuumResult]:
        """Remove files no longer referenced once ``file.delete.delay.ms`` has passed (dry run by default).
        ``progress``: told ``(partitions done, partitions in all, the partition now)`` as it goes."""
        return vacuum_store(self.log_manager, topic, dry_run=dry_run, progress=progress)

    def vacuum_staged(self, *, dry_run: bool = True) -> VacuumResult:
        """Remove (default: only list) the files ``format("deltalog")`` writes staged and never committed, once
        a day old (:func:`deltalog.log.vacuum.vacuum_staged`); the cleaner's cycle runs it with VACUUM."""
        return vacuum_staged(self.storage, self.clock.now_ms(), dry_run=dry_run)

    def vacuum_temp_files(self, *, dry_run: bool = True) -> VacuumResult:
        """Remove (default: only list) the temporary files (``*.deltalog-tmp``) that killed local writes left,
        once a day old (:func:`deltalog.log.vacuum.vacuum_temp_files`); the cleaner's cycle runs it with VACUUM."""
        return vacuum_temp_files(self.storage, self.clock.now_ms(), dry_run=dry_run)

    # -- cleaning -------------------------------------------------------------------------------------

    def log_cleaner(self, **options: Any) -> LogCleaner:
        """The store's :class:`~deltalog.cleaner.log_cleaner.LogCleaner`: the one cleaning loop, which the job
        runs too. ``options`` are its keyword options (``threads``, ``vacuum``, ``metrics``, ...), and
        ``ge_context``: the Great Expectations context (or file context directory) the check after clean
        (``deltalog.check.after.clean``) runs in, as ``store.check(context=...)``."""
        ge_context = options.pop("ge_context", None)
        check = (functools.partial(self._check_after_clean, context=ge_context) if self.config.check_after_clean
                 else None)
        options.setdefault("offsets", self.offsets_topic)
        options.setdefault("state_lag", self.state_lag_of)
        from deltalog.cleaner.log_cleaner import LogCleaner  # only where the store cleans (start-up time)

        return LogCleaner(self.log_manager, self._spark_session, self.config, check_after_clean=check, **options)

    def clean(self, topic: str | None = None, *, progress: ProgressListener | None = None,
              progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S) -> list[CleanResult]:
        """Run cleaning passes, filthiest partition first, until no partition (of ``topic``, or of the store)
        is eligible; returns the figures of every pass in order.

        A partition whose section holds more distinct keys than the offset map is cleaned in several
        passes; each one moves its checkpoint forward. A partition whose pass fails is marked uncleanable
        and the others are still cleaned; then one :class:`~deltalog.errors.CleaningFailedError` names the
        failed ones (its ``results`` holds the passes that committed). ``progress`` is told how each pass is going
        when it starts, every ``progress_interval_s`` and when it ends (:mod:`deltalog.cleaner.progress`).

        The embedded Spark session starts in the background (:meth:`start_spark`) as soon as the loop's first ranking
        finds a partition eligible, beside the leasing and planning before its pass; an idle store starts no JVM.
        """
        if topic is not None:
            self.partitions(topic)  # raises for an unknown topic
        from deltalog.cleaner.log_cleaner import raise_failures  # as log_cleaner (above)

        cleaner = self.log_cleaner(progress=progress, progress_interval_s=progress_interval_s)

        def start_spark_if_a_pass_runs(ranked: list) -> None:
            if ranked:
                self.start_spark()

        cleaner.manager.on_ranked = start_spark_if_a_pass_runs
        return raise_failures(cleaner.clean_filthiest_logs(None if topic is None else [topic]))

    def clean_partition(self, topic: str, partition: int, *, force: bool = False,
                        progress: ProgressListener | None = None,
                        progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S) -> CleanResult | None:
        """One pass over one partition if it is eligible (or, with ``force``, if it has any cleanable
        section at all); None when there is nothing to do. ``progress``: as for :meth:`clean`."""
        cleaner = self.log_cleaner(progress=progress, progress_interval_s=progress_interval_s)
        return cleaner.clean_partition(topic, partition, force=force)
