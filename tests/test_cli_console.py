"""``deltalog produce`` and ``deltalog consume`` as Kafka's console tools are typed: the default partitioner,
``key<sep>value`` lines and Kafka's reader properties, errors that name the input line, every partition,
``--from-beginning``, ``--offset``, ``--max-messages``, Kafka's formatter properties, and ``--follow``."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import json_lines, run_cli

from deltalog import Record, Store
from deltalog.cli import main
from deltalog.producer.partitioner import partition_for_key

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def root(tmp_path) -> str:
    return str(tmp_path / "store")


def run(capsys, monkeypatch, *argv: str, stdin: str | None = None) -> tuple[int, str, str]:
    return run_cli(capsys, *argv, stdin=stdin, monkeypatch=monkeypatch)


def keys_values(store: Store, topic: str, partition: int) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r in store.read(topic, partition)]


# -- produce -------------------------------------------------------------------------------------------------


def test_produce_without_a_partition_uses_kafkas_partitioner(capsys, monkeypatch, root):
    Store(root).create_topic("fruit-prices", 2, config={"cleanup.policy": "compact"})
    stdin = "grape:2.69\nlime:0.49\ngrape:2.79\n"
    code, out, err = run(capsys, monkeypatch, "--store", root, "produce", "fruit-prices", "--property", "parse.key=true",
                         "--property", "key.separator=:", stdin=stdin)
    assert code == 0, err
    assert out == ("Produced 3 record(s) to fruit-prices: 1 to partition 0 at offsets 0, "
                   "2 to partition 1 at offsets 0-1\n")
    store = Store(root)
    assert keys_values(store, "fruit-prices", 1) == [(b"grape", b"2.69"), (b"grape", b"2.79")]  # as Kafka: grape -> 1
    assert keys_values(store, "fruit-prices", 0) == [(b"lime", b"0.49")]  # lime -> 0

    # JSON lines go through the same partitioner; a line's "partition" wins; -p wins over everything
    keys = [f"key-{i}" for i in range(40)]
    stdin = "".join(json.dumps({"key": k, "value": "v"}) + "\n" for k in keys)
    stdin += json.dumps({"key": "grape", "value": "pinned", "partition": 0}) + "\n"
    code, out, _ = run(capsys, monkeypatch, "--store", root, "produce", "--topic", "fruit-prices", "--output", "json",
                       stdin=stdin)
    got = json_lines(out)
    assert code == 0 and [g["partition"] for g in got] == [partition_for_key(k, 2) for k in keys] + [0]
    assert [g["line"] for g in got] == list(range(1, 42)) and all(g["topic"] == "fruit-prices" for g in got)
    assert keys_values(Store(root), "fruit-prices", 0)[-1] == (b"grape", b"pinned")
    code, out, _ = run(capsys, monkeypatch, "--store", root, "produce", "fruit-prices", "-p", "1", "--json",
                       stdin=json.dumps({"key": "lime", "value": "x", "partition": 0}) + "\n")
    assert code == 0 and json_lines(out)[0]["partition"] == 1


def test_produce_reads_kafka_console_lines(capsys, monkeypatch, root):
    store = Store(root)
    store.create_topic("t", 1)

    def produce(stdin: str, *props: str, code: int = 0) -> str:
        args = [a for p in props for a in ("--property", p)]
        got, out, err = run(capsys, monkeypatch, "--store", root, "produce", "t", *args, stdin=stdin)
        assert got == code, err
        return err

    produce("k1\tv1\tstill value\n", "parse.key=true")  # Kafka's default separator is a TAB; split at the first
    produce("plain value\n\n", "ignore.error=false")  # no parse.key: the line is the value, an empty line too
    produce("k2:NULL\nNULL:v3\n", "parse.key=true", "key.separator=:", "null.marker=NULL")  # a tombstone, a null key
    produce("h1:a,h2:b\tk4\tv4\n", "parse.key=true", "parse.headers=true")
    produce("no separator here\n", "parse.key=true", "ignore.error=true")
    assert [(r.key, r.value, r.headers) for r in store.read("t", 0)] == [
        (b"k1", b"v1\tstill value", ()),
        (None, b"plain value", ()),
        (None, b"", ()),
        (b"k2", None, ()),
        (None, b"v3", ()),
        (b"k4", b"v4", (("h1", b"a"), ("h2", b"b"))),
        (None, b"no separator here", ()),
    ]
    code, _, err = run(capsys, monkeypatch, "--store", root, "produce", "t", "--input", "text", stdin="a value\n")
    assert code == 0 and store.read("t", 0)[-1].value == b"a value"


@pytest.mark.parametrize(
    ("stdin", "argv", "code", "words"),
    [
        # a keyless record on input line 3 is named by its line (it was "record 0")
        ('{"key": "a", "value": "1"}\n\n{"value": "keyless"}\n', [], 1,
         ["stdin line 3 has no key", "compacted (cleanup.policy=compact)"]),
        ("a:1\nb:2\nno separator\n", ["--property", "parse.key=true", "--property", "key.separator=:"], 1,
         ["stdin line 3: No key separator found on line number 3: 'no separator'", "key.separator=':'"]),
        ("a:1\nb\n", ["--property", "key.separator=:"], 1,
         ["stdin line 1 has no key", "--property parse.key=true"]),
        ("k\t" + "x" * 200 + "\n", ["--property", "parse.key=true"], 1,
         ["stdin line 1 is 201 bytes, larger than max.message.bytes=100"]),
        ("h1\tk\tv\n", ["--property", "parse.key=true", "--property", "parse.headers=true"], 1,
         ["stdin line 1: No header key separator found in pair 'h1' on line number 1"]),
        ("k\tv\n", ["--property", "parse.key=true", "--property", "null.marker=\t"], 2,
         ["null.marker and key.separator may not be equal"]),
        ("k\tv\n", ["--property", "print.key=true"], 2,
         ["unknown reader property 'print.key'", "parse.key, key.separator"]),
        ("k\tv\n", ["--property", "parse.key=true", "--input", "json"], 2, ["does not apply to --input json"]),
        ('{"key": "a", "value": "1", "partition": 2}\n', [], 1,
         ["stdin line 1: partition 2 of topic 't' does not exist; partitions are 0..1"]),
        ('{"key": "a", "value": "1", "partition": -1}\n', [], 1, ["stdin line 1: 'partition' must be a whole number"]),
        ("", ["--topic", "other"], 2, ["give the topic once"]),
    ],
)
def test_bad_produce_input_names_the_line_and_writes_nothing(capsys, monkeypatch, root, stdin, argv, code, words):
    Store(root).create_topic("t", 2, config={"cleanup.policy": "compact", "max.message.bytes": 100})
    before = [log.snapshot().version for log in Store(root).logs("t")]
    got, out, err = run(capsys, monkeypatch, "--store", root, "produce", "t", *argv, stdin=stdin)
    assert got == code and "deltalog: error: " in err and "Traceback" not in err
    for w in words:
        assert w in err
    assert [log.snapshot().version for log in Store(root).logs("t")] == before


def test_produce_warns_about_a_separator_without_parse_key(capsys, monkeypatch, root):
    Store(root).create_topic("t", 1)
    code, _, err = run(capsys, monkeypatch, "--store", root, "produce", "t", "--property", "key.separator=:",
                       stdin="a:1\n")
    assert code == 0 and "key.separator is set but parse.key is not true" in err
    assert keys_values(Store(root), "t", 0) == [(None, b"a:1")]
    code, _, err = run(capsys, monkeypatch, "--store", root, "produce", stdin="")
    assert code == 2 and 'Missing required argument "[topic]"' in err


# -- consume -------------------------------------------------------------------------------------------------


@pytest.fixture
def fruit(root, clock) -> Store:
    """fruit-prices on 2 partitions: grape (partition 1) 2.69, 2.79; lime (partition 0) 0.49, then a tombstone."""
    store = Store(root, clock=clock)
    store.create_topic("fruit-prices", 2)
    store.produce("fruit-prices", [Record(key=b"grape", value=b"2.69", headers={"src": b"till"}),
                                   Record(key=b"lime", value=b"0.49"), Record(key=b"grape", value=b"2.79"),
                                   Record(key=b"lime", value=None)])
    return store


def consume(capsys, monkeypatch, root, *argv: str) -> tuple[int, str, str]:
    return run(capsys, monkeypatch, "--store", root, "consume", "fruit-prices", *argv)


def test_consume_reads_every_partition(capsys, monkeypatch, root, fruit, clock):
    code, out, err = consume(capsys, monkeypatch, root)
    got = json_lines(out)
    assert code == 0 and err == "Processed a total of 4 messages\n"
    assert sorted((g["partition"], g["offset"], g["key"], g["value"]) for g in got) == [
        (0, 0, "lime", "0.49"), (0, 1, "lime", None), (1, 0, "grape", "2.69"), (1, 1, "grape", "2.79")]
    assert got[0] == {"topic": "fruit-prices", "partition": 0, "offset": 0, "key": "lime", "value": "0.49",
                      "headers": [], "timestamp_ms": clock.now_ms(), "delete_horizon_ms": None}
    for argv in (["--from-beginning"], ["--offset", "earliest"], ["--from-offset", "EARLIEST"]):
        assert json_lines(consume(capsys, monkeypatch, root, *argv)[1]) == got
    code, out, _ = consume(capsys, monkeypatch, root, "-p", "1")
    assert [(g["partition"], g["offset"]) for g in json_lines(out)] == [(1, 0), (1, 1)]
    code, out, _ = consume(capsys, monkeypatch, root, "-p", "1", "--offset", "1")
    assert [(g["partition"], g["offset"]) for g in json_lines(out)] == [(1, 1)]
    code, out, err = consume(capsys, monkeypatch, root, "--offset", "latest")
    assert (code, out, err) == (0, "", "Processed a total of 0 messages\n")
    for flag in ("--max-messages", "--max-records"):
        code, out, err = consume(capsys, monkeypatch, root, flag, "3")
        assert len(json_lines(out)) == 3 and err == "Processed a total of 3 messages\n"


@pytest.mark.parametrize(
    ("argv", "code", "words"),
    [
        (["--offset", "1"], 2, ["The partition is required when offset is specified.", "2 partitions", "-p N"]),
        (["-p", "0", "--offset", "1", "--from-beginning"], 2,
         ["Options from-beginning and offset cannot be specified together."]),
        (["--offset", "-3"], 2, ["The provided offset value '-3' is incorrect."]),
        (["-p", "0", "--offset", "9"], 1, ["offset 9 is out of range for fruit-prices-0", "[0, 2]"]),
        (["-p", "2"], 1, ["Partition 2 of topic 'fruit-prices' does not exist"]),
        (["--property", "print.key=true", "--output", "json"], 2, ["does not apply to --output json"]),
        (["--property", "key.deserializer=x"], 2, ["'key.deserializer'", "raw bytes", "print.key"]),
        (["--property", "nonsense"], 2, ["unknown formatter property 'nonsense'"]),
    ],
)
def test_consume_usage_errors(capsys, monkeypatch, root, fruit, argv, code, words):
    got, out, err = consume(capsys, monkeypatch, root, *argv)
    assert (got, out) == (code, "") and err.startswith(("deltalog: error: ", "usage: ", '{"error": '))  # JSON: -o json
    for w in words:
        assert w in err


def test_consume_prints_as_kafkas_default_message_formatter(capsys, monkeypatch, root, fruit, clock):
    ts = clock.now_ms()

    def text(*props: str) -> str:
        args = [a for p in props for a in ("--property", p)]
        code, out, _ = consume(capsys, monkeypatch, root, "-p", "1", *args)
        assert code == 0
        return out

    assert text("print.value=true") == "2.69\n2.79\n"  # Kafka's default: the value only
    assert consume(capsys, monkeypatch, root, "-p", "1", "--output", "text")[1] == "2.69\n2.79\n"
    assert text("print.key=true") == "grape\t2.69\ngrape\t2.79\n"
    assert text("print.key=TRUE", "key.separator=:") == "grape:2.69\ngrape:2.79\n"
    assert text("print.timestamp=true", "print.partition=true", "print.offset=true", "print.key=true") == (
        f"CreateTime:{ts}\tPartition:1\tOffset:0\tgrape\t2.69\nCreateTime:{ts}\tPartition:1\tOffset:1\tgrape\t2.79\n")
    assert text("print.headers=true", "print.key=true", "print.value=false") == "src:till\tgrape\nNO_HEADERS\tgrape\n"
    assert text("print.offset=true", "print.delivery=true", "print.epoch=true", "line.separator=|") == (
        "Offset:0\tDelivery:NOT_PRESENT\tEpoch:NOT_PRESENT\t2.69|Offset:1\tDelivery:NOT_PRESENT\tEpoch:NOT_PRESENT\t2.79|")
    # a tombstone (and a null key) print null.literal
    code, out, _ = consume(capsys, monkeypatch, root, "-p", "0", "--property", "print.key=true")
    assert out == "lime\t0.49\nlime\tnull\n"
    code, out, _ = consume(capsys, monkeypatch, root, "-p", "0", "--property", "null.literal=<gone>")
    assert out == "0.49\n<gone>\n"


def test_consume_text_writes_raw_bytes(capsysbinary, root):
    store = Store(root)
    store.create_topic("bin", 1)
    store.produce("bin", [Record(key=b"\xff\x00", value=b"\x80\x81")])
    assert main(["--store", root, "consume", "bin", "--property", "print.key=true"]) == 0
    assert capsysbinary.readouterr().out == b"\xff\x00\t\x80\x81\n"


def test_follow_with_a_timeout_stops_after_an_idle_spell(capsys, monkeypatch, root, fruit):
    started = time.monotonic()
    code, out, err = consume(capsys, monkeypatch, root, "--follow", "--timeout-ms", "300", "--poll-interval-ms", "20")
    assert code == 0 and len(json_lines(out)) == 4 and time.monotonic() - started >= 0.3
    assert "no record for 300 ms" in err and err.endswith("Processed a total of 4 messages\n")
    code, out, _ = consume(capsys, monkeypatch, root, "--follow", "--max-messages", "2")  # ends at N records
    assert code == 0 and len(json_lines(out)) == 2


@pytest.mark.parametrize(("sig", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.subprocess
def test_follow_sees_records_produced_after_it_started_until_interrupted(root, fruit, sig, exit_code):
    """A consumer in its own process follows the topic; records produced after it printed the old ones arrive;
    Ctrl-C (or SIGTERM) ends it cleanly, with Kafka's exit code and summary line."""
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    consumer = subprocess.Popen(
        [sys.executable, "-c", "import sys; from deltalog.cli import main; sys.exit(main())", "--store", root,
         "consume", "fruit-prices", "--from-beginning", "--follow", "--poll-interval-ms", "50",
         "--property", "print.key=true", "--property", "print.partition=true"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in consumer.stdout], daemon=True)
    reader.start()

    def take(n: int) -> list[str]:
        return sorted(lines.get(timeout=60) for _ in range(n))

    try:
        old = take(4)  # the records already there: the consumer is up and polling
        fruit.produce("fruit-prices", [Record(key=b"grape", value=b"3.10"), Record(key=b"lime", value=b"0.55")])
        new = take(2)
        consumer.send_signal(sig)
        consumer.wait(timeout=60)
        reader.join(timeout=10)
        err = consumer.stderr.read()
    finally:
        if consumer.poll() is None:
            consumer.kill()
    assert old == ["Partition:0\tlime\t0.49\n", "Partition:0\tlime\tnull\n", "Partition:1\tgrape\t2.69\n",
                   "Partition:1\tgrape\t2.79\n"]
    assert new == ["Partition:0\tlime\t0.55\n", "Partition:1\tgrape\t3.10\n"]
    assert consumer.returncode == exit_code and lines.empty()
    assert err == "Processed a total of 6 messages\n"
