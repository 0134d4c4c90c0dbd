"""JSON values end to end, as a user runs the CLI (each command a process): on a topic declared
``value.encoding=json`` with a ``value.schema``, ``produce`` takes JSON objects and checks them against the schema,
``consume`` prints them as objects, and ``deltalog sql`` answers JSON functions on them; on a ``bytes`` topic a JSON
function on the BLOB value is refused with the fix instead of answering NULL on every row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parent.parent


def cli(store: Path, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DELTALOG_STORE", None)
    return subprocess.run([sys.executable, "-m", "deltalog", "--store", str(store), *argv], input=stdin,
                          capture_output=True, text=True, env=env, cwd=store.parent, timeout=300)


@pytest.fixture
def store(tmp_path) -> Path:
    root = tmp_path / "store"
    done = cli(root, "topics", "create", "orders", "--config", "value.encoding=json", "--config",
               "value.schema=id INT NOT NULL, status STRING, total DOUBLE", "--config", "key.encoding=string")
    assert done.returncode == 0, done.stderr
    done = cli(root, "topics", "create", "raw")
    assert done.returncode == 0, done.stderr
    return root


def test_json_objects_in_and_out(store):
    lines = [{"key": "7", "value": {"id": 7, "status": "paid", "total": 12.5}},
             {"key": "8", "value": "{\"id\": 8, \"status\": \"new\"}"},  # the escaped text still works
             {"key": "7", "value": None}]
    done = cli(store, "produce", "orders", stdin="".join(json.dumps(x) + "\n" for x in lines))
    assert done.returncode == 0, done.stderr
    done = cli(store, "consume", "orders", "--from-beginning", "-o", "json")
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["key"], r["value"]) for r in got] == [
        ("7", {"id": 7, "status": "paid", "total": 12.5}), ("8", {"id": 8, "status": "new"}), ("7", None)]
    # what consume prints goes back into produce as it is
    again = cli(store, "produce", "orders", stdin=done.stdout)
    assert again.returncode == 0, again.stderr


def test_an_object_that_does_not_match_the_schema_is_refused(store):
    done = cli(store, "produce", "orders", stdin=json.dumps({"key": "9", "value": {"id": "nine"}}) + "\n")
    assert done.returncode == 1
    assert "field id must be a whole number (INT)" in done.stderr and "nothing was produced" in done.stderr
    done = cli(store, "produce", "orders", stdin=json.dumps({"key": "9", "value": {"id": 9, "colour": "red"}}) + "\n")
    assert done.returncode == 1 and "colour is not in the schema" in done.stderr


def test_an_object_on_a_bytes_topic_names_the_encoding_to_declare(store):
    done = cli(store, "produce", "raw", stdin=json.dumps({"key": "a", "value": {"status": "ok"}}) + "\n")
    assert done.returncode == 1
    assert "value.encoding=json" in done.stderr


def test_sql_json_functions_on_json_and_bytes_topics(store):
    assert cli(store, "produce", "orders", stdin=json.dumps({"key": "7", "value": {"id": 7, "status": "paid"}}) +
               "\n").returncode == 0
    assert cli(store, "produce", "raw", stdin=json.dumps({"key": "a", "value": "{\"status\": \"ok\"}"}) +
               "\n").returncode == 0
    done = cli(store, "-o", "json", "sql", "SELECT json_extract_string(value, '$.status') AS s FROM orders")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["s"] for line in done.stdout.splitlines()] == ["paid"]
    done = cli(store, "sql", "SELECT json_extract_string(value, '$.status') AS s FROM raw")
    assert done.returncode == 1
    assert "reads a BLOB" in done.stderr and "decode(value)" in done.stderr
    done = cli(store, "-o", "json", "sql", "SELECT json_extract_string(decode(value), '$.status') AS s FROM raw")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["s"] for line in done.stdout.splitlines()] == ["ok"]
