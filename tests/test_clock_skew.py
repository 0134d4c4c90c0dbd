"""Writers whose clocks disagree: time travel and history on commit times made monotonic as Delta's
DeltaHistoryManager makes them (a commit's time is ``max(its own, the previous commit's + 1 ms)``).

A commit's ``timestamp`` in ``_delta_log`` is its writer's clock. Two ways to get a writer whose clock is wrong: a
commit rewritten as such a writer would have stamped it (always here), and a real writer process whose clock runs
behind under libfaketime (Debian's ``faketime``, installed by ``tooling.services.ensure_libfaketime``), which is how a skewed host commits
through delta-rs (delta-rs takes the commit info's ``timestamp`` from the system clock and refuses one set by the
caller)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deltalog import Record, Store
from deltalog.errors import VersionNotAvailableError
from deltalog.log import time_travel
from deltalog.log.history import HistoryEntry
from tests.conftest import run_cli

HOUR_MS = 3_600_000


def _restamp(store: Store, topic: str, version: int, timestamp_ms: int) -> None:
    """Rewrite the commit info ``timestamp`` of ``version`` as a writer whose clock said ``timestamp_ms`` would
    have written it."""
    path = Path(store.log(topic, 0).uri.removeprefix("file://")) / "_delta_log" / f"{version:020d}.json"
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        action = json.loads(line)
        if "commitInfo" in action:
            action["commitInfo"]["timestamp"] = timestamp_ms
            lines[i] = json.dumps(action)
    path.write_text("\n".join(lines) + "\n")


def _writer_ts(store: Store, topic: str, version: int) -> int:
    return next(e.writer_timestamp_ms for e in store.history(topic, 0) if e.version == version)


def _values(records) -> list[bytes]:
    return [r.value for r in records]


def _pause() -> int:
    time.sleep(0.02)
    t = int(time.time() * 1000)
    time.sleep(0.02)
    return t


def test_commit_times_are_made_monotonic_by_deltas_rule():
    entries = [{"version": 3, "timestamp": 1_000}, {"version": 0, "timestamp": 5_000},
               {"version": 1, "timestamp": 4_000}, {"version": 2, "timestamp": 9_000}, {"version": 4}]
    times = time_travel.monotonic_times(entries)
    assert [(t.version, t.timestamp_ms, t.writer_ms) for t in times] == [
        (0, 5_000, 5_000), (1, 5_001, 4_000), (2, 9_000, 9_000), (3, 9_001, 1_000), (4, 9_002, 9_002)]


def test_a_writer_behind_cannot_make_a_time_travel_read_include_what_came_after(store):
    store.create_topic("t", 1)
    store.append("t", 0, [Record(b"k", b"a")])
    t = _pause()
    store.append("t", 0, [Record(b"k", b"b")])  # after t, by a writer with a right clock
    store.append("t", 0, [Record(b"k", b"c")])  # after t too, by a writer 2 s behind
    v3 = store.log("t", 0).table().version()
    _restamp(store, "t", v3, t - 2_000)
    assert _values(store.read("t", 0, "earliest", timestamp_as_of=t)) == [b"a"]
    assert _values(store.read("t", 0, "earliest", timestamp_as_of=t + 60_000)) == [b"a", b"b", b"c"]


def test_a_time_before_the_topic_existed_is_refused_under_skew(store):
    store.create_topic("t", 1)
    created = _writer_ts(store, "t", 0)
    store.append("t", 0, [Record(b"k", b"v")])  # by a writer an hour behind
    _restamp(store, "t", 1, created - HOUR_MS)
    with pytest.raises(VersionNotAvailableError, match="did not exist at"):
        store.read("t", 0, "earliest", timestamp_as_of=created - HOUR_MS // 2)
    assert _values(store.read("t", 0, "earliest", timestamp_as_of=created + 1)) == [b"v"]


def test_history_lists_versions_in_order_and_names_the_adjusted_commits(store, capsys):
    store.create_topic("t", 1)
    created = _writer_ts(store, "t", 0)
    store.append("t", 0, [Record(b"k", b"1")])
    store.append("t", 0, [Record(b"k", b"2")])
    _restamp(store, "t", 1, created - HOUR_MS)
    entries: list[HistoryEntry] = store.history("t")
    assert [e.version for e in entries] == [2, 1, 0]
    assert [e.timestamp_ms for e in entries] == sorted((e.timestamp_ms for e in entries), reverse=True)
    skewed = [e for e in entries if e.skewed]
    assert [(e.version, e.writer_timestamp_ms, e.timestamp_ms) for e in skewed] == [(1, created - HOUR_MS,
                                                                                    created + 1)]
    # with a limit, a commit keeps the time it has without one
    assert store.history("t", 0, limit=2)[1].timestamp_ms == created + 1
    code, out, _ = run_cli(capsys, "--store", store.root, "history", "t")
    assert code == 0 and " +  " in out and "+ its writer's clock stamped it at or before the commit before it" in out


@pytest.mark.subprocess
def test_a_real_writer_an_hour_behind_cannot_read_data_before_the_topic_existed(tmp_path):
    root = tmp_path / "store"
    store = Store(root)
    store.create_topic("t", 1)
    store.append("t", 0, [Record(b"k", b"a")])
    t = _pause()
    store.append("t", 0, [Record(b"k", b"b")])
    code = ("import sys; from deltalog import Record, Store; "
            "Store(sys.argv[1]).append('t', 0, [Record(b'k', b'c')])")
    from tooling.services import ensure_libfaketime

    env = {**os.environ, "LD_PRELOAD": ensure_libfaketime(), "FAKETIME": "-3600", "PYTHONPATH": os.getcwd()}
    subprocess.run([sys.executable, "-c", code, str(root)], env=env, check=True, timeout=120)
    entries = Store(root).history("t", 0)
    assert [e.version for e in entries] == [3, 2, 1, 0]
    assert entries[0].writer_timestamp_ms < entries[-1].timestamp_ms - HOUR_MS // 2  # the clock really was behind
    assert entries[0].skewed
    assert _values(Store(root).read("t", 0, "earliest", timestamp_as_of=t)) == [b"a"]
    with pytest.raises(VersionNotAvailableError, match="did not exist at"):
        Store(root).read("t", 0, "earliest", timestamp_as_of=entries[-1].timestamp_ms - HOUR_MS // 2)


@pytest.mark.subprocess
def test_state_history_shows_the_times_a_state_read_resolves_on_when_a_refresher_is_an_hour_behind(tmp_path, capsys):
    """`deltalog state history` used to show the refresher's own clock, so a time taken from it read another version
    (or "did not exist") with `state show --as-of`."""
    root = tmp_path / "store"
    store = Store(root)
    store.create_topic("t", 1, config={"state.table.enable": "true"})
    store.append("t", 0, [Record(b"k", b"a")])
    store.refresh_state("t")
    code = ("import sys; from deltalog import Record, Store; s = Store(sys.argv[1]); "
            "s.append('t', 0, [Record(b'k', b'b')]); s.refresh_state('t')")
    from tooling.services import ensure_libfaketime

    env = {**os.environ, "LD_PRELOAD": ensure_libfaketime(), "FAKETIME": "-3600", "PYTHONPATH": os.getcwd()}
    subprocess.run([sys.executable, "-c", code, str(root)], env=env, check=True, timeout=120)
    newest, before = Store(root).state_history("t")[:2]
    assert newest.skewed and newest.writer_timestamp_ms < before.timestamp_ms - HOUR_MS // 2
    assert newest.timestamp_ms == before.timestamp_ms + 1
    assert Store(root).state("t", timestamp_as_of=newest.timestamp_ms).column("value").to_pylist() == [b"b"]
    assert Store(root).state("t", timestamp_as_of=before.timestamp_ms).column("value").to_pylist() == [b"a"]
    out = run_cli(capsys, "--store", str(root), "state", "history", "t")[1]
    assert out.count(" +  ") == 1 and "+ its refresher's clock stamped it at or before the version before it" in out
