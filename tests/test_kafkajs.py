"""KafkaJS (npm ``kafkajs``: an independent Kafka client, its own protocol code in JavaScript) against the endpoint:
produce and consume in a group, transactions (aborted, committed, a group's offsets committed in one, fencing,
read_committed and read_uncommitted consumers), a transaction whose marker ends the partition (the consumer's lag reaches 0: it
steps past the marker's control batch), and a group whose committed offset fell below the log start (KafkaJS
commits -1/-2 on its reset, which the endpoint stores as Kafka does). Installed by tooling/services.py
``ensure_kafkajs`` (npm, once per machine)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from deltalog import Record, TopicPartition
from deltalog.server.socket_server import SocketServer

pytestmark = pytest.mark.subprocess

SCRIPT = Path(__file__).resolve().parent / "clients" / "kafkajs_checks.js"


@pytest.fixture(scope="module")
def node_path() -> str:
    from tooling.services import ensure_kafkajs

    return str(ensure_kafkajs())


def kafkajs(node_path: str, server: SocketServer, topic: str, scenario: str) -> dict:
    done = subprocess.run([shutil.which("node") or "node", str(SCRIPT), f"127.0.0.1:{server.port}", topic, scenario],
                          env={**os.environ, "NODE_PATH": node_path}, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, (done.stdout[-2000:], done.stderr[-2000:])
    out = json.loads(lines[-1])
    assert "error" not in out, out
    return out


def test_kafkajs_produces_consumes_in_a_group_and_the_next_member_resumes(store, node_path):
    store.create_topic("js", 1)
    with SocketServer(store, "127.0.0.1", 0) as server:
        out = kafkajs(node_path, server, "js", "produce-consume")
    assert out["sent"] == [0]
    assert out["seen"] == [[i, f"k{i}", f"v{i}"] for i in range(5)]
    assert out["lag"] == 0 and out["crashed"] is None
    assert out["resumed"] == [[5, "k5", "v5"], [6, "k6", "v6"]]  # a new member resumes at the group's commit
    assert [(r.offset, r.value) for r in store.read("js", 0)] == [(i, f"v{i}".encode()) for i in range(7)]


def test_kafkajs_steps_past_a_trailing_transaction_marker_and_long_polls(store, node_path):
    """The COMMIT marker ends the partition: KafkaJS passes it only over a control batch (given an empty batch it
    fetches the marker's offset again and again), then waits at the end in long polls (maxWaitTimeInMs 500)."""
    store.create_topic("jstx", 1)
    with SocketServer(store, "127.0.0.1", 0) as server:
        fetched: list[tuple[float, int]] = []
        try_fetch = server.apis.try_fetch

        def recording(request):
            fetched.extend((time.monotonic(), fp.fetch_offset) for t in request.body.topics if t.topic == "jstx"
                           for fp in t.partitions)
            return try_fetch(request)

        server.apis.try_fetch = recording
        out = kafkajs(node_path, server, "jstx", "transaction")
    assert out["seen"] == [[i, f"t{i}", f"tv{i}"] for i in range(3)] and out["crashed"] is None
    assert store.log("jstx", 0).head().log_end_offset == 4  # three records and the COMMIT marker
    assert fetched[-1][1] == 4  # past the marker
    at_end = [t for t, offset in fetched if offset == 4]
    assert len(at_end) / max(at_end[-1] - at_end[0], 0.5) < 5  # about 2 a second: each waits its 500 ms


def test_kafkajs_transactions_abort_commit_send_offsets_and_fence(store, node_path):
    """KafkaJS's transactional producer through the endpoint, checked with KafkaJS's consumers at both isolation
    levels and with the store itself: what the endpoint wrote is the store's transaction (markers, group offsets)."""
    store.create_topic("jstxs", 1)
    store.create_topic("jstxs-in", 1)
    store.append("jstxs-in", 0, [Record(f"i{i}".encode(), f"iv{i}".encode()) for i in range(3)])
    with SocketServer(store, "127.0.0.1", 0) as server:
        out = kafkajs(node_path, server, "jstxs", "transactions")
    # offsets: a0 a1 ABORT | c0 c1 c2 COMMIT | x0 COMMIT | o0 (fenced: ABORT)
    assert out["read_committed"] == [[3, "c0", "cv0"], [4, "c1", "cv1"], [5, "c2", "cv2"], [7, "x0", "xv0"]]
    assert out["crashed"] is None
    assert [m[1] for m in out["read_uncommitted"]] == ["a0", "a1", "c0", "c1", "c2", "x0", "o0"]
    assert out["etl_group_offsets"] == [2]
    assert out["fenced"] is not None and ("FENCED" in out["fenced"].upper() or "EPOCH" in out["fenced"].upper())
    committed = store.read("jstxs", 0, isolation_level="read_committed")
    assert [(r.offset, r.key) for r in committed] == [(3, b"c0"), (4, b"c1"), (5, b"c2"), (7, b"x0")]
    assert store.log("jstxs", 0).head().log_end_offset == 11  # the fenced transaction ended by its ABORT marker
    assert store.list_consumer_group_offsets("kafkajs-etl-group")[TopicPartition("jstxs-in", 0)].offset == 2


def test_kafkajs_resets_a_group_below_the_log_start_and_its_negative_commits_are_stored(store, node_path):
    store.create_topic("jsold", 1)
    store.append("jsold", 0, [Record(f"o{i}".encode(), f"ov{i}".encode()) for i in range(5)])
    store.delete_records("jsold", 0, 3)
    with SocketServer(store, "127.0.0.1", 0) as server:
        out = kafkajs(node_path, server, "jsold", "reset")
    assert out["crashed"] is None
    assert out["seen"] == [[3, "o3", "ov3"], [4, "o4", "ov4"]]
    assert out["reset_ms"] < 10_000 and out["committed_after_reset"] in ([-2], [-1], [3])
