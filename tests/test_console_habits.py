"""The console tools as Kafka's users type them: ``produce`` streams its input, kafka-topics' and kafka-configs'
flags, usage errors with the subcommand's usage and a suggestion for a misspelt command, ``--output`` anywhere,
``consume __consumer_offsets --formatter offsets``, and exit codes a scheduler can tell apart."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import json_lines, run_cli

from deltalog import Store
from deltalog.structs import TopicPartition


@pytest.fixture
def root(tmp_path) -> str:
    return str(tmp_path / "store")


class Lines:
    """Standard input that checks, as it is read, what the store already holds."""

    def __init__(self, root: str, n: int, check_at: int, bad_at: int | None = None) -> None:
        self.root, self.n, self.check_at, self.bad_at = root, n, check_at, bad_at
        self.seen: int | None = None

    def __iter__(self):
        for i in range(self.n):
            if i == self.check_at:
                self.seen = len(Store(self.root).read("t", 0))
            if i == self.bad_at:
                yield "{not json\n"
            else:
                yield json.dumps({"key": f"k{i}", "value": f"v{i}"}) + "\n"


def test_produce_commits_each_batch_while_it_reads(capsys, monkeypatch, root):
    Store(root, create=True).create_topic("t")
    stdin = Lines(root, 10, check_at=7)
    monkeypatch.setattr(sys, "stdin", stdin)
    code, out, err = run_cli(capsys, "--store", root, "produce", "t", "--batch-size", "3")
    assert code == 0, err
    assert stdin.seen == 6  # two batches of 3 were committed before the 8th line was read
    assert out == "Produced 10 record(s) to t-0 at offsets 0-9\n"
    assert len(Store(root).log("t", 0).snapshot().files) == 4


def test_a_bad_line_stops_the_stream_and_says_what_was_produced(capsys, monkeypatch, root):
    Store(root, create=True).create_topic("t")
    monkeypatch.setattr(sys, "stdin", Lines(root, 10, check_at=-1, bad_at=7))
    code, out, err = run_cli(capsys, "--store", root, "produce", "t", "--batch-size", "3", "--json")
    assert code == 1 and "stdin line 8" in err
    assert "the 6 record(s) before its batch were produced (partition 0 at offsets 0-5)" in err
    assert [g["offset"] for g in json_lines(out)] == list(range(6))  # emitted as each batch committed
    assert len(Store(root).read("t", 0)) == 6
    monkeypatch.setattr(sys, "stdin", Lines(root, 3, check_at=-1, bad_at=1))
    code, out, err = run_cli(capsys, "--store", root, "produce", "t")
    assert code == 1 and "stdin line 2" in err and "nothing was produced" in err


# -- kafka-topics' and kafka-configs' flags ----------------------------------------------------------------------


def test_kafka_topics_flags(capsys, root):
    def cli(*argv):
        return run_cli(capsys, "--store", root, *argv)

    code, out, err = cli("topics", "create", "--topic", "a", "--partitions", "2", "--replication-factor", "3",
                         "--bootstrap-server", "localhost:9092", "--config", "retention.ms=1000")
    assert code == 0, err
    assert cli("topics", "create", "a")[0] == 1
    code, out, _ = cli("topics", "create", "--topic", "a", "--if-not-exists")
    assert code == 0 and "already exists" in out and "nothing done" in out
    code, out, err = cli("topics", "alter", "--topic", "a", "--partitions", "4", "--delete-config", "retention.ms",
                         "-o", "json")
    got = json_lines(out)[0]
    assert code == 0 and got["partitions"] == 4 and got["changed"] == ["retention.ms"]
    assert got["config"]["retention.ms"] == "604800000"  # Kafka's default again
    code, out, err = cli("topics", "alter", "a", "--partitions", "3")
    assert code == 1 and "Topic currently has 4 partitions, which is higher than the requested 3." in err
    assert cli("topics", "alter", "nope", "--partitions", "3", "--if-exists")[0] == 0
    assert cli("topics", "delete", "--topic", "nope", "--yes", "--if-exists")[0] == 0
    assert cli("topics", "delete", "--topic", "nope", "--yes")[0] == 1
    code, out, err = cli("topics", "describe", "a", "--topic", "b")
    assert code == 2 and "two topics given" in err
    assert Store(root).partitions("a") == [0, 1, 2, 3]


def test_kafka_topics_action_flags_name_the_subcommand(capsys, root):
    """kafka-topics.sh's shape: the action is a flag, anywhere among the others."""
    def cli(*argv):
        return run_cli(capsys, "--store", root, *argv)

    assert cli("topics", "--create", "--topic", "k", "--partitions", "2")[0] == 0
    assert cli("topics", "--topic", "k", "--create", "--if-not-exists")[0] == 0
    code, out, _ = cli("topics", "--list")
    assert code == 0 and "k" in out.split()
    assert cli("topics", "--alter", "--topic", "k", "--partitions", "3")[0] == 0
    code, out, _ = cli("topics", "--describe", "--topic", "k", "-o", "json")
    assert code == 0 and Store(root).partitions("k") == [0, 1, 2]
    assert cli("topics", "--delete", "--topic", "k", "--yes")[0] == 0
    assert not Store(root).topic_exists("k")


def test_usage_errors_show_the_subcommands_usage_and_suggest_a_command(capsys, root):
    code, out, err = run_cli(capsys, "--store", root, "topics", "alter", "--topic", "a")
    assert code == 2
    assert err.startswith("usage: deltalog topics alter") and "--delete-config" in err
    assert err.rstrip().endswith("give what to change: --config KEY=VALUE, --delete-config KEY or --partitions N")
    code, out, err = run_cli(capsys, "topcis", "list")
    assert code == 2 and "did you mean 'topics'?" in err
    code, out, err = run_cli(capsys, "consumer-groups", "--lsit")
    assert code == 2 and "usage: deltalog consumer-groups" in err
    code, out, err = run_cli(capsys, "topics", "lsit")
    assert code == 2 and "did you mean 'list'?" in err


def test_output_json_before_or_after_the_command(capsys, root):
    Store(root, create=True).create_topic("t", 2)
    for argv in (["-o", "json", "topics", "list"], ["--output", "json", "topics", "list"],
                 ["topics", "list", "-o", "json"], ["--json", "topics", "list"], ["topics", "list", "--json"]):
        code, out, err = run_cli(capsys, "--store", root, *argv)
        assert (code, json_lines(out)) == (0, [{"topic": "t", "partitions": 2}]), argv
    code, out, _ = run_cli(capsys, "--store", root, "-o", "json", "topics", "list", "-o", "text")
    assert out == "t\n"  # the one after the command wins


def test_consume_consumer_offsets_with_kafkas_offsets_formatter(capsys, root):
    store = Store(root, create=True)
    store.create_topic("orders", 1)
    store.alter_consumer_group_offsets("billing", {TopicPartition("orders", 0): 42})
    store.delete_consumer_groups(["billing"])
    code, out, err = run_cli(capsys, "--store", root, "consume", "__consumer_offsets", "--from-beginning",
                             "--formatter", "offsets")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    key = {"version": 1, "data": {"group": "billing", "topic": "orders", "partition": 0}}
    assert lines[0]["key"] == key and lines[0]["value"]["version"] == 3
    assert {k: v for k, v in lines[0]["value"]["data"].items() if k != "commitTimestamp"} == \
        {"offset": 42, "leaderEpoch": -1, "metadata": ""}
    assert lines[1] == {"key": key, "value": None}  # the delete's tombstone
    code, out2, _ = run_cli(capsys, "--store", root, "consume", "__consumer_offsets", "--from-beginning",
                            "--formatter", "org.apache.kafka.tools.consumer.OffsetsMessageFormatter")
    assert out2 == out


def test_format_offset_record_skips_group_metadata_and_names_unknown_bytes():
    from deltalog.cli.offsets_formatter import format_offset_record

    assert format_offset_record(b"\x00\x02\x00\x01g", b"\x00\x03whatever") is None  # a GroupMetadataKey
    assert json.loads(format_offset_record(b"\x00\x01\xff", b"\x00\x09")) == \
        {"key": {"version": 1, "data": "unknown"}, "value": {"version": 9, "data": "unknown"}}
