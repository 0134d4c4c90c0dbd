"""The real services of tooling/services.py serve what later tests rely on.

Object stores: delta-rs commits, appends and reads a table, and obstore's conditional puts (the lease's
mechanism) refuse a second create and a stale e_tag, on moto's S3 and on Azurite. Spark Connect: a client
session runs ``mapInArrow`` and a Python data source in the server's JVM, has no ``sparkContext``, and
lives beside the classic session. Standalone cluster: a driver in a subprocess runs tasks in executor
processes, in the worker's directory and mount namespace, where the driver's temporary files do not exist.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import deltalake
import obstore
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from obstore.exceptions import AlreadyExistsError, PreconditionError

from tooling import services
from tooling.services import WORKER_HOSTNAME, S3Server, _descendants, _proc_stat, _Process

REPO_ROOT = Path(__file__).resolve().parents[1]

# --- object stores --------------------------------------------------------------------------------------


@pytest.fixture(params=["s3", "azurite"])
def object_store(request):
    """(table uri, server) on each object store; a server starts only when a test asks for it."""
    server = request.getfixturevalue("s3_server" if request.param == "s3" else "azurite")
    uri = request.getfixturevalue("s3_store_uri" if request.param == "s3" else "azurite_store_uri")
    return uri, server


def _obstore_at(uri: str, server):
    """An obstore store rooted at the uri's bucket or container, configured from the server's options."""
    from obstore.store import AzureStore, S3Store

    scheme, _, rest = uri.partition("://")
    bucket, _, prefix = rest.partition("/")
    store_class = S3Store if scheme == "s3" else AzureStore
    return store_class(bucket, config=server.storage_options), prefix


def test_delta_rs_commits_appends_and_reads_a_table(object_store):
    uri, server = object_store
    deltalake.write_deltalake(uri, pa.table({"offset": [0, 1], "key": [b"a", b"b"]}),
                              storage_options=server.storage_options)
    deltalake.write_deltalake(uri, pa.table({"offset": [2], "key": [b"a"]}), mode="append",
                              storage_options=server.storage_options)

    table = deltalake.DeltaTable(uri, storage_options=server.storage_options)
    assert table.version() == 1
    assert table.to_pyarrow_table().sort_by("offset")["offset"].to_pylist() == [0, 1, 2]
    store, prefix = _obstore_at(uri, server)
    commits = sorted(o["path"] for o in obstore.list(store, prefix=f"{prefix}/_delta_log/").collect())
    assert commits == [f"{prefix}/_delta_log/{v:020d}.json" for v in (0, 1)]


def test_delta_rs_finds_the_server_from_the_environment(object_store, monkeypatch):
    uri, server = object_store
    deltalake.write_deltalake(uri, pa.table({"offset": [0]}), storage_options=server.storage_options)
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    assert deltalake.DeltaTable(uri).to_pyarrow_table()["offset"].to_pylist() == [0]


def test_obstore_conditional_puts_refuse_a_second_create_and_a_stale_etag(object_store):
    uri, server = object_store
    store, prefix = _obstore_at(uri, server)
    lease = f"{prefix}/_lease"
    first = obstore.put(store, lease, b"owner-1", mode="create")
    with pytest.raises(AlreadyExistsError):
        obstore.put(store, lease, b"owner-2", mode="create")
    second = obstore.put(store, lease, b"owner-1 renewed", mode={"e_tag": first["e_tag"]})
    with pytest.raises(PreconditionError):
        obstore.put(store, lease, b"owner-2", mode={"e_tag": first["e_tag"]})
    assert second["e_tag"] != first["e_tag"]
    assert bytes(obstore.get(store, lease).bytes()) == b"owner-1 renewed"


def test_pyarrow_reads_the_tables_files(object_store):
    uri, server = object_store
    deltalake.write_deltalake(uri, pa.table({"offset": [0, 1]}), storage_options=server.storage_options)
    files = deltalake.DeltaTable(uri, storage_options=server.storage_options).file_uris()
    paths = [f.split("://", 1)[1] for f in files]
    assert pq.read_table(paths, filesystem=server.pyarrow_filesystem())["offset"].to_pylist() == [0, 1]


def test_invalid_bucket_and_container_names_are_refused(s3_server, azurite):
    with pytest.raises(ValueError, match="bucket name 'ab'"):
        s3_server.create_bucket("ab")
    with pytest.raises(ValueError, match="container name 'Bad_Name'"):
        azurite.create_container("Bad_Name")


# --- Spark Connect --------------------------------------------------------------------------------------


def test_connect_session_runs_map_in_arrow_in_the_server(connect_spark, connect_server):
    def double(batches):
        import os

        import pyarrow as pa
        import pyarrow.compute as pc

        for batch in batches:
            n = batch.num_rows
            yield pa.RecordBatch.from_pydict({"id": pc.multiply(batch["id"], 2),
                                              "pid": [os.getpid()] * n, "cwd": [os.getcwd()] * n})

    rows = connect_spark.range(0, 6, numPartitions=2).mapInArrow(double, "id long, pid long, cwd string").collect()

    assert sorted(r.id for r in rows) == [0, 2, 4, 6, 8, 10]
    assert os.getpid() not in {r.pid for r in rows}
    assert all(r.cwd.startswith(f"{connect_server.workdir}/") for r in rows)  # the server's session files


def test_connect_session_reads_a_python_data_source(connect_spark):
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class OffsetsReader(DataSourceReader):
        def read(self, partition):
            import pyarrow as pa

            yield pa.RecordBatch.from_pydict({"offset": [0, 1, 2], "key": ["a", "b", "a"]})

    class OffsetsSource(DataSource):
        @classmethod
        def name(cls):
            return "deltalog_smoke_offsets"

        def schema(self):
            return "offset long, key string"

        def reader(self, schema):
            return OffsetsReader()

    connect_spark.dataSource.register(OffsetsSource)
    frame = connect_spark.read.format("deltalog_smoke_offsets").load()
    assert [tuple(r) for r in frame.orderBy("offset").collect()] == [(0, "a"), (1, "b"), (2, "a")]


def test_connect_session_has_no_spark_context(connect_spark):
    from pyspark.errors import PySparkAttributeError

    with pytest.raises(PySparkAttributeError) as raised:
        connect_spark.sparkContext  # noqa: B018 - the attribute access is what raises
    assert raised.value.getCondition() == "JVM_ATTRIBUTE_NOT_SUPPORTED"


def test_connect_session_coexists_with_the_classic_session(spark, connect_spark):
    from pyspark.sql.utils import is_remote

    # The Connect builder leaves the process in classic mode (the classic builder's remote() would not).
    assert not is_remote() and "SPARK_REMOTE" not in os.environ
    assert spark.sparkContext.master == "local[2]"
    assert spark.range(5).count() == 5
    assert connect_spark.range(7).count() == 7
    assert spark.range(3).count() == 3


# --- standalone cluster ---------------------------------------------------------------------------------

# Runs as the driver, in a subprocess: each task reports where it ran and what it could see.
_PROBE_DRIVER = r"""
import json, os, socket, sys
from pyspark.sql import SparkSession

driver_file = sys.argv[1]
spark = (SparkSession.builder.master(os.environ["DELTALOG_SPARK_MASTER"]).appName("deltalog-services-probe")
         .config("spark.executor.memory", "512m").config("spark.ui.enabled", "false").getOrCreate())

def probe(batches):
    import os, socket
    import pyarrow as pa
    import deltalog

    def executor_ancestor():
        pid = os.getppid()
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"CoarseGrainedExecutorBackend" in f.read():
                    return pid
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        return -1

    with open("written-by-task.txt", "a") as f:  # in the executor's directory, which the host must see
        f.write(f"{os.getpid()}\n")
    for batch in batches:
        yield pa.RecordBatch.from_pylist([{
            "pid": os.getpid(), "executor_pid": executor_ancestor(), "cwd": os.getcwd(),
            "hostname": socket.gethostname(), "mount_ns": os.readlink("/proc/self/ns/mnt"),
            "sees_driver_file": os.path.exists(driver_file), "deltalog": deltalog.__file__,
            "rows": batch.num_rows}])

schema = "pid long, executor_pid long, cwd string, hostname string, mount_ns string, sees_driver_file boolean, deltalog string, rows long"
tasks = [r.asDict() for r in spark.range(0, 10, numPartitions=2).mapInArrow(probe, schema).collect()]
print(json.dumps({"pid": os.getpid(), "hostname": socket.gethostname(), "mount_ns": os.readlink("/proc/self/ns/mnt"),
                  "sees_driver_file": os.path.exists(driver_file), "tasks": tasks}))
spark.stop()
"""


def test_cluster_tasks_run_in_executors_that_cannot_see_the_drivers_files(spark_cluster, tmp_path):
    driver_file = tmp_path / "driver-only.txt"
    driver_file.write_text("only the driver's machine has this file")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _PROBE_DRIVER, str(driver_file)], env=spark_cluster.env(),
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"driver subprocess on the cluster: {time.monotonic() - started:.1f} s")

    tasks = report["tasks"]
    assert sum(t["rows"] for t in tasks) == 10
    assert report["sees_driver_file"] is True
    for task in tasks:
        assert task["pid"] not in (report["pid"], os.getpid())
        assert task["executor_pid"] not in (-1, report["pid"])  # a Python worker under an executor JVM
        assert task["cwd"].startswith(str(spark_cluster.executor_work_dir) + "/app-")
        assert task["hostname"] == WORKER_HOSTNAME != report["hostname"] == socket.gethostname()
        assert task["mount_ns"] != report["mount_ns"]
        assert task["mount_ns"] == os.readlink(f"/proc/{spark_cluster.worker_pid}/ns/mnt")
        assert task["sees_driver_file"] is False
        assert task["deltalog"] == str(REPO_ROOT / "deltalog" / "__init__.py")
        # The executor's directory is the worker's, shared with the host, not a copy inside the namespace.
        written = (Path(task["cwd"]) / "written-by-task.txt").read_text().split()
        assert str(task["pid"]) in written


# --- process handling -----------------------------------------------------------------------------------

# A parent that starts a child in a process group of its own (as Spark's Python daemon does), then waits.
_TREE = r"""
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import os, time; os.setpgid(0, 0); print('grouped', flush=True); time.sleep(600)"])
time.sleep(600)
"""


@pytest.mark.subprocess
def test_stopping_a_service_ends_processes_that_left_its_group(tmp_path):
    process = _Process("tree", [sys.executable, "-c", _TREE], cwd=tmp_path, env=dict(os.environ),
                       log_path=tmp_path / "tree.log")
    process.start()
    services._wait_until(lambda: "grouped" in process.log_tail(),
                         processes=[process], timeout_s=30, what="process tree")
    tree = {process.pid: _proc_stat(process.pid)[1], **_descendants(process.pid)}
    child = next(pid for pid in tree if pid != process.pid)
    assert os.getpgid(child) != os.getpgid(process.pid)

    process.stop(grace_s=5)

    alive = [pid for pid, start in tree.items() if (_proc_stat(pid) or (0, None))[1] == start]
    assert alive == []


@pytest.mark.subprocess
def test_a_stopped_server_no_longer_answers():
    with S3Server() as server:
        port = server.port
        assert services._port_open(services.LOOPBACK, port)
        workdir = server.workdir
    assert not services._port_open(services.LOOPBACK, port)
    assert not workdir.exists()
