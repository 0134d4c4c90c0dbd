"""The store: a root location holding topics, each partition one Delta table (Kafka's LogManager).

Layout::

    <root>/topics/<topic>/<partition>/      one Delta table per partition
    <root>/_deltalog/                       store-level state (metrics, quarantine, check results)

Producers and readers go through delta-rs and pyarrow directly, so appending and reading never start
Spark; cleaning, SQL and checks run Spark jobs on the session given as ``spark=`` or, when none is
given, on an embedded local session created the first time one is needed.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from deltalog.clock import Clock, WallClock
from deltalog.config import StoreConfig, TopicConfig
from deltalog.describe import PartitionState, TopicDescription
from deltalog.errors import (
    InvalidConfigError,
    InvalidTopicError,
    PartitionBusyError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from deltalog.log import arrow_records
from deltalog.log.partition_log import PartitionLog, config_to_table_properties
from deltalog.log.record import Record

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from deltalog.cleaner.cleaner import CleanResult
    from deltalog.log.lease import LeaseManager
    from deltalog.log.retention import DeleteRecordsResult, RetentionResult
    from deltalog.log.vacuum import VacuumResult
    from deltalog.quality import CheckResult

TOPICS_DIR = "topics"
STATE_DIR = "_deltalog"
#: Where topics are built before being renamed into topics/, and moved to before being removed.
STAGING_DIR = os.path.join(STATE_DIR, "staging")
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_PARTITIONS = 10_000


def validate_topic_name(name: object) -> str:
    """Kafka's topic name rules (``Topic.validate``), which also keep every path inside the store."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError(f"Topic name {name!r} is illegal: it must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"Topic name {name!r} is illegal: it cannot be '.' or '..'")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal: it is {len(name)} characters long, the maximum is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_TOPIC.fullmatch(name):  # fullmatch: ``$`` alone would let a trailing newline through
        raise InvalidTopicError(
            f"Topic name {name!r} is illegal: it contains a character other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    return name


class Store:
    """A deltalog store rooted at a local directory (or any path delta-rs and Spark can both reach)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        spark: SparkSession | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.clock: Clock = clock or WallClock()
        self.config = StoreConfig.from_properties(config or {})
        self._spark = spark
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        os.makedirs(os.path.join(self.root, TOPICS_DIR), exist_ok=True)

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    # -- Spark ----------------------------------------------------------------------------------------

    @property
    def spark(self) -> SparkSession:
        """The session Spark jobs run on: the one given, or the embedded local one (created on first use)."""
        if self._spark is None:
            from deltalog.sql.session import local_session

            self._spark = local_session()
        return self._spark

    # -- topics ---------------------------------------------------------------------------------------

    def _topic_dir(self, topic: str) -> str:
        return os.path.join(self.root, TOPICS_DIR, validate_topic_name(topic))

    def create_topic(self, topic: str, partitions: int = 1, config: Mapping[str, Any] | None = None) -> TopicConfig:
        """Create a topic of ``partitions`` empty partition tables with the given Kafka topic configs.

        The tables are built in a hidden staging directory and renamed into place in one step, so a
        failure leaves no half-created topic and two concurrent creators cannot both succeed.
        """
        validate_topic_name(topic)
        if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidConfigError(
                f"Invalid number of partitions {partitions!r} for topic {topic!r}: must be an integer in [1, {MAX_PARTITIONS}]"
            )
        topic_config = TopicConfig.from_properties(config or {})
        final = self._topic_dir(topic)
        if os.path.exists(final):
            raise TopicExistsError(f"Topic {topic!r} already exists in {self.root}")
        # Staged outside topics/ (a legal topic name may start with '.') under a name without the topic
        # name (a 249-character topic plus a prefix would pass the 255-byte file name limit).
        staging = os.path.join(self.root, STAGING_DIR, f"creating-{uuid.uuid4().hex}")
        try:
            for p in range(partitions):
                PartitionLog.create(os.path.join(staging, str(p)), topic, p, topic_config)
            try:
                os.rename(staging, final)
            except OSError:
                if os.path.exists(final):
                    raise TopicExistsError(f"Topic {topic!r} already exists in {self.root}") from None
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return topic_config

    def list_topics(self) -> list[str]:
        base = os.path.join(self.root, TOPICS_DIR)
        return sorted(
            name for name in os.listdir(base)
            if os.path.isdir(os.path.join(base, name))
        )

    def topic_exists(self, topic: str) -> bool:
        return os.path.isdir(self._topic_dir(topic))

    def partitions(self, topic: str) -> list[int]:
        """The partition numbers of a topic, in order."""
        path = self._topic_dir(topic)
        if not os.path.isdir(path):
            raise UnknownTopicOrPartitionError(
                f"Topic {topic!r} does not exist in {self.root}; existing topics: {self.list_topics()}"
            )
        return sorted(int(n) for n in os.listdir(path) if n.isdigit())

    def delete_topic(self, topic: str) -> None:
        """Remove a topic and all its data (Kafka's DeleteTopics). Irreversible."""
        path = self._topic_dir(topic)
        self.partitions(topic)  # raises if unknown
        doomed = os.path.join(self.root, STAGING_DIR, f"deleting-{uuid.uuid4().hex}")
        os.makedirs(os.path.dirname(doomed), exist_ok=True)
        os.rename(path, doomed)
        self._logs = {k: v for k, v in self._logs.items() if k[0] != topic}
        shutil.rmtree(doomed, ignore_errors=True)

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The :class:`PartitionLog` of one partition; raises if the topic or partition does not exist."""
        key = (topic, partition)
        # Type first: True == 1 and hashes alike, so a cache hit would take True for partition 1.
        cached = None if isinstance(partition, bool) else self._logs.get(key)
        if cached is not None:
            return cached
        parts = self.partitions(topic)
        if isinstance(partition, bool) or not isinstance(partition, int) or partition not in parts:
            raise UnknownTopicOrPartitionError(
                f"Partition {partition!r} of topic {topic!r} does not exist; partitions are 0..{len(parts) - 1}"
            )
        log = PartitionLog(os.path.join(self._topic_dir(topic), str(partition)), topic, partition)
        self._logs[key] = log
        return log

    def logs(self, topic: str | None = None) -> list[PartitionLog]:
        """Every partition log of one topic, or of the whole store."""
        topics = [topic] if topic is not None else self.list_topics()
        return [self.log(t, p) for t in topics for p in self.partitions(t)]

    def topic_config(self, topic: str) -> TopicConfig:
        return self.log(topic, self.partitions(topic)[0]).head().config

    def alter_topic_config(self, topic: str, config: Mapping[str, Any]) -> TopicConfig:
        """Set some topic configs (Kafka's incrementalAlterConfigs SET); the others keep their values.

        The whole change is validated before any partition is touched; each partition table records
        it in its own Delta commit.
        """
        new = self.topic_config(topic).with_overrides(config)
        props = config_to_table_properties(new)
        for log in self.logs(topic):
            log.table().alter.set_table_properties(props, raise_if_not_exists=False)
        return new

    # -- producing and consuming ------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: Sequence[Record] | pa.Table | pa.RecordBatch) -> list[int]:
        """Append records to a partition as one batch; returns their offsets, in order.

        ``records`` may also be a ``pyarrow.Table``/``RecordBatch`` with columns ``key``, ``value`` and
        optionally ``headers``, ``timestamp_ms`` (see :mod:`deltalog.log.arrow_records`)."""
        if isinstance(records, Record):
            records = [records]
        if not arrow_records.is_arrow(records):
            records = list(records)
        return self.log(topic, partition).append(records, self.clock.now_ms())

    def roll(self, topic: str, partition: int) -> int:
        """Close the active segment now; returns the base offset of the new active segment."""
        return self.log(topic, partition).roll(self.clock.now_ms())

    def read(
        self,
        topic: str,
        partition: int,
        from_offset: int | Literal["earliest", "latest"] = 0,
        max_records: int | None = None,
    ) -> list[Record]:
        """Records from ``from_offset`` on, in offset order (``"earliest"``: the log start offset).

        A position that compaction emptied reads on from the next record; an offset below the log start
        or past the log end raises :class:`~deltalog.errors.OffsetOutOfRangeError`.
        """
        log = self.log(topic, partition)
        if from_offset == "earliest":
            from_offset = log.head().log_start_offset
        elif from_offset == "latest":
            from_offset = log.head().log_end_offset
        elif isinstance(from_offset, bool) or not isinstance(from_offset, int):
            raise InvalidConfigError(f"from_offset must be an int, 'earliest' or 'latest', not {from_offset!r}")
        if max_records is not None and (isinstance(max_records, bool) or not isinstance(max_records, int)
                                        or max_records < 0):
            raise InvalidConfigError(f"max_records must be None or an int >= 0, not {max_records!r}")
        return log.read(from_offset, max_records)

    # -- state ----------------------------------------------------------------------------------------

    def describe(self, topic: str) -> TopicDescription:
        """Per partition: log start/end offsets, segments with sizes, clean/dirty bytes, dirty ratio."""
        now = self.clock.now_ms()
        states = tuple(PartitionState.of(log.snapshot(), now) for log in self.logs(topic))
        return TopicDescription(topic, self.topic_config(topic), states)

    # -- SQL and data-quality checks (logic in views.py and quality/) ------------------------------------

    def sql(self, query: str) -> DataFrame:
        """Spark SQL over the store: ``<topic>`` is the full log, ``<topic>_current`` the current state
        (``.``/``-`` in topic names become ``_``; see :mod:`deltalog.sql.views`)."""
        from deltalog.sql.views import sql

        return sql(self, query)

    def current_state(self, topic: str) -> DataFrame:
        """The latest non-tombstone record of every key, per partition, as a Spark DataFrame
        (``partition, offset, key, value, headers, timestamp_ms``; key/value decoded per the topic's encodings)."""
        from deltalog.sql.views import current_state

        return current_state(self, topic)

    def log_frame(self, topic: str) -> DataFrame:
        """Every record of every partition of ``topic`` as a Spark DataFrame, with a ``partition`` column."""
        from deltalog.sql.views import log_frame

        return log_frame(self, topic)

    def check(self, topic: str, **options: Any) -> CheckResult:
        """Run the compaction-guarantee suites (Great Expectations) on ``topic``; results are saved under
        ``<root>/_deltalog/checks/``. Options: ``partitions``, ``cleans`` ("last", "all", "none"),
        ``data_docs`` (build the HTML site), ``save``. See :mod:`deltalog.quality`."""
        from deltalog.quality import check_topic

        return check_topic(self, topic, **options)

    def _check_after_clean(self, results: list[CleanResult]) -> None:
        """``deltalog.check.after.clean``: check every clean just made; raise if a guarantee broke."""
        if not self.config.check_after_clean or not results:
            return
        from deltalog.quality import CheckFailedError, check_topic

        by_topic: dict[str, dict[int, list[int]]] = {}
        for r in results:
            by_topic.setdefault(r.topic, {}).setdefault(r.partition, []).append(r.version)
        for topic, cleans in by_topic.items():
            result = check_topic(self, topic, partitions=sorted(cleans), cleans=cleans)
            if not result.success:
                raise CheckFailedError(f"data-quality check failed after cleaning:\n{result.summary()}", result)

    # -- retention, DeleteRecords, VACUUM, leases (logic in retention.py, vacuum.py, lease.py) ----------

    @cached_property
    def leases(self) -> LeaseManager:
        """This store object's partition leases: cleaning, retention and VACUUM never overlap on a partition."""
        from deltalog.log.lease import LeaseManager

        return LeaseManager(self.root, self.clock)

    def delete_old_segments(self, topic: str | None = None) -> list[RetentionResult]:
        """Retention (``delete`` and ``compact,delete`` topics; a log start breach on any topic) over every
        partition of ``topic`` or of the store; partitions another run holds are skipped."""
        from deltalog.log.retention import apply_retention

        return apply_retention(self, topic)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> DeleteRecordsResult:
        """Kafka's DeleteRecords: raise the log start offset to ``before_offset`` (-1: the log end) and
        remove the files entirely below it. Raises ``OffsetOutOfRangeError`` past the log end."""
        from deltalog.log.retention import delete_records

        return delete_records(self.log(topic, partition), before_offset, self.clock.now_ms())

    def vacuum(self, topic: str | None = None, *, dry_run: bool = True) -> list[VacuumResult]:
        """Remove files no longer referenced once ``file.delete.delay.ms`` has passed (dry run by default)."""
        from deltalog.log.vacuum import vacuum_store

        return vacuum_store(self, topic, dry_run=dry_run)

    # -- cleaning -------------------------------------------------------------------------------------

    #: Upper bound on passes one ``clean()`` call runs, so a bug can never spin forever.
    MAX_PASSES_PER_CLEAN = 100_000

    def clean(self, topic: str | None = None) -> list[CleanResult]:
        """Run cleaning passes, filthiest partition first, until no partition (of ``topic``, or of the
        store) is eligible; returns the figures of every pass in order.

        A partition whose section holds more distinct keys than the offset map is cleaned in several
        passes; each one moves its checkpoint forward.
        """
        from deltalog.cleaner.cleaner_manager import CleanerManager
        from deltalog.cleaner.uncleanable import Quarantine

        manager = CleanerManager(self)
        topics = [topic] if topic is not None else None
        results: list[CleanResult] = []
        # skipped: partitions marked uncleanable, held by another run (lease), or with nothing left under the lease
        skip = Quarantine(self.root).partitions()
        for _ in range(self.MAX_PASSES_PER_CLEAN):
            ltc = manager.grab_filthiest(self.clock.now_ms(), topics, exclude=skip)
            if ltc is None:
                self._check_after_clean(results)
                return results
            try:
                result = self._clean_one(ltc)
            except PartitionBusyError:
                result = None
            if result is None:
                skip.add((ltc.snapshot.topic, ltc.snapshot.partition))
            else:
                results.append(result)
        raise RuntimeError(f"clean() ran {self.MAX_PASSES_PER_CLEAN} passes and partitions are still eligible")

    def clean_partition(self, topic: str, partition: int, *, force: bool = False) -> CleanResult | None:
        """One pass over one partition if it is eligible (or, with ``force``, if it has any cleanable
        section at all); None when there is nothing to do."""
        from deltalog.cleaner.log_to_clean import LogToClean

        log = self.log(topic, partition)
        ltc = LogToClean.of(log.snapshot(), self.clock.now_ms())
        if not ltc.snapshot.config.compact:
            raise InvalidConfigError(
                f"topic {topic!r} has cleanup.policy={','.join(ltc.snapshot.config.cleanup_policy)}; "
                "only 'compact' topics are cleaned"
            )
        if ltc.first_uncleanable_offset <= ltc.first_dirty_offset or not (ltc.eligible or force):
            return None
        result = self._clean_one(ltc)
        if result is not None:
            self._check_after_clean([result])
        return result

    def _clean_one(self, ltc: Any) -> CleanResult | None:
        """One pass under the partition's lease (``PartitionBusyError`` if another run holds it), planned
        again if the table moved, with retention right after for ``compact,delete`` (see
        :func:`deltalog.cleaner.log_cleaner.clean_one`); None when nothing is left to clean."""
        from deltalog.cleaner.log_cleaner import clean_one

        return clean_one(self, ltc)
