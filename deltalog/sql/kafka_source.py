"""The earlier home of ``format("deltalog")``, kept so that code importing from it goes on working: the source
now lives in the package :mod:`deltalog.sql.kafka`, one module per part (options, planning, reads, the batch
and streaming readers, writes, the data source)."""

from __future__ import annotations

from deltalog.sql.kafka import DataLossError, register
from deltalog.sql.kafka.batch import DeltalogBatchReader
from deltalog.sql.kafka.options import EARLIEST, LATEST, SOURCE_NAME, Options
from deltalog.sql.kafka.reads import CREATE_TIME, kafka_schema
from deltalog.sql.kafka.source import DeltalogDataSource, session_source
from deltalog.sql.kafka.streaming import DeltalogStreamReader, offsets_json, parse_offsets, rate_limit
from deltalog.sql.kafka.writes import (
    SINK_APP_PREFIX,
    STAGED_SCHEMA,
    STAGING_DIR,
    DeltalogBatchWriter,
    DeltalogStreamWriter,
    StagedRecords,
    sink_app_id,
)

__all__ = [
    "CREATE_TIME", "EARLIEST", "LATEST", "SINK_APP_PREFIX", "SOURCE_NAME", "STAGED_SCHEMA", "STAGING_DIR",
    "DataLossError", "DeltalogBatchReader", "DeltalogBatchWriter", "DeltalogDataSource", "DeltalogStreamReader",
    "DeltalogStreamWriter", "Options", "StagedRecords", "kafka_schema", "offsets_json", "parse_offsets",
    "rate_limit", "register", "session_source", "sink_app_id",
]
