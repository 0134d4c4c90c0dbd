"""The guarantees of log compaction (those Kafka's ``LogCleaner`` documents) as Great Expectations suites.

Built-in expectations where one fits (``ExpectColumnValuesToBeUnique``, ``ExpectColumnValuesToNotBeNull``);
``UnexpectedRowsExpectation`` with Spark SQL over ``{batch}`` for the rest. Every query returns the
offending rows as ``offset`` and ``key`` (as text), so a failure names the records to look at. Each
expectation carries ``meta={"deltalog": <name>}``; the names are stable and documented here.

Per partition (:func:`partition_guarantees`, batch: :func:`~deltalog.quality.frames.partition_frame`):

* ``offsets_not_null``, ``offsets_unique``: an offset identifies one record forever (guarantee 3);
* ``keys_not_null``: a compacted topic holds only keyed records;
* ``offsets_below_log_end``: no record past the log end offset kept in the Delta log;
* ``clean_section_keys_unique``: below the cleaner checkpoint each key appears at most once;
* ``clean_section_tombstones_have_horizon``: every tombstone the cleaner has seen carries its delete horizon;
* ``no_expired_tombstones``: no tombstone whose horizon had passed at the last clean is still there
  (the cleaner drops a tombstone once ``now >= delete_horizon_ms``; one stamped by that very clean has
  ``horizon = clean time + delete.retention.ms`` and is allowed, even when that is the clean time);
* ``offsets_increase_within_files`` and ``files_in_offset_order``: reading the files in offset order,
  rows in file order, gives strictly increasing offsets (guarantee 2), and every file's Delta stats
  (min/max offset, record count) are true to its data, since reads skip files by those stats.

Transactions (:func:`transaction_guarantees`, on the same batch): ``no_aborted_record_visible``,
``no_marker_visible``, ``committed_transactions_visible``, ``markers_closed_by_their_producer``.

Per state table (:func:`state_guarantees`, batch: one row per key of the comparison of
:mod:`deltalog.state.equality`, for a topic with ``state.table.enable``):

* ``state_table_equals_log``: every key's row in the state table is the latest read_committed record of that key
  in the log up to the offsets the table records (outcome ``equal``), or the key has newer records the next
  refresh applies (``pending``); never ``missing``, ``extra``, ``different`` or ``ahead``.

Across one clean (:func:`across_clean_guarantees`, batch: the records before and after, joined on offset):

* ``latest_records_kept``: the latest record of every key before the clean is still there with the same
  offset, key and value, unless it was a tombstone whose horizon had passed (guarantee 4);
* ``no_new_records``: every record after the clean was there before with the same key, value, headers
  and timestamp; the only change allowed is the first stamp of a tombstone's horizon;
* ``aborted_records_dropped``: no record of an aborted transaction below the clean's end survives it;
* ``markers_kept_until_horizon``: no transaction marker was removed before its delete horizon had passed;
* ``tail_unchanged``: nothing at or past the new cleaner checkpoint (the part the pass did not clean)
  changed at all (guarantee 1: the head of the log is untouched).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import great_expectations.expectations as gxe

from deltalog.log.partition_log import LogSnapshot
from deltalog.quality.frames import (
    FILE_RANK,
    ROW_INDEX,
    STAT_COUNT,
    STAT_MAX,
    STAT_MIN,
    VISIBLE_COMMITTED,
    CleanCommit,
)

#: Offending rows returned per expectation (GX keeps at most 200 anyway).
SAMPLE_LIMIT = 20


@dataclass(frozen=True)
class Guarantee:
    """One expectation with deltalog's name for it."""

    name: str
    description: str
    expectation: Any  # a great_expectations Expectation

    @property
    def is_sql(self) -> bool:
        return type(self.expectation).__name__ == "UnexpectedRowsExpectation"


#: The values a suite is about (the cleaner checkpoint, the log end, the last clean's time...) are columns of
#: the batch, the same on every row, never constants in a query: so one saved suite (a user's Great
#: Expectations context keeps it under a stable name) holds for every snapshot and every clean.
LOG_END = "_log_end_offset"
FIRST_DIRTY = "_first_dirty_offset"
CLEAN_NOW = "_clean_now_ms"
FRESH_HORIZON = "_fresh_horizon_ms"
CLEAN_END = "_clean_end_offset"


def _rows(name: str, description: str, query: str, saved_description: str | None = None) -> Guarantee:
    """An ``UnexpectedRowsExpectation``; ``description`` (with this run's figures) is deltalog's, the
    expectation's own is ``saved_description`` (without them) when given, as a saved suite outlives a run."""
    return Guarantee(name, description, gxe.UnexpectedRowsExpectation(
        unexpected_rows_query=query, description=saved_description or description, meta={"deltalog": name},
    ))


#: The outcomes of :mod:`deltalog.state.equality` a correct state table has.
STATE_OK = ("equal", "pending")


def state_guarantees() -> list[Guarantee]:
    """The state-table suite (its batch: the comparison's rows, ``outcome`` per key)."""
    return [Guarantee("state_table_equals_log",
                      "the state table holds the latest read_committed record of every key of the log up to the "
                      "offsets it records, and nothing else",
                      gxe.ExpectColumnValuesToBeInSet(column="outcome", value_set=list(STATE_OK),
                                                      meta={"deltalog": "state_table_equals_log"}))]


def partition_parameters(snap: LogSnapshot, last_clean: CleanCommit | None) -> dict[str, int | None]:
    """The columns :func:`partition_guarantees` reads its figures from, for one snapshot."""
    return {LOG_END: snap.log_end_offset, FIRST_DIRTY: snap.first_dirty_offset,
            CLEAN_NOW: None if last_clean is None else last_clean.now_ms,
            FRESH_HORIZON: None if last_clean is None else last_clean.now_ms + snap.config.delete_retention_ms}


def clean_parameters(clean: CleanCommit, retention_ms: int) -> dict[str, int | None]:
    """The columns :func:`across_clean_guarantees` reads its figures from, for one clean."""
    return {CLEAN_NOW: clean.now_ms, FRESH_HORIZON: clean.now_ms + retention_ms, CLEAN_END: clean.end_offset}


def partition_guarantees(snap: LogSnapshot, last_clean: CleanCommit | None, *, saved: bool = False
                         ) -> list[Guarantee]:
    """The per-partition suite for one snapshot; ``last_clean`` is the newest clean in its history. A suite to
    be ``saved`` holds ``no_expired_tombstones`` even before the first clean (it finds nothing then)."""
    fd = snap.first_dirty_offset
    leo = snap.log_end_offset
    out = [
        Guarantee("offsets_not_null", "every record has an offset",
                  gxe.ExpectColumnValuesToNotBeNull(column="offset", meta={"deltalog": "offsets_not_null"})),
        Guarantee("offsets_unique", "no two records share an offset",
                  gxe.ExpectColumnValuesToBeUnique(column="offset", meta={"deltalog": "offsets_unique"})),
    ]
    if snap.config.compact:
        out.append(_rows("keys_not_null", "every record of a compacted topic has a key (transaction markers "
                         "have none: they are not records)",
                         "SELECT offset, CAST(key AS STRING) AS key FROM {batch} WHERE key IS NULL AND control IS NULL"))
    out += [
        _rows("offsets_below_log_end", f"every offset is below the log end offset {leo}",
              f"SELECT offset, CAST(key AS STRING) AS key FROM {{batch}} WHERE offset >= {LOG_END}",
              "every offset is below the log end offset"),
        _rows("clean_section_keys_unique", f"below the cleaner checkpoint ({fd}) each key appears at most once",
              "SELECT offset, CAST(key AS STRING) AS key FROM ("
              f"SELECT offset, key, count(*) OVER (PARTITION BY key) AS n FROM {{batch}} "
              f"WHERE offset < {FIRST_DIRTY} AND key IS NOT NULL) WHERE n > 1",
              "below the cleaner checkpoint each key appears at most once"),
        _rows("clean_section_tombstones_have_horizon",
              f"every tombstone below the cleaner checkpoint ({fd}) carries a delete horizon",
              f"SELECT offset, CAST(key AS STRING) AS key FROM {{batch}} "
              f"WHERE offset < {FIRST_DIRTY} AND value IS NULL AND control IS NULL AND delete_horizon_ms IS NULL",
              "every tombstone below the cleaner checkpoint carries a delete horizon"),
    ]
    if last_clean is not None or saved:
        when = "" if last_clean is None else f" (version {last_clean.version}, time {last_clean.now_ms})"
        out.append(_rows(
            "no_expired_tombstones",
            f"no tombstone whose delete horizon had passed at the last clean{when} is still in the log",
            f"SELECT offset, CAST(key AS STRING) AS key, delete_horizon_ms FROM {{batch}} "
            f"WHERE value IS NULL AND control IS NULL AND delete_horizon_ms <= {CLEAN_NOW} "
            f"AND delete_horizon_ms <> {FRESH_HORIZON}",
            "no tombstone whose delete horizon had passed at the last clean is still in the log",
        ))
    out += [
        _rows("offsets_increase_within_files",
              "within every data file offsets strictly increase in row order, and every row is in a file of "
              "the snapshot",
              "SELECT offset, CAST(key AS STRING) AS key, previous_offset FROM ("
              f"SELECT offset, key, {FILE_RANK}, LAG(offset) OVER (PARTITION BY {FILE_RANK} ORDER BY {ROW_INDEX}) "
              f"AS previous_offset FROM {{batch}}) WHERE previous_offset >= offset OR {FILE_RANK} IS NULL"),
        _rows("files_in_offset_order",
              "data files hold disjoint, increasing offset ranges and their Delta stats (min/max offset, "
              "record count) match their rows",
              "SELECT first_offset AS offset, CAST(NULL AS STRING) AS key, file_rank, previous_last_offset FROM ("
              f"SELECT *, LAG(last_offset) OVER (ORDER BY file_rank) AS previous_last_offset FROM ("
              f"SELECT {FILE_RANK} AS file_rank, min(offset) AS first_offset, max(offset) AS last_offset, "
              f"count(*) AS n, first({STAT_MIN}) AS smin, first({STAT_MAX}) AS smax, first({STAT_COUNT}) AS sn "
              f"FROM {{batch}} WHERE {FILE_RANK} IS NOT NULL GROUP BY {FILE_RANK})) "
              "WHERE previous_last_offset >= first_offset OR first_offset <> smin OR last_offset <> smax "
              "OR n <> sn"),
    ]
    out += transaction_guarantees(snap)
    return out


#: The aborted transactions of a partition frame, from its ABORT markers: (producer id, first offset, marker).
_ABORTED_RANGES = ("SELECT producer_id AS a_pid, txn_first_offset AS a_first, offset AS a_last FROM {batch} "
                   "WHERE control = 'ABORT'")
_COMMITTED_RANGES = ("SELECT producer_id AS c_pid, txn_first_offset AS c_first, offset AS c_last FROM {batch} "
                     "WHERE control = 'COMMIT'")


def transaction_guarantees(snap: LogSnapshot) -> list[Guarantee]:
    """The transactional guarantees of one partition snapshot, checked against the read_committed
    reader (``_visible_committed``) with the markers in the data as the truth:

    * ``no_aborted_record_visible``: no record of a transaction an ABORT marker closed is read_committed;
    * ``no_marker_visible``: markers are never returned, at any isolation level;
    * ``committed_transactions_visible``: every record still in the log of a transaction a COMMIT marker
      closed is read_committed (all of a committed transaction is there, or was superseded and cleaned:
      the across-clean ``latest_records_kept`` checks that nothing else was removed);
    * ``markers_closed_by_their_producer``: a marker names a transaction start at or before itself.
    """
    return [
        _rows("no_aborted_record_visible",
              "no record of an aborted transaction is visible to read_committed readers",
              "SELECT offset, CAST(key AS STRING) AS key FROM {batch} JOIN (" + _ABORTED_RANGES + ") "
              "ON producer_id = a_pid AND offset >= a_first AND offset < a_last "
              f"WHERE {VISIBLE_COMMITTED} AND control IS NULL"),
        _rows("no_marker_visible", "transaction markers are never returned to readers",
              f"SELECT offset, control AS key FROM {{batch}} WHERE control IS NOT NULL AND {VISIBLE_COMMITTED}"),
        _rows("committed_transactions_visible",
              "every record of a committed transaction below the last stable offset is visible to "
              "read_committed readers",
              "SELECT offset, CAST(key AS STRING) AS key FROM {batch} JOIN (" + _COMMITTED_RANGES + ") "
              "ON producer_id = c_pid AND offset >= c_first AND offset < c_last "
              f"WHERE control IS NULL AND NOT {VISIBLE_COMMITTED}"),
        _rows("markers_closed_by_their_producer",
              "every transaction marker names its transaction's first offset, at or below the marker",
              "SELECT offset, control AS key FROM {batch} WHERE control IS NOT NULL AND "
              "(txn_first_offset IS NULL OR txn_first_offset > offset OR producer_id IS NULL)"),
    ]


def across_clean_guarantees(clean: CleanCommit, retention_ms: int) -> list[Guarantee]:
    """The suite comparing the versions before and after one clean commit."""
    now, end = clean.now_ms, clean.end_offset
    same = "a_key <=> b_key AND a_value <=> b_value"
    same_record = f"{same} AND a_headers <=> b_headers AND a_timestamp_ms <=> b_timestamp_ms"
    return [
        _rows("latest_records_kept",
              f"the latest record of every key before the clean (version {clean.before_version}) is still "
              f"there after it (version {clean.version}) with the same offset and value, unless a tombstone "
              f"whose delete horizon had passed (time {now})",
              "SELECT offset, CAST(b_key AS STRING) AS key FROM {batch} WHERE b_present AND b_latest AND NOT b_aborted "
              f"AND NOT (b_value IS NULL AND b_delete_horizon_ms IS NOT NULL AND b_delete_horizon_ms <= {CLEAN_NOW}) "
              f"AND NOT (a_present AND {same})",
              "the latest record of every key before a clean is still there after it with the same offset and "
              "value, unless a tombstone whose delete horizon had passed"),
        _rows("no_new_records",
              f"every record after the clean (version {clean.version}) was there before it, unchanged but "
              "for a tombstone's first delete horizon",
              "SELECT offset, CAST(a_key AS STRING) AS key FROM {batch} WHERE a_present AND NOT ("
              f"b_present AND {same_record} AND (a_delete_horizon_ms <=> b_delete_horizon_ms OR "
              f"(b_delete_horizon_ms IS NULL AND a_value IS NULL AND a_delete_horizon_ms = {FRESH_HORIZON})))",
              "every record after a clean was there before it, unchanged but for a tombstone's first delete "
              "horizon"),
        _rows("aborted_records_dropped",
              f"every record of an aborted transaction below the clean's end ({end}) is gone after the first "
              f"clean that covered it (version {clean.version})",
              f"SELECT offset, CAST(b_key AS STRING) AS key FROM {{batch}} WHERE b_aborted AND offset < {CLEAN_END} "
              "AND a_present",
              "every record of an aborted transaction below a clean's end is gone after the first clean that "
              "covered it"),
        _rows("markers_kept_until_horizon",
              f"no transaction marker was removed by the clean (version {clean.version}, time {now}) before its "
              "delete horizon had passed",
              "SELECT offset, b_control AS key FROM {batch} WHERE b_present AND b_control IS NOT NULL "
              f"AND NOT a_present AND NOT (b_delete_horizon_ms IS NOT NULL AND b_delete_horizon_ms <= {CLEAN_NOW})",
              "no transaction marker was removed by a clean before its delete horizon had passed"),
        _rows("tail_unchanged",
              f"nothing at or past the new cleaner checkpoint ({end}) changed in the clean (version "
              f"{clean.version})",
              "SELECT offset, CAST(coalesce(a_key, b_key) AS STRING) AS key FROM {batch} "
              f"WHERE offset >= {CLEAN_END} AND NOT (a_present AND b_present AND {same_record} "
              "AND a_delete_horizon_ms <=> b_delete_horizon_ms)",
              "nothing at or past the new cleaner checkpoint changed in a clean"),
    ]
