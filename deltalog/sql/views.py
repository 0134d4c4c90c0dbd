"""SQL over a store: the full log and the current state of every topic, as Spark views.

For a topic ``T`` two temporary views are registered on the store's Spark session:

=====================  ==================================================================================
view                   rows
=====================  ==================================================================================
``<name>``             the full log: every record still in the log, all partitions (``partition`` column)
``<name>_current``     the current state: per partition, the latest record of every key, tombstoned keys
                       left out (keys are partition-local, as in Kafka)
=====================  ==================================================================================

``<name>`` is the topic name with every ``.`` and ``-`` replaced by ``_`` (``fruit-prices`` ->
``fruit_prices`` and ``fruit_prices_current``), so views can be named without backticks; quote a name
that starts with a digit: ``SELECT * FROM `0day_current```. Two topics that map to the same name (``a.b``
and ``a_b``; Kafka warns about the same collision) make that name ambiguous, and a query that uses it is
refused. Views are registered afresh for each query, on the latest snapshot of each partition, and only
for the topics whose view names appear in the query; they replace any temporary view of the same name.

Columns: ``partition, offset, key, value, headers, timestamp_ms`` (and ``segment, delete_horizon_ms`` in
the full log). ``key``/``value`` are ``BINARY`` unless the topic declares an encoding
(:mod:`deltalog.schemas`): ``STRING`` for ``string``, a ``STRUCT`` for ``json`` (``value.price``).

The current state is correct before, during and after compaction without trusting the cleaner to have
run: it is read from one snapshot per partition, and the dirty tail (offsets at or past the cleaner
checkpoint) is deduplicated at read time. It does not redo what the cleaner guarantees: below the
checkpoint (the clean section) every key appears at most once, so clean rows are only anti-joined with
the keys that also appear in the tail, and only the tail is aggregated (latest offset per key). File stats
prune the reads: files wholly below the log start or wholly tombstones in the clean section are not read,
each section reads only the files whose offset range overlaps it, and the tail's keys are broadcast when
the tail's files are small.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame, SparkSession

from deltalog.errors import CorruptLogError, InvalidTopicError
from deltalog.log import damage, time_travel
from deltalog.log.log_manager import LogManager
from deltalog.log.partition_log import LogSnapshot, PartitionLog
from deltalog.log.record import DELETE_HORIZON, HEADERS, KEY, OFFSET, SEGMENT, TIMESTAMP, VALUE
from deltalog.log.transactions import READ_COMMITTED
from deltalog.spark import functions
from deltalog.sql.encoding import decoded_columns
from deltalog.sql.names import _WORD, CURRENT_SUFFIX, view_name, view_names
from deltalog.sql.reads import read_slices, storage_of
from deltalog.sql.source import file_slices
from deltalog.storage import Storage

PARTITION = "partition"
LOG_COLUMNS = (PARTITION, OFFSET, KEY, VALUE, HEADERS, TIMESTAMP, SEGMENT, DELETE_HORIZON)
STATE_COLUMNS = (PARTITION, OFFSET, KEY, VALUE, HEADERS, TIMESTAMP)
#: A dirty tail whose files are smaller than this has its key set broadcast to the clean-section join.
BROADCAST_TAIL_BYTES = 64 * 1024 * 1024


# -- DataFrames ----------------------------------------------------------------------------------------


def _snapshots(logs: LogManager, topic: str, as_of: time_travel.AsOf | None = None
               ) -> list[tuple[PartitionLog, LogSnapshot]]:
    """The latest snapshot of every partition (or, ``as_of``, the one of that version or time: Delta's
    ``versionAsOf`` / ``timestampAsOf``, see :mod:`deltalog.log.time_travel`); a damaged partition (its log, or a
    data file missing or resized: one listing each) raises :class:`~deltalog.errors.CorruptLogError` here, and a
    version VACUUM emptied :class:`~deltalog.errors.VersionNotAvailableError`, before Spark runs anything."""
    out = []
    wanted = time_travel.partitions_read(logs.partitions(topic), topic, as_of)
    for log in (logs.log(topic, p) for p in wanted):
        if as_of is None:
            snap = log.snapshot()
            damage.raise_data_damage(log.storage, log.uri, snap.files)
            if (twice := log.duplicated_offsets(snap)) is not None:  # never served twice, by SQL either
                raise CorruptLogError(twice.message())
        else:
            snap = time_travel.snapshot_as_of(log, as_of)  # checks its files are there
        out.append((log, snap))
    return out


def log_frame(logs: LogManager, spark: SparkSession, topic: str, *, decode: bool = True,
              isolation_level: str = READ_COMMITTED, as_of: time_travel.AsOf | None = None) -> DataFrame:
    """Every record of every partition of ``topic`` (latest snapshots, or ``as_of``), with a ``partition``
    column; under ``read_committed`` (the default) up to each partition's last stable offset and without aborted
    records."""
    config = logs.topic_config(topic)
    slices = [s for log, snap in _snapshots(logs, topic, as_of)
              for s in file_slices(log.uri, snap.partition, snap.files, from_offset=snap.log_start_offset,
                                   view=log.txn_index(snap).view(isolation_level))]
    df = read_slices(spark, storage_of(logs), slices, LOG_COLUMNS)
    return df.select(*decoded_columns(spark, config, LOG_COLUMNS)) if decode else df


def partition_current_state(spark: SparkSession, log: PartitionLog, snap: LogSnapshot, *,
                            isolation_level: str = READ_COMMITTED) -> DataFrame:
    """The latest non-tombstone record per key of one partition snapshot, raw (undecoded) columns."""
    return _current_state(spark, storage_of(log), [(log, snap)], isolation_level)


def _current_state(spark: SparkSession, storage: Storage, parts: list[tuple[PartitionLog, LogSnapshot]],
                   isolation_level: str = READ_COMMITTED) -> DataFrame:
    """The current state of partition snapshots, raw columns: one read of every clean section and one of every
    dirty tail, whatever the number of partitions (keys are partition-local, so the tail is keyed by both).
    The clean section holds no aborted or uncommitted record (the cleaner drops the first and stops below the
    last stable offset); the tail is read at ``isolation_level``."""
    clean_slices, tail_slices = [], []
    tail_bytes = 0
    for log, snap in parts:
        view = log.txn_index(snap).view(isolation_level)
        start = snap.log_start_offset
        first_dirty = max(snap.first_dirty_offset, start)
        live = snap.files_from(start)
        # Clean section: unique keys already. A file of tombstones only cannot contribute (stats: null count).
        clean_files = [f for f in live if f.min_offset < first_dirty and f.tombstones < f.num_records]
        tail_files = [f for f in live if f.max_offset >= first_dirty]
        clean_slices += file_slices(log.uri, snap.partition, clean_files, from_offset=start, to_offset=first_dirty,
                                    view=view)
        tail_slices += file_slices(log.uri, snap.partition, tail_files, from_offset=first_dirty, view=view)
        tail_bytes += sum(f.size_bytes for f in tail_files)
    sf = functions(spark)
    cols = list(STATE_COLUMNS)
    key, value = sf.col(KEY), sf.col(VALUE)
    clean = read_slices(spark, storage, clean_slices, cols).where(key.isNotNull() & value.isNotNull())
    if not tail_slices:
        return clean
    tail = read_slices(spark, storage, tail_slices, cols).where(key.isNotNull())
    latest = (
        tail.groupBy(PARTITION, KEY)
        .agg(sf.max_by(sf.struct(*[sf.col(c) for c in cols]), sf.col(OFFSET)).alias("r"))
        .select("r.*")
    )
    if not clean_slices:
        return latest.where(value.isNotNull())
    tail_keys = latest.select(PARTITION, KEY)
    if tail_bytes <= BROADCAST_TAIL_BYTES:
        tail_keys = tail_keys.hint("broadcast")
    clean = clean.join(tail_keys, [PARTITION, KEY], "left_anti").select(*cols)
    return clean.unionByName(latest.where(value.isNotNull()))


def current_state(logs: LogManager, spark: SparkSession, topic: str, *, decode: bool = True,
                  isolation_level: str = READ_COMMITTED, as_of: time_travel.AsOf | None = None) -> DataFrame:
    """The current state of ``topic``: per partition, the latest record of each key unless it is a tombstone,
    among the records ``isolation_level`` sees (committed ones by default).

    Columns ``partition, offset, key, value, headers, timestamp_ms``; see the module docstring for how it
    stays correct and cheap at every stage of compaction. ``as_of``: the state as of that version or time.
    """
    config = logs.topic_config(topic)
    df = _current_state(spark, storage_of(logs), _snapshots(logs, topic, as_of), isolation_level)
    return df.select(*decoded_columns(spark, config, STATE_COLUMNS)) if decode else df


# -- SQL ---------------------------------------------------------------------------------------------------


def register_views(logs: LogManager, spark: SparkSession, topics: Iterable[str] | None = None, *,
                   as_of: time_travel.AsOf | None = None) -> dict[str, str]:
    """Register the views of ``topics`` (all by default), as of ``as_of`` if given; returns view name -> topic."""
    wanted = list(topics) if topics is not None else logs.list_topics()
    names = view_names(logs.list_topics())
    registered: dict[str, str] = {}
    for topic in wanted:
        for name, kind in ((view_name(topic), "log"), (view_name(topic) + CURRENT_SUFFIX, "current")):
            claims = names.get(name.lower(), [])
            if len(claims) > 1:
                continue  # ambiguous: sql() refuses queries that use it
            df = (log_frame(logs, spark, topic, as_of=as_of) if kind == "log"
                  else current_state(logs, spark, topic, as_of=as_of))
            df.createOrReplaceTempView(name)
            registered[name] = topic
    return registered


def sql(logs: LogManager, spark: SparkSession, query: str, *, as_of: time_travel.AsOf | None = None) -> DataFrame:
    """Run Spark SQL with the views of every topic the query names registered first (as of ``as_of``)."""
    words = {w.lower() for w in _WORD.findall(query)}
    names = view_names(logs.list_topics())
    used = sorted({topic for name, claims in names.items() if name in words for topic, _ in claims})
    for name, claims in names.items():
        if name in words and len(claims) > 1:
            raise InvalidTopicError(
                f"view name {name!r} is ambiguous: it stands for "
                + ", ".join(f"the {'current state' if k == 'current' else 'log'} of topic {t!r}" for t, k in claims)
                + "; use store.log_frame(topic) / store.current_state(topic) and register a view of your own"
            )
    register_views(logs, spark, used, as_of=as_of)
    return spark.sql(query)
