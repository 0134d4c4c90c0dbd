"""Key and value columns decoded for SQL per the topic's ``key.encoding`` / ``value.encoding``.

``bytes`` stays ``BINARY``, ``string`` becomes ``STRING`` and ``json`` a ``STRUCT`` of the topic's schema
(:mod:`deltalog.log.encoding` parses and checks the schemas at append time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F

from deltalog.config import TopicConfig
from deltalog.log.encoding import parse_schema


@dataclass(frozen=True)
class ColumnEncoding:
    """How one column (``key`` or ``value``) of a topic is decoded for SQL."""

    column: str
    encoding: str
    schema_text: str

    def decode(self, col: Column) -> Column:
        if self.encoding == "string":
            return col.cast("string")
        if self.encoding == "json":
            return F.from_json(col.cast("string"), parse_schema(self.schema_text), {"mode": "PERMISSIVE"})
        return col


def column_encodings(config: TopicConfig) -> tuple[ColumnEncoding, ColumnEncoding]:
    return (ColumnEncoding("key", config.key_encoding, config.key_schema),
            ColumnEncoding("value", config.value_encoding, config.value_schema))


def decoded_columns(config: TopicConfig, columns: Sequence[str]) -> list[Column]:
    """``columns`` as Spark columns, with ``key``/``value`` decoded per the topic's encodings."""
    by_name = {e.column: e for e in column_encodings(config)}
    out = []
    for c in columns:
        enc = by_name.get(c)
        out.append(enc.decode(F.col(c)).alias(c) if enc is not None else F.col(c))
    return out
