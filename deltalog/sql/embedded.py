"""SQL over a store without starting Spark: the same views as :mod:`deltalog.sql.views`, answered by DuckDB.

``deltalog sql`` used to start a JVM for every query, and Spark's start was nearly all of its time. Here the
views are the plain-SQL DuckDB views of :mod:`deltalog.sql.ddl`, made for each query over the latest snapshot
of each partition the query names, with ``read_parquet`` of the snapshot's data files (the files delta-rs lists
for that version, as Delta's ``delta_scan`` would read) in place of ``delta_scan``: DuckDB's delta extension
is downloaded on first use, which an offline or locked-down machine cannot do, and deltalog already knows the
files and their stats. On an object store (``s3://``, ``az://``, ``gs://``) DuckDB has no filesystem without
its httpfs extension either, so the files are read through the store's :class:`~deltalog.storage.Storage`
(obstore, as every other read of the store) into Arrow and handed to DuckDB.

The views, columns and rows are those of the Spark views: ``<topic>`` the log and ``<topic>_current`` the
current state (and ``<topic>_state``, the state table, and ``deltalog_metrics``, the cleaner's metrics table, as
they are), ``read_committed`` (markers never shown, aborted and open transactions left out), keys and
values decoded per the topic's encoding. The snapshot's log start is read when the query runs, and a
snapshot without transactional rows skips the transaction joins.

Why DuckDB rather than delta-rs's DataFusion ``QueryBuilder`` (as fast on the benchmark's count, see
docs/sql.md): ``QueryBuilder`` has no JSON functions, so ``json``-encoded topics could not be decoded as the
Spark views decode them (``from_json``), and it registers Delta tables only, where DuckDB also takes file lists
and Arrow data.

DuckDB is the ``sql`` extra (``pip install 'deltalog[sql]'``); a query without it says so in one line.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from deltalog import extras
from deltalog.errors import CorruptLogError, DeltalogError, InvalidTopicError, QueryError
from deltalog.log import damage, time_travel
from deltalog.log.record import RECORD_SCHEMA
from deltalog.sql import ddl
from deltalog.sql.names import METRICS_VIEW, ambiguity, topics_in_query
from deltalog.state.table import StateTable
from deltalog.storage import join

if TYPE_CHECKING:
    import duckdb

    from deltalog.log.log_manager import LogManager

#: A query that names the cleaner's metrics table (``deltalog_metrics``, as a word).
_NAMES_METRICS = re.compile(rf"(?<![\w.]){METRICS_VIEW}(?!\w)", re.IGNORECASE)
#: ``offset`` as a bare word in a query: DuckDB reserves it (Spark does not), the usual first parser error.
_BARE_OFFSET = re.compile(r'(?<!["`\w])offset(?!["`\w])', re.IGNORECASE)
#: DuckDB's type of each column of the partition table (a file written before transactions lacks the last four).
_DUCKDB_TYPES = {
    "offset": "BIGINT", "key": "BLOB", "value": "BLOB", "headers": 'STRUCT("key" VARCHAR, "value" BLOB)[]',
    "timestamp_ms": "BIGINT", "segment": "BIGINT", "delete_horizon_ms": "BIGINT", "producer_id": "BIGINT",
    "producer_epoch": "INTEGER", "control": "VARCHAR", "txn_first_offset": "BIGINT",
}
#: A typed relation without rows: ``UNION ALL BY NAME`` with the files gives every column its type, and null in
#: the files that lack it (a plain append writes no producer columns).
_EMPTY = "SELECT " + ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in _DUCKDB_TYPES.items()) + " WHERE false"


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection (the ``sql`` extra)."""
    extras.require("sql", "SQL on the embedded engine")
    import duckdb  # the sql extra, imported on first use (start-up time of commands that never query)

    con = duckdb.connect(":memory:")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


class EmbeddedSQL:
    """The embedded engine of one store: a DuckDB connection whose views are made afresh for each query."""

    def __init__(self, logs: LogManager) -> None:
        self.logs = logs
        self._con: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()
        #: The data files the views read, so that DuckDB's error on one names it as a damaged file.
        self._locations: set[str] = set()
        self._query = ""

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = connect()
        return self._con

    def sql(self, query: str, *, as_of: time_travel.AsOf | None = None) -> SQLResult | None:
        """Run DuckDB SQL with the views of every topic the query names made first (as of ``as_of``: Delta's
        ``versionAsOf`` / ``timestampAsOf``, see :mod:`deltalog.log.time_travel`); returns DuckDB's relation
        in a :class:`SQLResult` (``.fetchall()``, ``.arrow()``, ``.df()``, ``.columns``, and Spark's ``.collect()``,
        ``.toPandas()``, ``.count()``), or None for a statement without a result."""
        used, ambiguous = topics_in_query(query, self.logs.list_topics())
        for name, claims in ambiguous:
            raise InvalidTopicError(ambiguity(name, claims) + "; query the other engines' views from "
                                    "store.view_ddl(...) under names of your own")
        import duckdb  # the connection above required it

        with self._lock:
            con = self.connection
            for topic in used:
                self._make_views(con, topic, as_of)
            if _NAMES_METRICS.search(query) and METRICS_VIEW not in ddl.view_names(self.logs.list_topics()):
                self._make_metrics_view(con, as_of)
            self._query = query
            try:
                _refuse_json_on_bytes(con, query)
                try:
                    relation = con.sql(query)
                except duckdb.ParserException:
                    rewritten = quote_bare_offset(query)
                    if rewritten == query:
                        raise
                    relation = con.sql(rewritten)  # Spark SQL's bare `offset` column, as the Spark views take it
                return None if relation is None else SQLResult(relation)
            except duckdb.Error as e:
                raise self.error(e) from None

    def error(self, e: BaseException) -> DeltalogError:
        """DuckDB's error as deltalog's: a data file it could not read is a damaged partition
        (:class:`~deltalog.errors.CorruptLogError` naming the file and the fix), anything else a
        :class:`~deltalog.errors.QueryError` with DuckDB's message."""
        text = str(e)
        for location in sorted(self._locations):
            if location in text:
                return damage.data_file_error(location, FileNotFoundError(location) if "No files found" in text
                                              or "No such file" in text else e)
        hint = ""
        if "Parser" in type(e).__name__ and _BARE_OFFSET.search(self._query):
            hint = ('\ndeltalog: OFFSET is a reserved word in DuckDB (the embedded engine): write "offset" in double '
                    "quotes, or run Spark SQL with --engine spark / engine=\"spark\"")
        return QueryError(f"{type(e).__name__}: {text}{hint}")

    def _make_views(self, con: duckdb.DuckDBPyConnection, topic: str, as_of: time_travel.AsOf | None) -> None:
        tables = []
        refs: dict[int, str] = {}
        storage = self.logs.storage
        for p in time_travel.partitions_read(self.logs.partitions(topic), topic, as_of):
            log = self.logs.log(topic, p)
            if as_of is None:
                snap = log.snapshot()
                damage.raise_data_damage(log.storage, log.uri, snap.files)
                if (twice := log.duplicated_offsets(snap)) is not None:  # never served twice, by SQL either
                    raise CorruptLogError(twice.message())
            else:
                snap = time_travel.snapshot_as_of(log, as_of)  # checks its files are there
            files = snap.files_from(snap.log_start_offset)
            tables.append(ddl.PartitionTable(snap.partition, log.uri, snap.log_start_offset,
                                             any(f.producer_rows or f.control_rows for f in files)))
            locations = [join(log.uri, f.path) for f in files]
            self._locations.update(locations)
            if not locations:
                refs[snap.partition] = f"({_EMPTY})"
            elif storage.local:
                listed = ", ".join(ddl.DuckDBDialect(None, None, False).literal(p) for p in locations)
                refs[snap.partition] = (f"({_EMPTY} UNION ALL BY NAME SELECT * FROM read_parquet([{listed}], "
                                        "union_by_name = true))")
            else:
                name = f"__deltalog_{ddl.view_name(topic)}__p{snap.partition}"
                con.register(name, storage.read_parquet(locations, schema=RECORD_SCHEMA))
                refs[snap.partition] = f'"{name}"'
        d = ddl.dialect("duckdb")
        names = ddl.view_names(self.logs.list_topics())
        statements = ddl.topic_views(d, topic, self.logs.topic_config(topic), tables,
                                     table_ref=lambda _t, table: refs[table.partition])
        state = self._state_relation(con, topic, as_of)
        if state is not None:
            statements += ddl.state_statements(d, topic, "", relation=state)
        for s in statements:
            if len(names.get(s.name.lower(), [])) <= 1:
                con.execute(s.sql)

    def _state_relation(self, con: duckdb.DuckDBPyConnection, topic: str, as_of: time_travel.AsOf | None
                        ) -> str | None:
        """The state table's snapshot (latest, or as of a time) as a DuckDB relation over its files; None without
        a state table, or for versions of the partitions (which say nothing of the state table's versions)."""
        table = StateTable(self.logs.storage, topic)
        dt = table.open()
        if dt is None or (as_of is not None and as_of.timestamp_ms is None):
            return None
        if as_of is not None:
            dt = table.open(time_travel.version_at(dt, as_of.timestamp_ms, f"the state table of {topic!r}"))
        return self._delta_relation(con, dt, f"__deltalog_{ddl.view_name(topic)}__state")

    def _make_metrics_view(self, con: duckdb.DuckDBPyConnection, as_of: time_travel.AsOf | None) -> None:
        """``deltalog_metrics``: the cleaner's metrics table (``<store>/_deltalog/metrics``) as it is, latest or as
        of a time, as the other engines' views name it (:func:`deltalog.sql.ddl.metrics_statements`); nothing before
        a job cycle wrote it (the query then says the name is unknown), nor for versions of the partitions."""
        from deltalake import DeltaTable

        from deltalog.cleaner.metrics import metrics_table_uri

        location = metrics_table_uri(self.logs)
        options = self.logs.storage.delta_options
        if not DeltaTable.is_deltatable(location, storage_options=options) or (
                as_of is not None and as_of.timestamp_ms is None):
            return
        dt = DeltaTable(location, storage_options=options)
        if as_of is not None:
            dt = DeltaTable(location, storage_options=options,
                            version=time_travel.version_at(dt, as_of.timestamp_ms, "the cleaner's metrics table"))
        relation = self._delta_relation(con, dt, "__deltalog_metrics")
        for s in ddl.metrics_statements(ddl.dialect("duckdb"), location, relation=relation):
            con.execute(s.sql)

    def _delta_relation(self, con: duckdb.DuckDBPyConnection, dt: Any, name: str) -> str:
        """A plain Delta table's snapshot (``dt``, delta-rs) as a DuckDB relation over its files: ``read_parquet``
        on a local store, Arrow registered as ``name`` on an object store or when the table has no file."""
        files = dt.file_uris()
        schema = pa.schema(dt.schema().to_arrow())
        self._locations.update(files)
        if not files:
            con.register(name, schema.empty_table())
            return f'"{name}"'
        if self.logs.storage.local:
            listed = ", ".join(ddl.DuckDBDialect(None, None, False).literal(f) for f in files)
            return f"read_parquet([{listed}], union_by_name = true)"
        con.register(name, self.logs.storage.read_parquet(files, schema=schema))
        return f'"{name}"'

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


_STRING_OR_WORD = re.compile(r"""('(?:[^']|'')*')|("(?:[^"]|"")*")|(`[^`]*`)|\b(offset)\b(?!\s*(?:[0-9?$(]|-))""",
                             re.IGNORECASE)


#: A query that may call a JSON function (DuckDB's ``json_*`` and its ``->`` / ``->>`` operators).
_MAY_USE_JSON = re.compile(r"json|->", re.IGNORECASE)


def _refuse_json_on_bytes(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Refuse a JSON function applied to a ``key`` or ``value`` column that is a BLOB (a topic whose encoding is
    ``bytes``, the default): DuckDB casts a BLOB to text with its bytes escaped (``"`` as ``\\x22``), so
    ``json_extract_string(value, '$.f')`` would answer NULL on every row without an error. The query is read with
    DuckDB's own parser (``json_serialize_sql``), not with patterns."""
    if not _MAY_USE_JSON.search(query):
        return
    try:
        tree = con.execute("SELECT json_serialize_sql(?)", [query]).fetchall()[0][0]
    except Exception:  # noqa: BLE001 - not one statement DuckDB can serialize: the query itself will say why
        return
    import json

    calls: list[tuple[str, str]] = []
    tables: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and node.get("table_name"):
                tables.add(str(node["table_name"]).lower())
            if node.get("class") == "FUNCTION":
                name = str(node.get("function_name", "")).lower()
                args = node.get("arguments") or node.get("children") or []
                first = args[0].get("expression", args[0]) if args and isinstance(args[0], dict) else None
                if (name.startswith("json") or name in ("->", "->>")) and isinstance(first, dict) and \
                        first.get("class") == "COLUMN_REF" and first["column_names"][-1].lower() in ("key", "value"):
                    calls.append((name, first["column_names"][-1].lower()))
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    parsed = json.loads(tree)
    if parsed.get("error"):
        return
    walk(parsed)
    if not calls or not tables:
        return
    blobs = con.execute("SELECT lower(table_name), lower(column_name) FROM information_schema.columns WHERE "
                        "data_type = 'BLOB' AND lower(column_name) IN ('key', 'value')").fetchall()
    for function, column in calls:
        views = sorted(t for t, c in blobs if c == column and t in tables)
        if views:
            call = f"{function}({column}, ...)" if function.startswith("json") else f"{column} {function} ..."
            raise QueryError(
                f"{call} reads a BLOB: the {column} of {', '.join(views)} is bytes ({column}.encoding=bytes, the "
                f"default), and DuckDB's JSON functions answer NULL on every BLOB. Decode it as UTF-8 text first: "
                f"json_extract_string(decode({column}), '$.field'); or declare the topic's {column}.encoding=json "
                f"with a {column}.schema (typed columns) or {column}.encoding=string ('deltalog topics alter TOPIC "
                f"--config {column}.encoding=string')")


def quote_bare_offset(query: str) -> str:
    """``query`` with each bare ``offset`` that names the column written ``"offset"``: Spark SQL takes ``SELECT
    offset FROM t`` (OFFSET is not reserved there), DuckDB reads it as the ``OFFSET`` clause. Left alone: string
    literals, quoted names, and ``OFFSET`` followed by a number or a parameter (the clause of ``LIMIT n OFFSET
    m``). Tried only after DuckDB refused the query as written, so a query DuckDB reads is never changed."""
    def fix(m: re.Match[str]) -> str:
        return '"offset"' if m.group(4) else m.group(0)

    return _STRING_OR_WORD.sub(fix, query)


class SQLResult:
    """The embedded engine's answer: DuckDB's relation (every method of ``DuckDBPyRelation`` works on it:
    ``fetchall()``, ``arrow()``, ``df()``, ``show()``, ``columns``) that also answers the Spark DataFrame calls a
    ``store.sql(...)`` user wrote when it always returned a Spark DataFrame (``collect()``, ``toPandas()``,
    ``count()``, ``limit(n)``, ``first()``, ``toArrow()``), so that code keeps working on a store without Spark.
    ``relation`` is DuckDB's own object."""

    def __init__(self, relation: Any) -> None:
        self.relation = relation

    def __getattr__(self, name: str) -> Any:
        return getattr(self.relation, name)

    def __repr__(self) -> str:
        return f"SQLResult(columns={list(self.relation.columns)!r})"

    def _row_type(self) -> Any:
        from collections import namedtuple

        return namedtuple("Row", list(self.relation.columns), rename=True)

    def collect(self) -> list[Any]:
        """Every row as a named tuple (``row.key``, ``row[0]``), as Spark's ``DataFrame.collect`` gives Rows."""
        row = self._row_type()
        return [row(*r) for r in self.relation.fetchall()]

    def first(self) -> Any:
        row = self._row_type()
        rows = self.relation.limit(1).fetchall()
        return row(*rows[0]) if rows else None

    def count(self, *args: Any, **kwargs: Any) -> Any:
        """With no argument, the number of rows (Spark's ``DataFrame.count``); with one, DuckDB's aggregate."""
        if args or kwargs:
            return self.relation.count(*args, **kwargs)
        return self.relation.aggregate("count(*)").fetchall()[0][0]

    def limit(self, n: int, offset: int = 0) -> SQLResult:
        return SQLResult(self.relation.limit(n, offset))

    def toPandas(self) -> Any:  # noqa: N802 (Spark's name)
        return self.relation.df()

    def toArrow(self) -> Any:  # noqa: N802 (Spark's name)
        """A ``pyarrow.Table``, as Spark's ``DataFrame.toArrow`` (DuckDB's ``arrow()`` may give a batch reader)."""
        answer = self.relation.arrow()
        return answer.read_all() if hasattr(answer, "read_all") else answer
