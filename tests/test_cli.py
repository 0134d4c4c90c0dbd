"""The ``deltalog`` command line, end to end through ``main([...])`` and once through the real console script."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import json_lines, run_cli

from deltalog import Record, Store
from deltalog.cli.demo_walkthrough import MARKER, run_demo
from deltalog.errors import DemoStoreError
from deltalog.storage import Storage


@pytest.fixture
def root(tmp_path) -> str:
    return str(tmp_path / "store")


run = run_cli


# -- usage -------------------------------------------------------------------------------------------


def test_help_and_usage_errors(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "topics" in out and "produce" in out and "doctor" in out
    code, out, _ = run(capsys, "topics", "create", "--help")
    assert code == 0 and "--partitions" in out and "segment.ms" in out
    code, _, err = run(capsys)
    assert code == 2 and "usage" in err
    code, _, err = run(capsys, "frobnicate")
    assert code == 2 and "invalid choice" in err
    code, _, err = run(capsys, "--config", "nonsense", "list")
    assert code == 2 and "KEY=VALUE" in err
    code, _, err = run(capsys, "consume", "t", "--from-offset", "soon")
    assert code == 2 and "Valid values are 'earliest', 'latest', or a non-negative long" in err
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("deltalog ")


def test_read_only_commands_do_not_create_a_store(capsys, tmp_path):
    missing = str(tmp_path / "typo")
    for argv in (["list"], ["describe"], ["consume", "t"]):
        code, _, err = run(capsys, "--store", missing, *argv)
        assert code == 1 and err.startswith("deltalog: error: no deltalog store at")
        assert "Traceback" not in err
    assert not os.path.exists(missing)


# -- topics ------------------------------------------------------------------------------------------


def test_topic_lifecycle(capsys, root):
    code, out, _ = run(capsys, "--store", root, "topics", "create", "prices", "-p", "2",
                       "--config", "cleanup.policy=compact", "--config", "segment.ms=1000")
    assert code == 0 and "Created topic prices with 2 partition(s)" in out
    assert Store(root).topic_config("prices").segment_ms == 1000

    code, out, _ = run(capsys, "create", "other", "--store", root)  # top-level alias, --store after the command
    assert code == 0
    code, out, _ = run(capsys, "--store", root, "topics", "list")
    assert (code, out) == (0, "other\nprices\n")
    code, out, _ = run(capsys, "--store", root, "list", "--json")
    assert json_lines(out) == [{"topic": "other", "partitions": 1}, {"topic": "prices", "partitions": 2}]

    code, out, _ = run(capsys, "--store", root, "alter", "prices", "--config", "min.cleanable.dirty.ratio=0.2")
    assert code == 0 and "min.cleanable.dirty.ratio changed" in out
    assert Store(root).topic_config("prices").min_cleanable_dirty_ratio == 0.2
    assert Store(root).topic_config("prices").segment_ms == 1000  # others keep their values

    code, out, _ = run(capsys, "--store", root, "topics", "describe", "prices", "--json")
    (d,) = json_lines(out)
    assert d["topic"] == "prices" and d["config"]["min.cleanable.dirty.ratio"] == "0.2"
    assert [p["partition"] for p in d["partitions"]] == [0, 1]
    assert {"log_start_offset", "log_end_offset", "segments", "dirty_ratio", "first_dirty_offset"} <= set(d["partitions"][0])

    code, out, _ = run(capsys, "--store", root, "describe", "prices")
    assert code == 0 and "prices-1" in out and "dirty ratio" in out and "segment.ms" in out

    code, _, err = run(capsys, "--store", root, "topics", "delete", "other")
    assert code == 2 and "--yes" in err
    assert "other" in Store(root).list_topics()
    code, out, _ = run(capsys, "--store", root, "topics", "delete", "other", "--yes")
    assert code == 0 and Store(root).list_topics() == ["prices"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["create", "a/b"], ["'a/b' is illegal"]),
        (["create", "prices"], ["'prices' already exists"]),
        (["create", "x", "--config", "segment.bytes=1"], ["segment.bytes", "[14,"]),
        (["create", "x", "--config", "colour=blue"], ["Unknown topic config 'colour'"]),
        (["create", "x", "-p", "0"], ["partitions"]),
        (["alter", "prices", "--config", "cleanup.policy=shred"], ["cleanup.policy", "'shred'"]),
        (["alter", "nope", "--config", "segment.ms=5"], ["'nope' does not exist"]),
        (["describe", "nope"], ["'nope' does not exist"]),
        (["--config", "log.cleaner.threads=0", "list"], ["log.cleaner.threads"]),
    ],
)
def test_errors_are_one_line_exit_1_and_change_nothing(capsys, root, argv, words):
    Store(root).create_topic("prices")
    before = Store(root).log("prices", 0).snapshot().version
    code, out, err = run(capsys, "--store", root, *argv)
    assert code == 1, err
    assert err.startswith("deltalog: error: ") and err.count("\n") == 1 and "Traceback" not in err
    for w in words:
        assert w in err
    assert Store(root).list_topics() == ["prices"]
    assert Store(root).log("prices", 0).snapshot().version == before


# -- produce and consume -------------------------------------------------------------------------------


def test_produce_from_a_file_and_consume(capsys, root, tmp_path):
    Store(root).create_topic("prices", partitions=2, config={"cleanup.policy": "compact"})
    lines = [
        {"key": "grape", "value": "2.69", "timestamp_ms": 1000},
        {"key": "lime", "value": "0.49", "headers": {"source": "till", "empty": None}, "timestamp_ms": 1001},
        {"key": "grape", "value": None, "timestamp_ms": 1002},
        {"key_b64": base64.b64encode(b"\xff\x00").decode(), "value_b64": base64.b64encode(b"\x80bin").decode(),
         "headers": [["raw", {"b64": base64.b64encode(b"\xfe").decode()}], ["raw", "again"]], "timestamp_ms": 1003},
        {"key": "caf\u00e9", "value": "\u00e9t\u00e9"},
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n", encoding="utf-8")
    code, out, _ = run(capsys, "--store", root, "produce", "prices", "-p", "1", "--file", str(path))
    assert code == 0 and "Produced 5 record(s) to prices-1 at offsets 0-4" in out

    records = Store(root).read("prices", 1)
    assert records[3].key == b"\xff\x00" and records[3].value == b"\x80bin"
    assert records[3].headers == (("raw", b"\xfe"), ("raw", b"again"))
    assert records[1].headers == (("source", b"till"), ("empty", None))
    assert records[2].value is None and records[4].key == "caf\u00e9".encode()

    code, out, _ = run(capsys, "--store", root, "consume", "prices", "-p", "1")
    got = json_lines(out)
    assert [g["offset"] for g in got] == [0, 1, 2, 3, 4]
    assert got[0] == {"topic": "prices", "partition": 1, "offset": 0, "key": "grape", "value": "2.69", "headers": [],
                      "timestamp_ms": 1000, "delete_horizon_ms": None}
    assert got[1]["headers"] == [["source", "till"], ["empty", None]]
    assert got[2]["value"] is None
    assert got[3]["key_b64"] == base64.b64encode(b"\xff\x00").decode() and "key" not in got[3]
    assert got[3]["value_b64"] == base64.b64encode(b"\x80bin").decode()
    assert got[3]["headers"] == [["raw", {"b64": base64.b64encode(b"\xfe").decode()}], ["raw", "again"]]
    assert got[4]["key"] == "caf\u00e9"

    # consume output goes back into produce unchanged (offsets are reassigned by the log; -p overrides the
    # "partition" each line carries)
    (tmp_path / "copy.jsonl").write_text(out, encoding="utf-8")
    code, out2, _ = run(capsys, "--store", root, "produce", "prices", "-p", "0", "-f", str(tmp_path / "copy.jsonl"))
    assert code == 0
    copy = Store(root).read("prices", 0)
    assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in copy] == \
        [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]


def test_produce_from_stdin_and_consume_positions(capsys, root, monkeypatch):
    Store(root).create_topic("t")
    stdin = "".join(json.dumps({"key": f"k{i}", "value": f"v{i}"}) + "\n" for i in range(7))
    code, out, _ = run(capsys, "--store", root, "produce", "t", "--batch-size", "3", "--json",
                       stdin=stdin, monkeypatch=monkeypatch)
    assert code == 0
    assert [(g["topic"], g["partition"], g["offset"], g["line"]) for g in json_lines(out)] == \
        [("t", 0, i, i + 1) for i in range(7)]
    assert len(Store(root).log("t", 0).snapshot().files) == 3  # batches of 3, 3, 1

    def consume(*extra):
        code, out, err = run(capsys, "--store", root, "consume", "t", *extra)
        assert code == 0, err
        return [g["offset"] for g in json_lines(out)]

    assert consume() == list(range(7))
    assert consume("--from-offset", "earliest", "--max-records", "2") == [0, 1]
    assert consume("--from-offset", "5") == [5, 6]
    assert consume("--from-offset", "latest") == []
    assert consume("--from-offset", "1", "--max-records", "4", "--page-size", "3") == [1, 2, 3, 4]
    assert consume("--page-size", "2") == list(range(7))
    assert consume("--max-records", "0") == []
    code, _, err = run(capsys, "--store", root, "consume", "t", "--from-offset", "8")
    assert code == 1 and "offset 8 is out of range" in err and "[0, 7]" in err


def test_store_from_the_environment(capsys, root, monkeypatch):
    monkeypatch.setenv("DELTALOG_STORE", root)
    code, _, _ = run(capsys, "create", "t")
    assert code == 0 and Store(root).list_topics() == ["t"]


@pytest.mark.parametrize(
    ("stdin", "words"),
    [
        ('{"key": "a", "value": "1"}\n{"key": "b", "value": "2"\n', ["stdin line 2", "not valid JSON"]),
        ('{"key": "a", "value": "1"}\n{"key": "b", "vlaue": "2"}\n', ["stdin line 2", "'vlaue'"]),
        ('{"key": "a"}\n', ["stdin line 1", "no 'value' field"]),
        ('{"key": "a", "value": 3}\n', ["'value' must be a string or null"]),
        ('{"key": "a", "value": "1", "value_b64": "MQ=="}\n', ["not both"]),
        ('{"key": "a", "value_b64": "***"}\n', ["value_b64", "not valid base64"]),
        ('{"key": "a", "value": "1", "timestamp_ms": -5}\n', ["timestamp_ms"]),
        ('{"key": "a", "value": "1", "headers": [["h"]]}\n', ["header", "pair"]),
        ('["a", "1"]\n', ["expected a JSON object"]),
        ('{"key": "a", "value": "1"}\n{"value": "keyless"}\n', ["stdin line 2 has no key", "compact"]),
        ('{"key": "a", "value": "' + "x" * 200 + '"}\n', ["max.message.bytes=100"]),
    ],
)
def test_bad_produce_input_writes_nothing(capsys, root, monkeypatch, stdin, words):
    Store(root).create_topic("t", config={"cleanup.policy": "compact", "max.message.bytes": 100})
    before = Store(root).log("t", 0).snapshot()
    code, out, err = run(capsys, "--store", root, "produce", "t", stdin=stdin, monkeypatch=monkeypatch)
    assert code == 1 and err.startswith("deltalog: error: ") and "Traceback" not in err
    for w in words:
        assert w in err
    after = Store(root).log("t", 0).snapshot()
    assert (after.version, after.files) == (before.version, before.files)
    assert sorted(os.listdir(Store(root).log("t", 0).uri)) == ["_delta_log"]


def test_produce_to_a_missing_partition(capsys, root, monkeypatch):
    Store(root).create_topic("t", partitions=2)
    code, _, err = run(capsys, "--store", root, "produce", "t", "-p", "2", stdin='{"key":"a","value":"b"}\n',
                       monkeypatch=monkeypatch)
    assert code == 1 and "Partition 2 of topic 't' does not exist" in err


# -- demo ------------------------------------------------------------------------------------------------


def test_demo_replays_the_seed_000_walkthrough_with_two_real_cleans(tmp_path, spark):
    lines: list[str] = []
    result = run_demo(tmp_path / "demo", out=lines.append)
    text = "\n".join(lines)
    assert result.offsets == tuple(range(9))
    state = result.before[0]
    assert [(s.base_offset, s.is_active) for s in state.segments] == [(0, False), (4, True)]
    assert state.dirty_ratio == 1.0 and state.eligible_for_cleaning
    after = result.after[0]
    assert after.dirty_ratio == 0.0 and after.first_dirty_offset == 4 and after.num_records == 3
    records = result.store.read("fruit-prices", 0)
    assert [(r.offset, r.key, r.value) for r in records] == [
        (4, b"lime", b"1.99"), (6, b"guava", b"1.20"), (7, b"kiwi", b"0.40"), (8, b"guava", b"1.25")]
    assert "(tombstone)" in text and "dirty ratio 1.00" in text and "size reduction" in text
    assert result.store.topic_config("fruit-prices").compact


def test_demo_command_wipes_only_demo_stores(capsys, tmp_path, spark):
    demo = tmp_path / "demo"
    code, out, _ = run(capsys, "demo", "--store", str(demo))
    assert code == 0 and "fruit-prices-0" in out and (demo / MARKER).exists()
    Store(demo).append("fruit-prices", 0, [Record(key=b"extra", value=b"1")])
    code, out, _ = run(capsys, "demo", "--store", str(demo))  # again: a fresh store, same offsets
    assert code == 0 and [r.offset for r in Store(demo).read("fruit-prices", 0)] == [4, 6, 7, 8]

    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data.txt").write_text("keep me")
    code, _, err = run(capsys, "--store", str(precious), "demo")
    assert code == 1 and "not a demo store" in err
    assert (precious / "data.txt").read_text() == "keep me"


def test_the_demo_store_on_s3_is_wiped_only_when_it_is_one(s3_server, s3_store_uri, clock):
    """The demo's fresh store on S3 (its cleaning passes are those of tests/test_object_store_cleaning.py)."""
    from deltalog.cli.demo_walkthrough import fresh_demo_store

    options = s3_server.storage_options
    store = fresh_demo_store(s3_store_uri, clock, storage_options=options)
    store.create_topic("fruit-prices", 1)
    store.append("fruit-prices", 0, [Record(key=b"extra", value=b"1")])
    again = fresh_demo_store(s3_store_uri, clock, storage_options=options)  # wiped: an empty store again
    assert again.list_topics() == [] and again.storage.exists(again.storage.location(MARKER))

    precious = Storage(f"{s3_store_uri}-precious", options)
    precious.write_bytes(precious.location("data.txt"), b"keep me")
    with pytest.raises(DemoStoreError, match="not a demo store"):
        fresh_demo_store(precious.root, clock, storage_options=options)
    assert precious.read_bytes(precious.location("data.txt")) == b"keep me"


# -- doctor ------------------------------------------------------------------------------------------


def test_doctor_probes_a_store_on_s3(s3_server, s3_store_uri):
    from deltalog.cli.doctor_checks import FAIL, OK, check_store_writable

    check = check_store_writable(s3_store_uri, s3_server.storage_options)
    assert check.status == OK and "conditionally created" in check.detail, check.detail
    assert Storage(s3_store_uri, s3_server.storage_options).list_files(s3_store_uri) == []  # nothing left behind
    check = check_store_writable("s3://no-such-bucket-here/store", s3_server.storage_options)
    assert check.status == FAIL and "cannot write" in check.detail and "bucket" in check.detail.lower()
    assert check_store_writable("ftp://host/store").status == FAIL


def test_doctor_finds_the_cleaners_code_in_spark_python_workers(spark):
    from deltalog.cli.doctor_checks import OK, check_spark_workers

    check = check_spark_workers(spark)
    assert (check.name, check.status) == ("spark workers", OK), check.detail


def test_doctor_finds_a_runtime_pyspark_that_is_no_distribution(spark, monkeypatch):
    """Databricks Runtime puts pyspark on the path without distribution metadata: not "not installed"."""
    import pyspark

    from deltalog.cli import doctor_checks as doctor

    real = doctor.package_version
    monkeypatch.setattr(doctor, "package_version", lambda name: None if name == "pyspark" else real(name))
    check, _ = doctor.check_spark()
    assert check.status == doctor.OK and check.detail.startswith(f"pyspark {pyspark.__version__}:"), check.detail


@pytest.mark.subprocess
def test_doctor_without_spark(capsys, root):
    code, out, _ = run(capsys, "--store", root, "doctor", "--no-spark", "--json")
    report = json.loads(out)
    by_name = {c["name"]: c for c in report["checks"]}
    assert code == 0 and report["ok"] is True
    assert by_name["java"]["status"] == "OK" and by_name["java"]["detail"].startswith("Java ")
    assert by_name["deltalake"]["status"] == "OK" and "created, wrote and read" in by_name["deltalake"]["detail"]
    assert by_name["pandas"]["status"] == "OK"
    assert by_name["spark"]["status"] == "INFO"
    assert by_name["store"]["status"] == "OK"
    assert not os.path.exists(root)  # doctor only probes


@pytest.mark.subprocess
def test_doctor_finds_an_unwritable_store(capsys, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, out, _ = run(capsys, "--store", str(a_file / "store"), "doctor", "--no-spark")
    assert code == 1 and "FAIL" in out and "To fix:" in out and "--store" in out


def test_doctor_version_rules():
    from deltalog.cli import doctor_checks as doctor

    assert doctor.java_major('openjdk version "17.0.15" 2025-04-15') == 17
    assert doctor.java_major('java version "1.8.0_392"') == 8
    assert doctor.java_major('openjdk version "21" 2023-09-19') == 21
    warn = doctor.check_package("pandas", below_major=2, why="too new")  # pandas 2.x installed
    assert warn.status == doctor.WARN and "pandas<2" in warn.fix
    assert doctor.check_package("no-such-distribution-xyz").status == doctor.FAIL
    assert doctor.check_package("no-such-distribution-xyz", needed=False).status == doctor.INFO


@pytest.mark.slow
@pytest.mark.subprocess
def test_doctor_starts_spark_and_runs_a_job(capsys, root, spark):
    from deltalog.cli import doctor_checks as doctor

    checks = {c.name: c for c in doctor.run_checks(root)}
    assert checks["spark"].status == doctor.OK and "ran a job" in checks["spark"].detail
    assert checks["delta-spark"].status == doctor.INFO and "not needed" in checks["delta-spark"].detail
    code, out, _ = run(capsys, "--store", root, "doctor")
    assert code == 0 and "Ready" in out


# -- the real console script ---------------------------------------------------------------------------


@pytest.mark.subprocess
def test_console_script_end_to_end(tmp_path):
    exe = shutil.which("deltalog") or os.path.join(os.path.dirname(sys.executable), "deltalog")
    env = {**os.environ, "DELTALOG_STORE": str(tmp_path / "s")}

    def sh(*argv, stdin=None):
        return subprocess.run([exe, *argv], input=stdin, capture_output=True, text=True, env=env, timeout=120)

    p = sh("topics", "create", "fruit-prices", "--config", "cleanup.policy=compact")
    assert p.returncode == 0, p.stderr
    p = sh("produce", "fruit-prices", stdin='{"key": "grape", "value": "2.69"}\n{"key": "grape", "value": null}\n')
    assert p.returncode == 0 and "offsets 0-1" in p.stdout, p.stderr
    p = sh("consume", "fruit-prices", "--from-offset", "1")
    assert p.returncode == 0 and [json.loads(x)["value"] for x in p.stdout.splitlines()] == [None]
    p = sh("produce", "fruit-prices", stdin='{"value": "no key"}\n')
    assert p.returncode == 1 and p.stderr.startswith("deltalog: error: stdin line 1 has no key")
    assert "Traceback" not in p.stderr
    p = sh("topics", "create")
    assert p.returncode == 2 and "usage:" in p.stderr


# -- a store on S3 ---------------------------------------------------------------------------------------


def test_the_cli_on_a_store_on_s3(capsys, s3_server, s3_store_uri, monkeypatch):
    """``--store s3://...`` with the endpoint and credentials in the standard environment variables."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    code, _, err = run(capsys, "--store", s3_store_uri, "topics", "list")
    assert code == 1 and err.startswith(f"deltalog: error: no deltalog store at {s3_store_uri}")
    assert Storage(s3_store_uri).list_files(s3_store_uri) == []  # a read-only command never creates a store

    code, out, err = run(capsys, "--store", s3_store_uri, "topics", "create", "prices", "-p", "2",
                         "--config", "cleanup.policy=compact")
    assert code == 0, err
    code, out, err = run(capsys, "--store", s3_store_uri, "produce", "prices", "-p", "1", monkeypatch=monkeypatch,
                         stdin='{"key": "grape", "value": "2.69"}\n{"key": "grape", "value": null}\n')
    assert code == 0 and "offsets 0-1" in out, err
    code, out, _ = run(capsys, "--store", s3_store_uri, "consume", "prices", "-p", "1", "--from-offset", "earliest")
    assert [json.loads(line)["value"] for line in out.splitlines()] == ["2.69", None]
    code, out, _ = run(capsys, "--store", s3_store_uri, "describe", "prices", "--json")
    assert code == 0 and json.loads(out)["partitions"][1]["log_end_offset"] == 2
    code, out, _ = run(capsys, "--store", s3_store_uri, "topics", "delete", "prices", "--yes")
    assert code == 0
    code, out, _ = run(capsys, "--store", s3_store_uri, "topics", "list")
    assert (code, out) == (0, "")


def test_storage_options_on_the_command_line(capsys, s3_server, s3_store_uri, monkeypatch):
    for name in s3_server.env:
        monkeypatch.delenv(name, raising=False)
    options = [arg for key, value in s3_server.storage_options.items() for arg in ("--storage-option", f"{key}={value}")]
    code, _, err = run(capsys, "--store", s3_store_uri, *options, "create", "t")
    assert code == 0, err
    code, out, err = run(capsys, "list", "--store", s3_store_uri, *options)  # after the command too
    assert (code, out) == (0, "t\n"), err
    assert Store(s3_store_uri, storage_options=s3_server.storage_options).list_topics() == ["t"]
    code, _, err = run(capsys, "--store", s3_store_uri, "--storage-option", "nonsense", "list")
    assert code == 2 and "KEY=VALUE" in err


def test_the_console_script_on_s3(s3_server, s3_store_uri):
    exe = shutil.which("deltalog") or os.path.join(os.path.dirname(sys.executable), "deltalog")
    env = {**os.environ, **s3_server.env, "DELTALOG_STORE": s3_store_uri}
    p = subprocess.run([exe, "topics", "create", "t"], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([exe, "produce", "t"], input='{"key": "k", "value": "v"}\n', capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0 and "at offsets 0" in p.stdout, p.stderr
    assert not os.path.exists("s3:")  # no local directory named after the scheme
    assert Store(s3_store_uri, storage_options=s3_server.storage_options).read("t", 0)[0].value == b"v"
