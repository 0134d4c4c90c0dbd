"""Declared key/value encodings: refused at append when they do not match, typed columns in SQL."""

from __future__ import annotations

import json

import pytest

from deltalog import InvalidConfigError, InvalidRecordError, Record
from deltalog.schemas import parse_schema

SCHEMA = "price DOUBLE NOT NULL, currency STRING, tags ARRAY<STRING>, stock MAP<STRING, INT>, origin STRUCT<country: STRING>"
CONFIG = {"cleanup.policy": "compact", "key.encoding": "string", "value.encoding": "json", "value.schema": SCHEMA}


def test_ddl_and_spark_json_schemas_parse_to_the_same_struct():
    ddl = parse_schema("a INT, `b c` ARRAY<STRUCT<d: DECIMAL(5,2)>> NOT NULL")
    assert [f.name for f in ddl.fields] == ["a", "b c"] and not ddl.fields[1].nullable
    assert parse_schema(ddl.json()) == ddl


@pytest.mark.parametrize("config, words", [
    ({"value.encoding": "json"}, "needs value.schema"),
    ({"key.encoding": "avro"}, "bytes, string, json"),
    ({"value.encoding": "json", "value.schema": "a FOO"}, "unsupported type 'foo'"),
    ({"value.encoding": "json", "value.schema": "a BINARY"}, "BINARY"),
    ({"value.encoding": "json", "value.schema": "a INT, a STRING"}, "declared twice"),
])
def test_bad_encoding_configs_are_refused(store, config, words):
    with pytest.raises(InvalidConfigError, match=words):
        store.create_topic("t", config=config)
    assert not store.topic_exists("t")


@pytest.mark.parametrize("key, value, words", [
    ("apple", '{"price": "1.0"}', "field price must be a number"),
    ("apple", '{"currency": "EUR"}', "price is declared NOT NULL"),
    ("apple", '{"price": 1, "colour": "red"}', "colour is not in the schema"),
    ("apple", '{"price": 1, "stock": {"a": 1.5}}', "whole number"),
    ("apple", '{"price": NaN}', "not valid JSON"),
    ("apple", "[1, 2]", "must be an object"),
    ("apple", b"\xff\xfe", "not valid UTF-8"),
    (b"\xff", '{"price": 1}', "the key does not match key.encoding=string"),
])
def test_values_that_do_not_match_are_refused_and_nothing_is_written(store, key, value, words):
    store.create_topic("prices", config=CONFIG)
    store.append("prices", 0, [Record(key="pear", value='{"price": 2}')])
    with pytest.raises(InvalidRecordError, match=words):
        store.append("prices", 0, [Record(key="ok", value='{"price": 1}'), Record(key=key, value=value)])
    assert [r.key for r in store.read("prices", 0)] == ["pear"]  # the whole batch was refused


def test_matching_values_and_tombstones_are_accepted(store):
    store.create_topic("prices", config=CONFIG)
    value = json.dumps({"price": 1, "tags": ["red", None], "stock": {"x": 3}, "origin": {"country": "NZ"}})
    assert store.append("prices", 0, [Record(key="apple", value=value), Record(key="apple", value=None)]) == [0, 1]


def test_alter_topic_config_can_declare_an_encoding(store):
    store.create_topic("t")
    store.alter_topic_config("t", {"value.encoding": "string"})
    assert store.topic_config("t").value_encoding == "string"
    with pytest.raises(InvalidRecordError):
        store.append("t", 0, [Record(key=b"k", value=b"\xc3\x28")])


def test_sql_sees_typed_columns(spark_store):
    store = spark_store
    store.create_topic("fruit.prices-eu", config=CONFIG)
    store.append("fruit.prices-eu", 0, [
        Record(key="apple", value='{"price": 1.5, "currency": "EUR", "tags": ["red"]}'),
        Record(key="pear", value='{"price": 2}'),
        Record(key="apple", value='{"price": 1.75, "origin": {"country": "FR"}}'),
    ])
    df = store.sql("SELECT key, value.price AS price, value.origin.country AS country "
                   "FROM fruit_prices_eu_current ORDER BY key")
    assert dict(df.dtypes) == {"key": "string", "price": "double", "country": "string"}
    assert [tuple(r) for r in df.collect()] == [("apple", 1.75, "FR"), ("pear", 2.0, None)]


def test_reads_return_the_declared_types_and_bytes_on_request(store):
    """store.read gives what consume prints and SQL reads: str for string, the decoded JSON for json; bytes on a
    bytes topic and with decode=False; a record read can be appended again as it is."""
    store.create_topic("prices", config=CONFIG)
    store.create_topic("raw")
    store.append("prices", 0, [Record(key="lime", value='{"price": 0.49, "tags": ["green"]}'), Record("fig", None)])
    store.append("raw", 0, [Record(key="lime", value="0.49")])
    lime, fig = store.read("prices", 0)
    assert (lime.key, lime.value) == ("lime", {"price": 0.49, "tags": ["green"]}) and (fig.key, fig.value) == ("fig", None)
    assert lime.size_bytes == len(b'{"price":0.49,"tags":["green"]}') + 4
    assert [(r.key, r.value) for r in store.read("prices", 0, decode=False)] == [
        (b"lime", b'{"price": 0.49, "tags": ["green"]}'), (b"fig", None)]
    assert [(r.key, r.value) for r in store.read("raw", 0)] == [(b"lime", b"0.49")]
    store.append("prices", 0, store.read("prices", 0))
    assert [(r.offset, r.key, r.value) for r in store.read("prices", 0, 2)] == [
        (2, "lime", {"price": 0.49, "tags": ["green"]}), (3, "fig", None)]


def test_data_written_before_the_encoding_was_declared_reads_as_stored(store):
    store.create_topic("t", config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record(key=b"\xff", value=b"not json"), Record(key=b"k", value=b'{"a": 1}')])
    store.alter_topic_config("t", {"key.encoding": "string", "value.encoding": "json", "value.schema": "a INT"})
    assert [(r.key, r.value) for r in store.read("t", 0)] == [(b"\xff", b"not json"), ("k", {"a": 1})]


def test_records_read_with_json_values_are_hashable_and_hash_as_they_compare(store):
    """A decoded JSON value (a dict, a list) does not make its record unhashable: records read from a json topic go
    in a set or key a dict, and records that compare equal hash alike."""
    store.create_topic("prices", config=CONFIG)
    store.append("prices", 0, [Record(key="lime", value='{"price": 1, "tags": ["green", null]}'),
                               Record(key="lime", value='{"tags": ["green", null], "price": 1.0}')])
    first, second = store.read("prices", 0)
    again = store.read("prices", 0)
    assert isinstance(first.value, dict) and len({first, second, *again}) == 2
    assert {first: "seen"}[again[0]] == "seen"
    same_value = Record(key="lime", value=b"x", offset=1, timestamp_ms=second.timestamp_ms)
    object.__setattr__(same_value, "key", "lime")
    object.__setattr__(same_value, "value", {"price": 1, "tags": ["green", None]})  # 1 == 1.0, key order aside
    assert same_value == second and hash(same_value) == hash(second)
    assert hash(Record(b"k", b"v")) == hash(Record("k", "v"))  # bytes records as before
