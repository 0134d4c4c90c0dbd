"""The console tools' failures as a scheduler sees them, through the real ``deltalog`` process: an object store
that refuses the credentials or cannot be reached is one line naming the store, what failed and which environment
variables to check (never a traceback), and the exit codes tell a usage error (2), a failure to run (1) and broken
data (3) apart."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request

import pytest

from deltalog import Record, Store
from tooling.services import S3Server, free_port

pytestmark = pytest.mark.subprocess


def deltalog(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})}
    return subprocess.run([sys.executable, "-m", "deltalog", *argv], capture_output=True, text=True, env=full,
                          timeout=180)


def test_an_object_store_refusing_the_credentials_is_one_line():
    with S3Server() as s3:  # its own server: requiring credentials must not change the session's
        bucket = s3.create_bucket("deltalog-auth")
        request = urllib.request.Request(f"{s3.endpoint_url}/moto-api/reset-auth", data=b"0", method="POST",
                                         headers={"Content-Type": "text/plain"})
        urllib.request.urlopen(request, timeout=10).close()  # from now on moto checks the access key
        p = deltalog("--store", f"{bucket}/st", "topics", "list", env={**s3.env, "AWS_ACCESS_KEY_ID": "wrong"})
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith(f"deltalog: error: the object store {bucket}/st at {s3.endpoint_url} refused the "
                               "credentials (403 Forbidden); check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY")


def test_an_object_store_that_cannot_be_reached_is_one_line():
    closed = f"http://127.0.0.1:{free_port()}"
    env = {"AWS_ENDPOINT_URL": closed, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
           "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    p = deltalog("--store", "s3://nowhere/st", "topics", "create", "t", env=env)
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith(f"deltalog: error: cannot reach the object store s3://nowhere/st at {closed}: "
                               "connection refused")
    assert f"check AWS_ENDPOINT_URL, AWS_ALLOW_HTTP (for http://), AWS_REGION (now: AWS_ENDPOINT_URL={closed}" \
        in lines[0]


def test_exit_codes_tell_usage_failure_and_broken_data_apart(tmp_path):
    root = str(tmp_path / "store")
    store = Store(root, create=True)
    store.create_topic("t", 1)
    store.append("t", 0, [Record(key=b"k", value=b"v")])
    assert deltalog("--store", root, "topics", "list").returncode == 0
    usage = deltalog("--store", root, "topics", "create")
    assert usage.returncode == 2 and usage.stderr.startswith("usage: deltalog topics create")
    failure = deltalog("--store", root, "topics", "describe", "nope")
    assert failure.returncode == 1 and failure.stderr.startswith("deltalog: error: ")
    data_file = store.log("t", 0).snapshot().files[0].path
    os.remove(os.path.join(store.log("t", 0).uri, data_file))  # a data file lost: broken data
    broken = deltalog("--store", root, "doctor", "--no-spark")
    assert broken.returncode == 3, broken.stdout + broken.stderr
    assert "FAIL" in broken.stdout
