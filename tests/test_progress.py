"""Progress of long commands, as a user sees it: the CLI as a process whose stderr is a terminal (a pseudo-terminal
here) draws tqdm's bar or counter there, while stdout keeps only the results; with stderr a file or a pipe (a log,
CI) nothing is drawn."""

from __future__ import annotations

import fcntl
import json
import os
import pty
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
