"""Key and value columns decoded for SQL per the topic's ``key.encoding`` / ``value.encoding``.

``bytes`` stays ``BINARY``, ``string`` becomes ``STRING`` and ``json`` a ``STRUCT`` of the topic's schema
(:mod:`deltalog.schemas` parses the schemas, :mod:`deltalog.log.encoding` checks records against them at append time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pyspark.sql import Column

from deltalog.config import TopicConfig
from deltalog.schemas import parse_schema
from deltalog.spark import functions


@dataclass(frozen=True)
class ColumnEncoding:
    """How one column (``key`` or ``value``) of a topic is decoded for SQL."""

    column: str
    encoding: str
    schema_text: str

    def decode(self, col: Column, sf: ModuleType) -> Column:
        """``col`` decoded; ``sf`` is the session's functions module (:func:`deltalog.spark.functions`)."""
        if self.encoding == "string":
            return col.cast("string")
        if self.encoding == "json":
            return sf.from_json(col.cast("string"), parse_schema(self.schema_text), {"mode": "PERMISSIVE"})
        return col


def column_encodings(config: TopicConfig) -> tuple[ColumnEncoding, ColumnEncoding]:
    return (ColumnEncoding("key", config.key_encoding, config.key_schema),
            ColumnEncoding("value", config.value_encoding, config.value_schema))


def decoded_columns(spark: Any, config: TopicConfig, columns: Sequence[str]) -> list[Column]:
    """``columns`` as columns of ``spark``'s session, with ``key``/``value`` decoded per the topic's encodings."""
    sf = functions(spark)
    by_name = {e.column: e for e in column_encodings(config)}
    out = []
    for c in columns:
        enc = by_name.get(c)
        out.append(enc.decode(sf.col(c), sf).alias(c) if enc is not None else sf.col(c))
    return out
