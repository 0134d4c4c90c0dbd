"""The state table of one topic: a plain Delta table at ``<store>/state/<topic>``, and what its commits record.

Every commit that changes it carries, as Delta app-transaction ids (``txn`` actions, Delta's own way for a
writer to record how far it got, as Kafka's consumers commit their positions), the offset up to which each
partition has been applied (``deltalog.state.p<N>``: the last stable offset read, exclusive) and the log start
offset it was applied from (``deltalog.state.start.p<N>``), in the same commit as the rows: a refresh killed at any
point left either the whole commit or none of it. The commit's metadata repeats the offsets and names the
partitions' Delta versions read, so each state version maps to log offsets (``deltalog state history``).

The table is plain Parquet with Delta's change data feed (``delta.enableChangeDataFeed``, reader 1 / writer 4,
no deletion vectors, no column mapping): every Delta reader reads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import ColumnProperties, CommitProperties, DeltaTable, WriterProperties
from deltalake.exceptions import TableNotFoundError

from deltalog.errors import VersionNotAvailableError
from deltalog.log import commit_infos, time_travel
from deltalog.log.record import KEY, OFFSET
from deltalog.state.rows import KEY_BYTES, state_schema

if TYPE_CHECKING:
    from deltalog.config import TopicConfig
    from deltalog.storage import Storage

#: The directory of the state tables, beside ``topics/``: ``<store>/state/<topic>``.
STATE_TABLES_DIR = "state"
APPLIED_PREFIX = "deltalog.state.p"
START_PREFIX = "deltalog.state.start.p"
PROP_TOPIC = "deltalog.state.topic"
PROP_TOPIC_ID = "deltalog.state.topic_id"
#: The encodings and schemas the table's columns were made for; a change of either rebuilds the table.
PROP_SHAPE = "deltalog.state.shape"
META_OFFSETS = "deltalog.state.offsets"
META_LOG_VERSIONS = "deltalog.state.log_versions"
META_OPERATION = "deltalog.operation"
CDF = "delta.enableChangeDataFeed"
#: Table properties of every state table: the change data feed on, and nothing any Delta reader may lack.
TABLE_PROPERTIES = {CDF: "true", "delta.appendOnly": "false"}


def writer_properties(config: TopicConfig) -> WriterProperties:
    """How every write of the table's files (merge, first append, rebuild) encodes them: Snappy, delta-rs's default
    (given any ``WriterProperties`` it would write uncompressed), and no dictionary for the columns unique within a
    partition (``offset``, and the key as the log holds it): a dictionary of values that never repeat is built and
    thrown away by every merge's rewrite of the table. The other columns keep the Parquet writer's defaults."""
    unique = [OFFSET, KEY_BYTES if config.key_encoding == "json" else KEY]
    return WriterProperties(compression="SNAPPY",
                            column_properties={c: ColumnProperties(dictionary_enabled=False) for c in unique})


def shape_of(config: TopicConfig) -> str:
    """What the table's columns depend on, as one string."""
    return json.dumps([config.key_encoding, config.key_schema, config.value_encoding, config.value_schema])


def applied_app_id(partition: int) -> str:
    return f"{APPLIED_PREFIX}{partition}"


def start_app_id(partition: int) -> str:
    return f"{START_PREFIX}{partition}"


@dataclass(frozen=True)
class StateVersion:
    """One version of a state table: when, what it did, and the log offsets it holds the state up to."""

    version: int
    timestamp_ms: int
    operation: str
    #: partition -> the offset applied up to (exclusive): the state of the log below these offsets.
    offsets: Mapping[int, int] = field(default_factory=dict)
    #: partition -> the Delta version of that partition's table the refresh read.
    log_versions: Mapping[int, int] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)
    #: the commit's ``timestamp`` as its writer's clock stamped it (``timestamp_ms`` is made monotonic, as the
    #: log's history; None: not asked for).
    writer_timestamp_ms: int | None = None

    @property
    def skewed(self) -> bool:
        """Whether the refresher's clock put this commit at or before the commit before it (its time was adjusted)."""
        return self.writer_timestamp_ms is not None and self.writer_timestamp_ms != self.timestamp_ms

    def as_dict(self) -> dict[str, Any]:
        writer = {} if self.writer_timestamp_ms is None else {"writer_timestamp_ms": self.writer_timestamp_ms}
        return {"version": self.version, "timestamp_ms": self.timestamp_ms, **writer, "operation": self.operation,
                "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
                "log_versions": {str(p): v for p, v in sorted(self.log_versions.items())}, **self.metrics}


class StateTable:
    """The state table of ``topic`` in a store (it may not exist yet)."""

    def __init__(self, storage: Storage, topic: str) -> None:
        self.storage = storage
        self.topic = topic
        self.uri = storage.location(STATE_TABLES_DIR, topic)

    def __repr__(self) -> str:
        return f"StateTable({self.uri!r})"

    def open(self, version: int | None = None) -> DeltaTable | None:
        """The Delta table (at ``version``), or None where there is none yet."""
        try:
            dt = DeltaTable(self.uri, storage_options=self.storage.delta_options)
        except TableNotFoundError:
            return None
        if version is not None:
            try:
                dt.load_as_version(version)
            except Exception as e:  # delta-rs raises its own errors for a missing version
                raise VersionNotAvailableError(f"version {version} of the state table of {self.topic!r} is not "
                                               f"available: {e}") from None
        return dt

    def exists(self) -> bool:
        return self.open() is not None

    def create(self, config: TopicConfig, topic_id: str | None) -> DeltaTable:
        """An empty state table for ``config`` (a concurrent creator's table is used when it won)."""
        props = {**TABLE_PROPERTIES, PROP_TOPIC: self.topic, PROP_TOPIC_ID: topic_id or "", PROP_SHAPE: shape_of(config)}
        try:
            return DeltaTable.create(self.uri, state_schema(config), mode="error", configuration=props,
                                     raise_if_key_not_exists=False,
                                     description=f"deltalog state table of topic {self.topic}",
                                     storage_options=self.storage.delta_options,
                                     commit_properties=CommitProperties(
                                         custom_metadata={META_OPERATION: "state_create"}, max_commit_retries=0))
        except Exception:
            dt = self.open()
            if dt is None:
                raise
            return dt

    def delete(self) -> None:
        """Remove the table and its files (with its topic)."""
        self.storage.delete_many([f.location for f in self.storage.list_files(self.uri)])
        self.storage.prune_empty_dirs(self.uri, include_self=True)


def matches(dt: DeltaTable, config: TopicConfig, topic_id: str | None) -> bool:
    """Whether ``dt`` is the state table of this topic (not of a deleted one of the same name) with the columns
    ``config`` makes."""
    props = dt.metadata().configuration
    return props.get(PROP_SHAPE) == shape_of(config) and props.get(PROP_TOPIC_ID, "") == (topic_id or "")


def applied_offsets(dt: DeltaTable, partitions: list[int]) -> dict[int, int]:
    """Partition -> the offset the table holds the state up to (0 for a partition never applied)."""
    return {p: dt.transaction_version(applied_app_id(p)) or 0 for p in partitions}


def applied_starts(dt: DeltaTable, partitions: list[int]) -> dict[int, int]:
    """Partition -> the log start offset the last refresh read from."""
    return {p: dt.transaction_version(start_app_id(p)) or 0 for p in partitions}


def read(dt: DeltaTable, columns: list[str] | None = None) -> pa.Table:
    """The rows of ``dt`` (its loaded version), in the table's schema."""
    return pa.table(dt.to_pyarrow_table(columns=columns))


def version_as_of(dt: DeltaTable, topic: str, version_as_of: int | None, timestamp_as_of: Any) -> int | None:
    """The version to read for Delta's ``versionAsOf`` / ``timestampAsOf`` (the log's option names), or None for
    the latest."""
    at = time_travel.as_of(version_as_of, timestamp_as_of)
    if at is None:
        return None
    if at.timestamp_ms is not None:
        return time_travel.version_at(dt, at.timestamp_ms, f"the state table of {topic!r}")
    if at.single_version is None:
        raise VersionNotAvailableError("the state table has one version history for the whole topic: give "
                                       "version_as_of as one number, not a mapping of partitions")
    return at.single_version


def history(dt: DeltaTable, limit: int | None = None, *, monotonic: bool = False) -> list[StateVersion]:
    """The table's versions, newest first, each with the offsets it applied up to. ``monotonic``: on the commit
    times :func:`version_as_of` resolves a ``timestamp_as_of`` on (:func:`deltalog.log.time_travel.commit_times`,
    which reads every commit, as the log's history does), with each refresher's own time beside them; without it,
    on the commit info's times (refreshers' clocks, possibly out of order)."""
    times = {t.version: t for t in time_travel.commit_times(dt)} if monotonic else {}
    out = []
    for h in commit_infos.history(dt, limit):
        offsets = _int_map(h.get(META_OFFSETS))
        log_versions = _int_map(h.get(META_LOG_VERSIONS))
        metrics = {k.removeprefix("deltalog.state."): v for k, v in h.items()
                   if k.startswith("deltalog.state.") and k not in (META_OFFSETS, META_LOG_VERSIONS)}
        operation = h.get(META_OPERATION) or str(h.get("operation", "")).lower()
        at = times.get(int(h["version"]))
        out.append(StateVersion(int(h["version"]), int(h.get("timestamp", 0)) if at is None else at.timestamp_ms,
                                operation, offsets, log_versions, metrics, None if at is None else at.writer_ms))
    return out


def _int_map(raw: Any) -> dict[int, int]:
    if not raw:
        return {}
    data = json.loads(raw) if isinstance(raw, str) else raw
    return {int(k): int(v) for k, v in data.items()}
