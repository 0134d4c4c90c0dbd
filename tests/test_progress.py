"""Progress of long commands, as a user sees it: the CLI as a process whose stderr is a terminal (a pseudo-terminal
here) draws tqdm's bar or counter there, while stdout keeps only the results; with stderr a file or a pipe (a log,
CI) nothing is drawn."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    env.pop("DELTALOG_STORE", None)
    return env


def run_on_terminal(argv: list[str], cwd: Path, stdin: int | None = None) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal: (exit code, stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a terminal's size: 120 columns
    shown: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                return
            if not chunk:
                return
            shown.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        done = subprocess.run([sys.executable, "-m", "deltalog", *argv], stdout=subprocess.PIPE, stderr=slave,
                              stdin=stdin if stdin is not None else subprocess.DEVNULL, cwd=cwd, env=_env(),
                              timeout=600)
    finally:
        os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    return done.returncode, done.stdout.decode(), b"".join(shown).decode(errors="replace")


@pytest.fixture
def records_file(tmp_path) -> Path:
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps({"key": f"k{i % 500}", "value": f"v{i}"}) + "\n" for i in range(30_000)))
    return path


def test_produce_from_a_file_shows_a_bar_on_a_terminal_only(tmp_path, records_file):
    store = str(tmp_path / "store")
    assert subprocess.run([sys.executable, "-m", "deltalog", "--store", store, "topics", "create", "t"],
                          capture_output=True, env=_env(), cwd=tmp_path, timeout=120).returncode == 0
    code, out, terminal = run_on_terminal(["--store", store, "produce", "t", "--file", str(records_file),
                                           "--batch-size", "5000"], tmp_path)
    assert code == 0, terminal
    assert out.startswith("Produced 30000 record(s) to t-0")
    assert "producing to t" in terminal and "100%" in terminal  # tqdm's bar over the file's bytes, to its end
    assert "producing to t" not in out
    quiet = subprocess.run([sys.executable, "-m", "deltalog", "--store", store, "produce", "t", "--file",
                            str(records_file)], capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=600)
    assert quiet.returncode == 0 and quiet.stderr == ""  # not a terminal: nothing drawn

    code, out, terminal = run_on_terminal(["--store", store, "consume", "t", "--from-beginning", "-o", "json"],
                                          tmp_path)
    assert code == 0 and len(out.splitlines()) == 60_000
    assert "consuming t" in terminal and "records" in terminal and "Processed a total of 60000 messages" in terminal


def _counts(terminal: str) -> list[tuple[int, int]]:
    """The ``done/total`` figures tqdm drew, in the order it drew them."""
    return [(int(d), int(t)) for d, t in re.findall(r"\| (\d+)/(\d+) \[", terminal)]


def _never_backwards(counts: list[tuple[int, int]]) -> None:
    assert counts, "no bar was drawn"
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in itertools.pairwise(counts)), counts
    assert counts[-1][0] == counts[-1][1], counts  # it ends at its end


@pytest.fixture
def small_store(tmp_path) -> str:
    """A store with one topic of three partitions keeping a state table, and a few records."""
    store = str(tmp_path / "store")
    for argv, stdin in ((["topics", "create", "t", "--partitions", "3", "--config", "state.table.enable=true"], None),
                        (["produce", "t", "--property", "parse.key=true", "--property", "key.separator=:"],
                         "a:1\nb:2\nc:3\nd:4\n")):
        done = subprocess.run([sys.executable, "-m", "deltalog", "--store", store, *argv], input=stdin, text=True,
                              capture_output=True, env=_env(), cwd=tmp_path, timeout=120)
        assert done.returncode == 0, done.stderr
    return store


@pytest.mark.parametrize(("argv", "bar", "result"), [
    (["cleaner", "vacuum"], "vacuum", "(dry run"),
    (["cleaner", "retention"], "retention", "nothing to delete"),
    (["state", "refresh"], "refreshing t", " at version 1 (offsets 0:"),
    (["doctor", "--no-spark"], "doctor", "Ready: deltalog can run here."),
])
def test_step_by_step_commands_show_steps_on_a_terminal_only(tmp_path, small_store, argv, bar, result):
    code, out, terminal = run_on_terminal(["--store", small_store, *argv], tmp_path)
    assert code == 0, terminal
    assert result in out and bar not in out  # the results on stdout, the bar on the terminal
    assert bar in terminal and ("t-2" in terminal or "every partition's files" in terminal)  # what runs now
    _never_backwards(_counts(terminal))
    quiet = subprocess.run([sys.executable, "-m", "deltalog", "--store", small_store, *argv], capture_output=True,
                           text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert quiet.returncode == 0 and result in quiet.stdout and quiet.stderr == ""  # not a terminal: nothing drawn


@pytest.mark.spark
def test_check_shows_its_partitions_on_a_terminal_only(tmp_path, small_store):
    """``deltalog check`` spends most of its time starting Spark and Great Expectations: the bar says so from the
    start, then counts the partitions validated."""
    code, out, terminal = run_on_terminal(["--store", small_store, "check", "t"], tmp_path)
    assert code == 0, terminal
    assert "checking t" in terminal and "starting Spark" in terminal and "partition 2" in terminal
    assert "checking t" not in out and "expectations" in out
    _never_backwards(_counts(terminal))
    quiet = subprocess.run([sys.executable, "-m", "deltalog", "--store", small_store, "check", "t"],
                           capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=600)
    assert quiet.returncode == 0 and "checking t" not in quiet.stderr and "%|" not in quiet.stderr
