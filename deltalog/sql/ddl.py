"""A topic's log and current state as plain SQL views over its partition Delta tables, for any SQL engine.

The Spark views of :mod:`deltalog.sql.views` are session temp views over deltalog's Python data source: a
SQL warehouse, DuckDB or Trino cannot use them, and no catalog can hold them. The views here are plain SQL
text over the partition tables themselves (one Delta table per partition), so they run where deltalog is not
installed: Spark SQL and Databricks (``delta.`<location>```, or Unity Catalog external tables with three-part
names), DuckDB (``delta_scan('<location>')``, its delta extension) and Trino (its Delta Lake connector, each
partition table registered with ``system.register_table``).

Per topic ``T`` (named as :func:`deltalog.sql.names.view_name` says) there are two views, with the columns
and rows of the Spark views:

* ``T``: the log, every record a ``read_committed`` consumer sees (``partition, offset, key, value,
  headers, timestamp_ms, segment, delete_horizon_ms``);
* ``T_current``: per partition, the latest such record of each key, tombstoned keys left out
  (``partition, offset, key, value, headers, timestamp_ms``): the latest offset of each key, joined back.

``read_committed`` is written in SQL from the columns every row carries (:mod:`deltalog.log.record`): a
transaction marker (``control`` ``COMMIT``/``ABORT``) is never shown; a row of a transaction (``producer_id``
set) is shown when the first marker of its producer after it is a ``COMMIT``, hidden when it is an ``ABORT``
whose transaction starts at or before it (``txn_first_offset``), and counts as open when no marker follows; a
partition is read up to its last stable offset, the first offset of its earliest open transaction, as
Kafka's ``read_committed`` fetch (``LogOffsetMetadata`` of the LSO) stops there.

This holds on a cleaned log too, as in Kafka: the cleaner drops aborted records in their first clean, keeps an
``ABORT`` marker while any record of its transaction remains, and keeps a ``COMMIT`` marker while any record
of its transaction remains (``CleanedTransactionMetadata.onControlBatchRead``), so the first marker after a
transactional record is always its own transaction's.

What the rows do not say is the **log start offset** (``DeleteRecords`` and retention move it without rewriting
the files that also hold later records): the view text holds each partition's as a constant, read from its
snapshot when the text is made. It only moves up, so views made earlier also show the records deleted since;
make the views again after retention runs (``deltalog views`` or :func:`register_views`).

Keys and values are decoded per the topic's ``key.encoding``/``value.encoding`` as the Spark views decode them
(:mod:`deltalog.log.encoding`): ``string`` to text, ``json`` to a struct of the topic's schema
(Spark's ``from_json``, DuckDB's ``json_transform``, Trino's ``CAST(json_parse(...) AS ROW(...))``, each null
where the text does not match); the current state is deduplicated on the raw key bytes, as Kafka compacts.

deltalog's own embedded engine (:mod:`deltalog.sql.embedded`) runs these same DuckDB views over the snapshot's
files, so the text is tested by every ``deltalog sql`` run.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltalog.errors import InvalidArgumentError, InvalidTopicError
from deltalog.log.record import (
    CONTROL,
    DELETE_HORIZON,
    HEADERS,
    KEY,
    OFFSET,
    PRODUCER_ID,
    SEGMENT,
    TIMESTAMP,
    TXN_FIRST_OFFSET,
    VALUE,
)
from deltalog.sql.names import CURRENT_SUFFIX, METRICS_VIEW, STATE_SUFFIX, view_name, view_names
from deltalog.state.table import StateTable
from deltalog.storage import is_object_store

if TYPE_CHECKING:
    from deltalog.config import TopicConfig
    from deltalog.log.log_manager import LogManager

ENGINES = ("spark", "databricks", "duckdb", "trino")
PARTITION = "partition"
LOG_COLUMNS = (PARTITION, OFFSET, KEY, VALUE, HEADERS, TIMESTAMP, SEGMENT, DELETE_HORIZON)
STATE_COLUMNS = (PARTITION, OFFSET, KEY, VALUE, HEADERS, TIMESTAMP)
#: The columns each partition's rows are read with (the table's, less ``producer_epoch``).
_READ = (OFFSET, KEY, VALUE, HEADERS, TIMESTAMP, SEGMENT, DELETE_HORIZON, PRODUCER_ID, CONTROL, TXN_FIRST_OFFSET)
#: Trino's default catalog and schema names for the Delta Lake connector when none are given.
TRINO_DEFAULTS = ("delta", "default")


@dataclass(frozen=True)
class PartitionTable:
    """One partition table as the view text needs it: where it is, and its snapshot's two bounds."""

    partition: int
    location: str
    log_start_offset: int
    #: Whether the snapshot holds any transactional row (producer id or marker). The views for other engines
    #: always assume so (a transactional producer may append after they are made); deltalog's embedded engine,
    #: which makes its views for one snapshot, leaves the transaction joins out when none is there.
    transactional: bool = True


@dataclass(frozen=True)
class ViewStatement:
    """One statement of the DDL: a partition table registered (``kind`` ``"table"``) or a view made."""

    name: str
    topic: str
    kind: str  # "table", "log" or "current"
    sql: str


# -- dialects ----------------------------------------------------------------------------------------------


class Dialect(ABC):
    """What differs between engines: identifier quoting, the table reference, decoding, the view statement."""

    engine = ""
    databricks = False
    quote_char = '"'
    #: What goes before a CTE's body so that the engine inlines it (DuckDB otherwise materializes a CTE used twice,
    #: every column of every row, where each use reads only the columns it needs).
    inline = ""

    def __init__(self, catalog: str | None, schema: str | None, temporary: bool) -> None:
        self.catalog, self.schema, self.temporary = catalog, schema, temporary

    def q(self, name: str) -> str:
        c = self.quote_char
        return c + name.replace(c, c + c) + c

    def qualified(self, name: str) -> str:
        parts = [p for p in (self.catalog, self.schema) if p] + [name]
        return ".".join(self.q(p) for p in parts)

    def table_name(self, topic: str, partition: int) -> str:
        """The name a registered partition table gets: ``<view name>__p<N>``."""
        return f"{view_name(topic)}__p{partition}"

    def register_table(self, topic: str, table: PartitionTable) -> str | None:
        """A statement registering the partition table in the catalog, if this engine needs one."""
        return None

    @abstractmethod
    def table_ref(self, topic: str, table: PartitionTable) -> str:
        """Each engine's own."""

    def create_view(self, name: str) -> str:
        return f"CREATE OR REPLACE {'TEMPORARY ' if self.temporary else ''}VIEW {self.qualified(name)} AS"

    @abstractmethod
    def string(self, col: str) -> str:
        """Each engine's own."""

    @abstractmethod
    def json(self, col: str, schema_text: str) -> str:
        """Each engine's own."""

    def literal(self, text: str) -> str:
        return "'" + text.replace("'", "''") + "'"


class SparkDialect(Dialect):
    """Spark SQL with delta-spark, and Databricks (Unity Catalog: ``--catalog``/``--schema`` register each
    partition as an external table, ``CREATE TABLE ... USING DELTA LOCATION``, as UC wants tables by name)."""

    engine = "spark"
    quote_char = "`"
    #: Made for Databricks (``--engine databricks``): a state table is always registered by name there.
    databricks = False

    def qualified(self, name: str) -> str:
        return self.q(name) if self.temporary else super().qualified(name)

    def register_table(self, topic: str, table: PartitionTable) -> str | None:
        if not self.schema:
            return None
        return (f"CREATE TABLE IF NOT EXISTS {self.qualified(self.table_name(topic, table.partition))} "
                f"USING DELTA LOCATION {self.literal(table.location)}")

    def table_ref(self, topic: str, table: PartitionTable) -> str:
        if self.schema:
            return self.qualified(self.table_name(topic, table.partition))
        return f"delta.{self.q(table.location)}"

    def string(self, col: str) -> str:
        return f"CAST({col} AS STRING)"

    def json(self, col: str, schema_text: str) -> str:
        from deltalog.schemas import parse_schema  # pyspark's types: only topics with a json encoding

        return f"from_json(CAST({col} AS STRING), {self.literal(parse_schema(schema_text).simpleString())})"

    def literal(self, text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class DuckDBDialect(Dialect):
    """DuckDB: ``delta_scan`` of its delta extension (``INSTALL delta; LOAD delta``)."""

    engine = "duckdb"
    inline = "NOT MATERIALIZED "

    def table_ref(self, topic: str, table: PartitionTable) -> str:
        return f"delta_scan({self.literal(table.location)})"

    def string(self, col: str) -> str:
        return f"decode({col})"

    def json(self, col: str, schema_text: str) -> str:
        from deltalog.schemas import parse_schema  # pyspark's types: only topics with a json encoding

        structure = json.dumps(_duckdb_structure(parse_schema(schema_text)), separators=(",", ":"))
        return f"json_transform(decode({col}), {self.literal(structure)})"


class TrinoDialect(Dialect):
    """Trino's Delta Lake connector: each partition table registered by location (``system.register_table``,
    which needs ``delta.register-table-procedure.enabled=true``), the views beside them."""

    engine = "trino"

    def __init__(self, catalog: str | None, schema: str | None, temporary: bool) -> None:
        super().__init__(catalog or TRINO_DEFAULTS[0], schema or TRINO_DEFAULTS[1], False)

    def register_table(self, topic: str, table: PartitionTable) -> str | None:
        location = table.location if is_object_store(table.location) else "file://" + table.location
        return (f"CALL {self.q(self.catalog or '')}.system.register_table(schema_name => {self.literal(self.schema or '')}, "
                f"table_name => {self.literal(self.table_name(topic, table.partition))}, "
                f"table_location => {self.literal(location)})")

    def table_ref(self, topic: str, table: PartitionTable) -> str:
        return self.qualified(self.table_name(topic, table.partition))

    def string(self, col: str) -> str:
        return f"from_utf8({col})"

    def json(self, col: str, schema_text: str) -> str:
        from deltalog.schemas import parse_schema  # pyspark's types: only topics with a json encoding

        return f"TRY(CAST(json_parse(from_utf8({col})) AS {_trino_type(parse_schema(schema_text))}))"


def dialect(engine: str, *, catalog: str | None = None, schema: str | None = None,
            temporary: bool = False) -> Dialect:
    """The :class:`Dialect` of ``engine`` (one of :data:`ENGINES`)."""
    e = str(engine).strip().lower()
    if e not in ENGINES:
        raise InvalidArgumentError(f"unknown SQL engine {engine!r} for view DDL; expected one of {', '.join(ENGINES)}")
    if catalog and not schema:
        raise InvalidArgumentError("a catalog needs a schema too (catalog.schema.view); give --schema as well")
    cls = {"spark": SparkDialect, "databricks": SparkDialect, "duckdb": DuckDBDialect, "trino": TrinoDialect}[e]
    out = cls(catalog or None, schema or None, temporary)
    out.databricks = e == "databricks"
    return out


# -- type names for JSON schemas ---------------------------------------------------------------------------


def _duckdb_structure(dtype: Any) -> Any:
    """A Spark type as DuckDB's ``json_transform`` structure (objects for structs, ``[T]`` for arrays)."""
    from pyspark.sql import types as T  # only topics with a json encoding

    if isinstance(dtype, T.StructType):
        return {f.name: _duckdb_structure(f.dataType) for f in dtype.fields}
    if isinstance(dtype, T.ArrayType):
        return [_duckdb_structure(dtype.elementType)]
    return _duckdb_type(dtype)


def _duckdb_type(dtype: Any) -> str:
    from pyspark.sql import types as T  # only topics with a json encoding

    if isinstance(dtype, T.StructType):
        return "STRUCT(" + ", ".join(f'"{f.name}" {_duckdb_type(f.dataType)}' for f in dtype.fields) + ")"
    if isinstance(dtype, T.ArrayType):
        return _duckdb_type(dtype.elementType) + "[]"
    if isinstance(dtype, T.MapType):
        return f"MAP(VARCHAR, {_duckdb_type(dtype.valueType)})"
    if isinstance(dtype, T.DecimalType):
        return f"DECIMAL({dtype.precision}, {dtype.scale})"
    return _SIMPLE[type(dtype).__name__][0]


def _trino_type(dtype: Any) -> str:
    from pyspark.sql import types as T  # only topics with a json encoding

    if isinstance(dtype, T.StructType):
        return "ROW(" + ", ".join(f'"{f.name}" {_trino_type(f.dataType)}' for f in dtype.fields) + ")"
    if isinstance(dtype, T.ArrayType):
        return f"ARRAY({_trino_type(dtype.elementType)})"
    if isinstance(dtype, T.MapType):
        return f"MAP(VARCHAR, {_trino_type(dtype.valueType)})"
    if isinstance(dtype, T.DecimalType):
        return f"DECIMAL({dtype.precision}, {dtype.scale})"
    return _SIMPLE[type(dtype).__name__][1]


#: Spark type -> (DuckDB, Trino) for the types a JSON schema may hold (:mod:`deltalog.log.encoding`).
_SIMPLE = {
    "StringType": ("VARCHAR", "VARCHAR"),
    "BooleanType": ("BOOLEAN", "BOOLEAN"),
    "ByteType": ("TINYINT", "TINYINT"),
    "ShortType": ("SMALLINT", "SMALLINT"),
    "IntegerType": ("INTEGER", "INTEGER"),
    "LongType": ("BIGINT", "BIGINT"),
    "FloatType": ("FLOAT", "REAL"),
    "DoubleType": ("DOUBLE", "DOUBLE"),
    "DateType": ("DATE", "DATE"),
    "TimestampType": ("TIMESTAMPTZ", "TIMESTAMP(6) WITH TIME ZONE"),
    "TimestampNTZType": ("TIMESTAMP", "TIMESTAMP(6)"),
}


# -- the view text -----------------------------------------------------------------------------------------


def _visible_rows(d: Dialect, topic: str, tables: Sequence[PartitionTable],
                  table_ref: Callable[[str, PartitionTable], str]) -> str:
    """The ``WITH`` clause whose last query, ``visible``, is every row a read_committed consumer sees, raw."""
    q = d.q
    cols = ", ".join(q(c) for c in _READ)
    parts = []
    for t in tables:
        parts.append(f"  SELECT CAST({t.partition} AS INT) AS {q(PARTITION)}, {cols}\n"
                     f"  FROM {table_ref(topic, t)} WHERE {q(OFFSET)} >= {t.log_start_offset}")
    raw = "\n  UNION ALL\n".join(parts)
    out_cols = ", ".join(f"r.{q(c)}" for c in (PARTITION, *_READ[:7]))
    if not any(t.transactional for t in tables):
        return (f"WITH {q('_rows')} AS {d.inline}(\n{raw}\n),\n{q('_visible')} AS {d.inline}(\n"
                f"  SELECT {out_cols} FROM {q('_rows')} r WHERE r.{q(CONTROL)} IS NULL AND r.{q(PRODUCER_ID)} IS NULL\n)")
    P, OFF, C, PID = q(PARTITION), q(OFFSET), q(CONTROL), q(PRODUCER_ID)
    return f"""WITH {q('_rows')} AS {d.inline}(
{raw}
),
{q('_txn')} AS (
  -- rows of transactions and markers, each with the offset of the next marker of its producer
  SELECT {P}, {OFF}, {C}, {q(TXN_FIRST_OFFSET)},
    MIN(CASE WHEN {C} IS NOT NULL THEN {OFF} END) OVER (PARTITION BY {P}, {PID} ORDER BY {OFF}
      ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS {q('_next_marker')}
  FROM {q('_rows')} WHERE {PID} IS NOT NULL
),
{q('_outcome')} AS (
  -- each transactional record: committed (C), aborted (A) or open (O: no marker yet)
  SELECT t.{P}, t.{OFF},
    CASE WHEN m.{C} = 'ABORT' AND t.{OFF} >= COALESCE(m.{q(TXN_FIRST_OFFSET)}, 0) THEN 'A'
         WHEN m.{C} IS NOT NULL THEN 'C'
         ELSE 'O' END AS {q('_state')}
  FROM {q('_txn')} t LEFT JOIN {q('_txn')} m ON m.{P} = t.{P} AND m.{OFF} = t.{q('_next_marker')}
  WHERE t.{C} IS NULL
),
{q('_lso')} AS (
  -- the last stable offset of each partition with an open transaction
  SELECT {P}, MIN({OFF}) AS {q('_lso')} FROM {q('_outcome')} WHERE {q('_state')} = 'O' GROUP BY {P}
),
{q('_visible')} AS {d.inline}(
  SELECT {out_cols} FROM {q('_rows')} r
  LEFT JOIN {q('_lso')} l ON l.{P} = r.{P}
  WHERE r.{C} IS NULL AND r.{PID} IS NULL AND (l.{q('_lso')} IS NULL OR r.{OFF} < l.{q('_lso')})
  UNION ALL
  SELECT {out_cols} FROM {q('_rows')} r
  JOIN {q('_outcome')} o ON o.{P} = r.{P} AND o.{OFF} = r.{OFF}
  LEFT JOIN {q('_lso')} l ON l.{P} = r.{P}
  WHERE o.{q('_state')} = 'C' AND (l.{q('_lso')} IS NULL OR r.{OFF} < l.{q('_lso')})
)"""


def _decoded(d: Dialect, config: TopicConfig | None, columns: Sequence[str], *, prefix: str = "") -> str:
    """``columns`` of a relation (``prefix``: its alias and a dot), key and value decoded per the topic."""
    out = []
    for c in columns:
        encoding, schema_text = ("bytes", "")
        if config is not None and c in (KEY, VALUE):
            encoding, schema_text = ((config.key_encoding, config.key_schema) if c == KEY
                                     else (config.value_encoding, config.value_schema))
        col = prefix + d.q(c)
        if encoding == "bytes":
            out.append(f"{col} AS {d.q(c)}" if prefix else col)
        elif encoding == "string":
            out.append(f"{d.string(col)} AS {d.q(c)}")
        else:
            out.append(f"{d.json(col, schema_text)} AS {d.q(c)}")
    return ", ".join(out)


def topic_views(d: Dialect, topic: str, config: TopicConfig | None, tables: Sequence[PartitionTable], *,
                table_ref: Callable[[str, PartitionTable], str] | None = None) -> list[ViewStatement]:
    """The statements for one topic: its partition tables registered (engines that need it), then its log and
    current-state views. ``table_ref`` (topic, table) -> a relation replaces the engine's own table reference
    (deltalog's embedded engine passes the snapshot's files; tests do the same where no Delta reader is)."""
    if not tables:
        raise InvalidTopicError(f"topic {topic!r} has no partitions to make views of")
    out = []
    if table_ref is None:
        table_ref = d.table_ref
        for t in tables:
            stmt = d.register_table(topic, t)
            if stmt is not None:
                out.append(ViewStatement(d.table_name(topic, t.partition), topic, "table", stmt))
    rows = _visible_rows(d, topic, tables, table_ref)
    q = d.q
    log, current = view_name(topic), view_name(topic) + CURRENT_SUFFIX
    out.append(ViewStatement(log, topic, "log", (
        f"{d.create_view(log)}\n{rows}\nSELECT {_decoded(d, config, LOG_COLUMNS)} FROM {q('_visible')}")))
    P, OFF = q(PARTITION), q(OFFSET)
    # The latest offset of each key, joined back: a hash aggregate, where ROW_NUMBER() sorts every row (slower in
    # DuckDB; docs/performance.md).
    out.append(ViewStatement(current, topic, "current", (
        f"{d.create_view(current)}\n{rows},\n{q('_latest')} AS (\n"
        f"  SELECT {P}, MAX({OFF}) AS {q('_latest_offset')} FROM {q('_visible')} WHERE {q(KEY)} IS NOT NULL "
        f"GROUP BY {P}, {q(KEY)}\n)\n"
        f"SELECT {_decoded(d, config, STATE_COLUMNS, prefix='v.')} FROM {q('_visible')} v\n"
        f"JOIN {q('_latest')} l ON l.{P} = v.{P} AND l.{q('_latest_offset')} = v.{OFF}\n"
        f"WHERE v.{q(VALUE)} IS NOT NULL")))
    return out


def partition_tables(logs: LogManager, topic: str) -> list[PartitionTable]:
    """The latest snapshot of each partition of ``topic`` as the views need it (transactional: a transactional
    producer may append after the views are made)."""
    return [PartitionTable(snap.partition, log.uri, snap.log_start_offset)
            for log in logs.logs(topic) for snap in (log.snapshot(),)]


def state_statements(d: Dialect, topic: str, location: str, *, relation: str | None = None) -> list[ViewStatement]:
    """The statement that makes the state table of ``topic`` (a Delta table at ``location``) a name in ``d``'s
    engine, ``<view name>_state`` (:func:`delta_table_statements`). ``relation`` replaces the engine's Delta reader
    with another relation over the same snapshot (tests; deltalog's embedded engine)."""
    return delta_table_statements(d, view_name(topic) + STATE_SUFFIX, topic, "state", location, relation=relation)


def metrics_statements(d: Dialect, location: str, *, relation: str | None = None) -> list[ViewStatement]:
    """The statement that makes the cleaner's metrics table (``<store>/_deltalog/metrics``: a row per partition per
    job cycle, :mod:`deltalog.cleaner.metrics`) a name in ``d``'s engine, :data:`METRICS_VIEW`, as a state table is
    named; its topic is empty (the table is the store's)."""
    return delta_table_statements(d, METRICS_VIEW, "", "metrics", location, relation=relation)


def delta_table_statements(d: Dialect, name: str, topic: str, kind: str, location: str, *,
                           relation: str | None = None) -> list[ViewStatement]:
    """The statement that makes a plain Delta table at ``location`` the name ``name`` in ``d``'s engine:
    Databricks/Unity Catalog and Spark with a schema register it as an external table (``CREATE TABLE ... USING
    DELTA LOCATION``), Spark without one makes a view over ``delta.`<location>```, DuckDB a view over
    ``delta_scan``, Trino registers it (``system.register_table``). The table is read as it is (no merge, no
    window): every engine's plain Delta reader gives its rows. ``relation`` replaces the engine's Delta reader."""
    if relation is not None:
        return [ViewStatement(name, topic, kind, f"{d.create_view(name)}\nSELECT * FROM {relation}")]
    if isinstance(d, TrinoDialect):
        loc = location if is_object_store(location) else "file://" + location
        return [ViewStatement(name, topic, kind, (
            f"CALL {d.q(d.catalog or '')}.system.register_table(schema_name => {d.literal(d.schema or '')}, "
            f"table_name => {d.literal(name)}, table_location => {d.literal(loc)})"))]
    if isinstance(d, SparkDialect):
        if d.schema or d.databricks:
            return [ViewStatement(name, topic, kind, (
                f"CREATE TABLE IF NOT EXISTS {d.qualified(name)} USING DELTA LOCATION {d.literal(location)}"))]
        return [ViewStatement(name, topic, kind, f"{d.create_view(name)}\nSELECT * FROM delta.{d.q(location)}")]
    return [ViewStatement(name, topic, kind,
                          f"{d.create_view(name)}\nSELECT * FROM {d.table_ref(topic, PartitionTable(0, location, 0))}")]


def view_statements(logs: LogManager, engine: str, *, topics: Iterable[str] | None = None,
                    catalog: str | None = None, schema: str | None = None, temporary: bool = False,
                    table_ref: Callable[[str, PartitionTable], str] | None = None,
                    state_ref: Callable[[str, str], str] | None = None) -> list[ViewStatement]:
    """The DDL of the views of ``topics`` (every topic by default) for ``engine``, and of the state tables those
    that have one (:func:`state_statements`); for the whole store (no ``topics``), also of the cleaner's metrics
    table once a job cycle has written it (:func:`metrics_statements`). A view name two topics claim (``a.b`` and
    ``a_b``) is left out, as the Spark views leave it out. ``table_ref`` replaces the partition tables' references;
    the state and metrics tables are then named only when ``state_ref`` (topic, location) -> a relation replaces
    theirs too (the metrics table's topic is empty)."""
    d = dialect(engine, catalog=catalog, schema=schema, temporary=temporary)
    all_topics = logs.list_topics()
    wanted = list(topics) if topics is not None else all_topics
    for t in wanted:
        if t not in all_topics:
            raise InvalidTopicError(f"Topic {t!r} does not exist in {logs.root}; existing topics: {all_topics}")
    names = view_names(all_topics)
    out = []
    for t in wanted:
        stmts = topic_views(d, t, logs.topic_config(t), partition_tables(logs, t), table_ref=table_ref)
        state = StateTable(logs.storage, t)
        if (table_ref is None or state_ref is not None) and state.exists():
            stmts += state_statements(d, t, state.uri, relation=None if state_ref is None else state_ref(t, state.uri))
        out += [s for s in stmts if s.kind == "table" or len(names.get(s.name.lower(), [])) <= 1]
    from deltalake import DeltaTable

    from deltalog.cleaner.metrics import metrics_table_uri  # only here: the cleaner's modules are not the views'

    metrics = metrics_table_uri(logs)
    if (topics is None and (table_ref is None or state_ref is not None) and METRICS_VIEW not in names
            and DeltaTable.is_deltatable(metrics, storage_options=logs.storage.delta_options)):
        out += metrics_statements(d, metrics, relation=None if state_ref is None else state_ref("", metrics))
    return out


#: What each engine needs to read the state tables (``<topic>_state``, plain Delta tables; the cleaner's metrics
#: table, :data:`METRICS_VIEW`, is one too), said at the top of the script: the packages that cannot be assumed
#: where it runs.
STATE_TABLE_HEADERS = {
    "spark": ["-- The state tables (*_state) and deltalog_metrics are Delta tables: this Spark reads them only with "
              "delta-spark: "
              "pip install delta-spark, its JARs io.delta:delta-spark_2.13",
              "-- (the release matching your Spark) in spark.jars.packages, with spark.sql.extensions="
              "io.delta.sql.DeltaSparkSessionExtension and",
              "-- spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog. Databricks "
              "reads them as they are."],
    "databricks": ["-- The state tables (*_state) and deltalog_metrics are external Delta tables: Databricks and Unity "
                   "Catalog read "
                   "them as they are (USING DELTA LOCATION)."],
    "duckdb": ["-- The state tables (*_state) and deltalog_metrics are Delta tables: DuckDB reads them with its "
               "delta extension "
               "(INSTALL delta below, downloaded from DuckDB's extension repository on first use)."],
    "trino": ["-- The state tables (*_state) and deltalog_metrics are Delta tables: Trino's Delta Lake connector "
              "registers them (the catalog's properties: connector.name=delta_lake and",
              "-- delta.register-table-procedure.enabled=true)."],
}


def script(statements: Sequence[ViewStatement], engine: str) -> str:
    """The statements as one SQL script, each ended by ``;``, with a header saying what made it and when."""
    head = [f"-- deltalog views for {engine}, made {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} from the "
            "partitions' snapshots:",
            "-- the log start offsets are those of that moment; make the views again after retention runs."]
    if any(s.kind in ("state", "metrics") for s in statements):
        head += STATE_TABLE_HEADERS.get(engine, [])
    if engine == "duckdb":
        head.append("INSTALL delta;\nLOAD delta;")
    return "\n".join(head) + "\n\n" + "\n\n".join(s.sql + ";" for s in statements) + "\n"


def register_views(spark: Any, store: Any, topics: Iterable[str] | None = None, *, catalog: str | None = None,
                   schema: str | None = None, temporary: bool = False,
                   table_ref: Callable[[str, PartitionTable], str] | None = None) -> dict[str, str]:
    """Make the Spark SQL views of ``topics`` (all by default) in ``spark``'s catalog, one ``spark.sql`` per
    statement: ``catalog``/``schema`` name Unity Catalog's (or the metastore's) schema and register each
    partition as an external Delta table there; ``temporary`` makes session temp views instead. The session
    must read Delta (delta-spark or Databricks) unless ``table_ref`` names other relations. Returns view name
    -> topic."""
    logs = getattr(store, "log_manager", store)
    out: dict[str, str] = {}
    for s in view_statements(logs, "spark", topics=topics, catalog=catalog, schema=schema, temporary=temporary,
                             table_ref=table_ref):
        spark.sql(s.sql)
        if s.kind != "table":
            out[s.name] = s.topic
    return out
