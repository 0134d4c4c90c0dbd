"""A script waits for ``deltalog serve`` with ``deltalog ping`` (Kafka's ApiVersions until answered), and a test that
starts processes ends them even when it fails (``tooling.services.run_in_session``). Each as a user runs it: bash
and the CLI as processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tooling.services import _session_members, free_port, run_in_session

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    bindir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(ROOT)}
    env.pop("DELTALOG_STORE", None)
    return env


def test_ping_waits_for_serve_started_in_the_background(tmp_path):
    port = free_port()
    script = (f"deltalog --store {tmp_path / 'store'} serve --listen 127.0.0.1:{port} &\n"
              f"deltalog -o json ping 127.0.0.1:{port} --timeout-ms 120000\n"
              "kill %1\nwait\n")
    done = run_in_session(["bash", "-e", "-c", "set -m\n" + script], cwd=tmp_path, env=_env(), timeout_s=300)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["answered"] is True and answer["address"] == f"127.0.0.1:{port}" and answer["api_count"] > 10
    assert "deltalog serve: stopped" in done.stderr


def test_ping_without_an_endpoint_fails_after_its_timeout(tmp_path):
    port = free_port()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "deltalog", "ping", f"127.0.0.1:{port}", "--timeout-ms", "700"],
                          capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120)
    assert done.returncode == 1
    assert f"127.0.0.1:{port} did not answer" in done.stderr and "700 ms" in done.stderr
    assert time.monotonic() - started >= 0.7


def test_run_in_session_ends_what_a_failing_script_left_running(tmp_path):
    marker = tmp_path / "pid"
    done = run_in_session(["bash", "-c", f"set -m; sleep 300 & echo $! > {marker}; exit 3"], timeout_s=60)
    assert done.returncode == 3
    pid = int(marker.read_text())
    assert not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes().split(b")")[1][:3]


def test_run_in_session_ends_everything_on_a_timeout(tmp_path):
    marker = tmp_path / "pid"
    with pytest.raises(subprocess.TimeoutExpired):
        run_in_session(["bash", "-c", f"set -m; sleep 300 & echo $! > {marker}; wait"], timeout_s=2)
    pid = int(marker.read_text())
    sessions = {int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[3])} \
        if Path(f"/proc/{pid}").exists() else set()
    assert all(not _session_members(s) for s in sessions)
