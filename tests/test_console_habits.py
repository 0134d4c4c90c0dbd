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
