"""Real services for tests, benchmarks and the reliability harness, each a process of its own.

Every class here is a context manager that starts a real server (moto's S3 API, Azurite's blob service, a
Spark Connect server, a Spark standalone master and worker), waits until it serves, exposes what a client
needs (endpoints, environment variables, storage options) and stops it on exit. A service runs in its own
session (process group) in its own working directory, and stopping it ends the whole group and every
process it started, so nothing outlives a failing test. Started processes also get SIGKILL if the Python
thread that started them dies (``setpriv --pdeathsig``): start services from a long-lived thread.

Nothing here imports deltalog: the module needs only the standard library, and pyspark for the Spark
services, so the reliability harness can use it against any checkout.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from email.utils import formatdate
from pathlib import Path
from typing import Any

__all__ = [
    "AzuriteServer",
    "ConnectServer",
    "S3Server",
    "ServiceError",
    "StandaloneCluster",
    "ensure_azurite",
    "ensure_kafkajs",
    "free_port",
    "spark_home",
]

LOOPBACK = "127.0.0.1"


class ServiceError(RuntimeError):
    """A service did not start or did not answer; the message carries the tail of its log."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on right now (the kernel's pick; another process may take it meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _apt_install(package: str) -> subprocess.CompletedProcess:
    """``apt-get install PACKAGE`` (``apt-get update`` first when the lists are stale); raises
    :class:`ServiceError` when the machine has no apt-get."""
    apt = shutil.which("apt-get")
    if apt is None:
        raise ServiceError(f"{package} is missing and there is no apt-get to install it: install Debian/Ubuntu's "
                           f"{package} package (apt-get install {package}) or your system's equivalent")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [*sudo, apt, "install", "-y", "--no-install-recommends", package]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        subprocess.run([*sudo, apt, "update"], capture_output=True)
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return done


def ensure_kcat() -> str:
    """The path of ``kcat`` (librdkafka's command-line client, Debian's package), installed with apt-get when it is
    missing and the machine has apt-get (CI images; tests of the Kafka endpoint run it). Raises
    :class:`ServiceError` when it cannot be had, so a test fails rather than skips."""
    found = shutil.which("kcat")
    if found:
        return found
    done = _apt_install("kcat")
    found = shutil.which("kcat")
    if not found:
        raise ServiceError(f"apt-get install kcat failed: {done.stderr[-2000:]}")
    return found


#: Where Debian's ``faketime`` package puts the preload library, by architecture.
LIBFAKETIME_PATHS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                     "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1")


def find_libfaketime() -> str | None:
    """The path of libfaketime's preload library, or None when it is not installed."""
    return next((p for p in LIBFAKETIME_PATHS if os.path.exists(p)), None)


def ensure_libfaketime() -> str:
    """The path of libfaketime (Debian's ``faketime``: ``LD_PRELOAD`` moves a process's clock), installed with
    apt-get when missing: the clock-skew tests run a writer process whose clock is really off, as on another host.
    Raises :class:`ServiceError` when it cannot be had, so those tests fail rather than skip."""
    found = find_libfaketime()
    if found:
        return found
    done = _apt_install("faketime")
    found = find_libfaketime()
    if not found:
        raise ServiceError(f"apt-get install faketime failed: {done.stderr[-2000:]}")
    return found


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def spark_home() -> Path:
    """pyspark's own directory, which ships ``bin/spark-class``, ``bin/spark-submit`` and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


# --- processes ------------------------------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live process, read from /proc; None once it is a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        if fields[0] in (b"Z", b"X"):
            return None
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _descendants(root: int) -> dict[int, int]:
    """Every live process below ``root`` (pid -> start time), whatever session or group it moved to."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat is not None:
                children.setdefault(stat[0], []).append(int(entry))
                starts[int(entry)] = stat[1]
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found[child] = starts[child]
                todo.append(child)
    return found


def _session_members(session: int) -> list[int]:
    """Every live process of session ``session`` (whatever process group job control moved it to)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if fields[0] not in (b"Z", b"X") and int(fields[3]) == session:
                found.append(int(entry))
    return found


def stop_process(proc: subprocess.Popen[Any], grace_s: float = 30.0) -> None:
    """Stop one child process: SIGTERM, ``grace_s`` to exit, then SIGKILL (a test's or a benchmark's
    ``deltalog serve``, in its ``finally``)."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def end_session(session: int, grace_s: float = 10.0) -> None:
    """End every process of ``session``: SIGTERM, ``grace_s`` to stop, then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        members = _session_members(session)
        if not members:
            return
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while _session_members(session) and time.monotonic() < deadline:
            time.sleep(0.05)


def run_in_session(argv: Sequence[str], *, timeout_s: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True)`` in a session of its own; once ``argv`` exits (or
    ``timeout_s`` passes) every process left in that session is ended, so a script's background job (``deltalog
    serve &``, even under ``set -m``) never outlives the test that started it, and does not keep the test waiting on
    an output pipe it inherited (the output goes to files). A timeout raises ``subprocess.TimeoutExpired`` after the
    session is ended, with the output so far."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        popen = subprocess.Popen(list(argv), stdout=out, stderr=err, text=True, start_new_session=True, **kwargs)
        timed_out = False
        try:
            popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            end_session(popen.pid)
            if popen.poll() is None:
                popen.kill()
            popen.wait(timeout=30)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if timed_out:
        raise subprocess.TimeoutExpired(list(argv), timeout_s, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(list(argv), popen.returncode, stdout, stderr)


class _Process:
    """One service process: its own session and process group, output to a log file, stopped as a tree.

    Spark's Python daemons put themselves in process groups of their own (``os.setpgid(0, 0)``), so
    killing the service's group is not enough: the tree below it is noted before the first signal and
    whatever of it still lives after the group is gone is killed one by one.
    """

    def __init__(self, name: str, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path):
        self.name = name
        self.argv = list(argv)
        self.cwd = cwd
        self.env = dict(env)
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = self.argv
        if shutil.which("setpriv"):
            argv = ["setpriv", "--pdeathsig", "KILL", *argv]
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was not started"
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 10.0) -> None:
        if self.popen is None:
            return
        tree = _descendants(self.popen.pid)
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=wait_s)
                break
        def survivors() -> list[int]:
            return [pid for pid, started in tree.items() if (_proc_stat(pid) or (0, None))[1] == started]

        for pid in survivors():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while survivors() and time.monotonic() < deadline:
            time.sleep(0.02)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)


def _wait_until(ready: Callable[[], bool], *, processes: Iterable[_Process], timeout_s: float, what: str) -> None:
    """Poll ``ready`` until it holds; fail early, with the logs, if a process died or time ran out."""
    processes = list(processes)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if ready():
                return
        except Exception:  # noqa: BLE001 - not serving yet; a dead process or the deadline ends the wait
            pass
        dead = [p for p in processes if not p.alive()]
        if dead or time.monotonic() > deadline:
            reason = f"{dead[0].name} exited with {dead[0].returncode}" if dead else f"not ready after {timeout_s:.0f} s"
            logs = "\n".join(f"--- {p.name} ({p.log_path}) ---\n{p.log_tail()}" for p in processes)
            raise ServiceError(f"{what}: {reason}\n{logs}")
        time.sleep(0.1)


_PORT_TAKEN = re.compile(r"Address already in use|EADDRINUSE|BindException")


class _Service:
    """Start/stop bookkeeping shared by the services: a working directory, processes, startup time."""

    name = "service"

    def __init__(self, workdir: str | os.PathLike[str] | None = None, *, startup_timeout_s: float = 120.0):
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.startup_timeout_s = startup_timeout_s
        self.startup_seconds: float | None = None
        self._processes: list[_Process] = []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self):
        """Start the service and wait until it serves (``startup_seconds`` says how long that took)."""
        if self._processes:
            raise ServiceError(f"{self.name} is already started")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=f"deltalog-{self.name}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        for attempt in range(1, 4):
            try:
                self._start()
                break
            except BaseException as error:
                # free_port() only says the port was free: another process may bind it first. Try new ports.
                if attempt == 3 or not isinstance(error, ServiceError) or not _PORT_TAKEN.search(str(error)):
                    self.stop()
                    raise
                self._stop_processes()
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop every process of the service (in reverse order of start) and remove a temporary workdir."""
        self._stop_processes()
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def _stop_processes(self) -> None:
        self._before_stop()
        while self._processes:
            self._processes.pop().stop()

    def _spawn(self, name: str, argv: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str]) -> _Process:
        """Start a process of the service (in the service's workdir unless ``cwd`` says else)."""
        assert self.workdir is not None
        process = _Process(name, argv, cwd=cwd or self.workdir, env=env, log_path=self.workdir / f"{name}.log")
        self._processes.append(process)
        process.start()
        return process

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        _wait_until(ready, processes=self._processes, timeout_s=self.startup_timeout_s, what=what)

    def _start(self) -> None:
        raise NotImplementedError

    def _before_stop(self) -> None:
        pass


# --- S3 (moto) ------------------------------------------------------------------------------------------

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class S3Server(_Service):
    """moto's S3 API server (``python -m moto.server``) on 127.0.0.1, state in memory.

    ``env`` holds the standard variables that delta-rs and obstore read (pyarrow does not read the endpoint
    from the environment: use :meth:`pyarrow_filesystem`); ``storage_options`` holds the same values under
    delta-rs's and obstore's key names (``S3Store(bucket, config=storage_options)``; obstore's ``from_url``
    wants ``aws_allow_http`` in ``client_options`` instead). moto checks no signatures.
    """

    name = "s3"

    def __init__(self, workdir: str | os.PathLike[str] | None = None, *, region: str = "us-east-1",
                 startup_timeout_s: float = 60.0):
        super().__init__(workdir, startup_timeout_s=startup_timeout_s)
        self.region = region
        self.port = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
        }

    @property
    def storage_options(self) -> dict[str, str]:
        return {key.lower(): value for key, value in self.env.items()}

    def _start(self) -> None:
        self.port = free_port()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._spawn("moto", [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)], env=env)

        def ready() -> bool:
            with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=2) as response:
                return response.status == 200

        self._wait(ready, f"moto S3 server on port {self.port}")

    def create_bucket(self, name: str) -> str:
        """Create a bucket (3 to 63 lower-case letters, digits, dots, hyphens); returns ``s3://name``."""
        if not _BUCKET.match(name):
            raise ValueError(f"bucket name {name!r} is not valid: 3 to 63 characters of a-z, 0-9, '.' and '-'")
        body = b""
        if self.region != "us-east-1":
            body = (f"<CreateBucketConfiguration><LocationConstraint>{self.region}</LocationConstraint>"
                    "</CreateBucketConfiguration>").encode()
        request = urllib.request.Request(f"{self.endpoint_url}/{name}", data=body, method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        return f"s3://{name}"

    def pyarrow_filesystem(self):
        """A ``pyarrow.fs.S3FileSystem`` on this server (pyarrow ignores ``AWS_ENDPOINT_URL``)."""
        from pyarrow import fs

        return fs.S3FileSystem(access_key="testing", secret_key="testing", region=self.region, scheme="http",
                               endpoint_override=f"{LOOPBACK}:{self.port}")


# --- Azure blob storage (Azurite) -----------------------------------------------------------------------

#: Azurite's well-known development account and key (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_CONTAINER = re.compile(r"^(?=.{3,63}$)[a-z0-9]+(-[a-z0-9]+)*$")


def _cache_dir() -> Path:
    base = os.environ.get("DELTALOG_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "deltalog")
    return Path(base)


#: Azurite before 3.37 ignores the ``startFrom`` of a blob listing (object_store's ``list_with_offset``), so
#: delta-rs finds version 0 where it asked for the log from version N and refuses a table's third commit
#: ("Invalid table version: 1"); measured with 3.35.0 and 3.37.0.
MIN_AZURITE = (3, 37)


def _azurite_version(root: Path) -> tuple[int, ...]:
    try:
        text = json.loads((root / "node_modules" / "azurite" / "package.json").read_text())["version"]
        return tuple(int(p) for p in text.split(".")[:3])
    except (OSError, ValueError, KeyError):
        return ()


def ensure_azurite(cache_dir: str | os.PathLike[str] | None = None,
                   version: str = f"^{MIN_AZURITE[0]}.{MIN_AZURITE[1]}.0") -> Path:
    """The ``azurite-blob`` executable: from ``PATH``, else from a cache, installing it there with npm (again,
    when the cached one is older than :data:`MIN_AZURITE`).

    The install (``npm install azurite@^3.37.0``, about 15 s and 190 MB) happens once per machine; a file lock
    keeps concurrent test runs from installing over each other.
    """
    on_path = shutil.which("azurite-blob")
    if on_path:
        return Path(on_path)
    root = Path(cache_dir) if cache_dir is not None else _cache_dir() / "azurite"
    binary = root / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists() and _azurite_version(root) >= MIN_AZURITE:
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise ServiceError("Azurite is not on PATH and npm is missing to install it (needs Node.js 18+ and npm)")
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists() or _azurite_version(root) < MIN_AZURITE:
            done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error",
                                   f"azurite@{version}"], cwd=root, capture_output=True, text=True,
                                  timeout=600)
            if done.returncode != 0 or not binary.exists():
                raise ServiceError(f"npm install azurite@{version} in {root} failed ({done.returncode}):\n"
                                   f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return binary


#: KafkaJS, an independent Kafka client in pure JavaScript (its own protocol code), for the endpoint's tests.
KAFKAJS_VERSION = "2.2.4"


def ensure_kafkajs(cache_dir: str | os.PathLike[str] | None = None, version: str = KAFKAJS_VERSION) -> Path:
    """The ``node_modules`` directory holding npm's ``kafkajs`` (``NODE_PATH`` for ``node``), installed into a cache
    once per machine as Azurite is (a file lock keeps concurrent test runs apart). Raises :class:`ServiceError`
    when node or npm is missing or the install fails, so a test fails rather than skips."""
    root = Path(cache_dir) if cache_dir is not None else _cache_dir() / "kafkajs"
    modules = root / "node_modules"
    package = modules / "kafkajs" / "package.json"

    def installed() -> bool:
        try:
            return json.loads(package.read_text())["version"] == version
        except (OSError, ValueError, KeyError):
            return False

    if installed():
        return modules
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise ServiceError("KafkaJS needs Node.js 14+ and npm; neither is on PATH")
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed():
            done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error", f"kafkajs@{version}"],
                                  cwd=root, capture_output=True, text=True, timeout=600)
            if done.returncode != 0 or not installed():
                raise ServiceError(f"npm install kafkajs@{version} in {root} failed ({done.returncode}):\n"
                                   f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return modules


class AzuriteServer(_Service):
    """Azurite's blob service (npm ``azurite``), in memory, on 127.0.0.1, with the well-known dev account.

    ``env`` and ``storage_options`` point object_store (delta-rs, obstore) at it with an explicit endpoint
    (``http://127.0.0.1:<port>/devstoreaccount1``) and ``allow_http``; tables live at
    ``az://<container>/<path>`` once :meth:`create_container` made the container. obstore takes the options
    as ``AzureStore(container, config=storage_options)``; its ``from_url`` panics on the client key
    ``allow_http`` inside ``config`` (obstore 0.12), so pass ``client_options={"allow_http": True}`` there.
    """

    name = "azurite"
    account = AZURITE_ACCOUNT
    key = AZURITE_KEY

    def __init__(self, workdir: str | os.PathLike[str] | None = None, *, cache_dir: str | None = None,
                 startup_timeout_s: float = 60.0):
        super().__init__(workdir, startup_timeout_s=startup_timeout_s)
        self.cache_dir = cache_dir
        self.port = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/{self.account}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": self.account,
            "AZURE_STORAGE_ACCOUNT_KEY": self.key,
            "AZURE_STORAGE_ENDPOINT": self.endpoint_url,
            "AZURE_ALLOW_HTTP": "true",
        }

    @property
    def storage_options(self) -> dict[str, str]:
        return {
            "azure_storage_account_name": self.account,
            "azure_storage_account_key": self.key,
            "azure_storage_endpoint": self.endpoint_url,
            "allow_http": "true",
        }

    @property
    def connection_string(self) -> str:
        """For Azure SDKs (``azure-storage-blob``), which read neither of the above."""
        return (f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={self.key};"
                f"BlobEndpoint={self.endpoint_url};")

    def pyarrow_filesystem(self):
        """A ``pyarrow.fs.AzureFileSystem`` on this server; paths are ``<container>/<key>``."""
        from pyarrow import fs

        authority = f"{LOOPBACK}:{self.port}"
        return fs.AzureFileSystem(account_name=self.account, account_key=self.key, blob_storage_authority=authority,
                                  dfs_storage_authority=authority, blob_storage_scheme="http", dfs_storage_scheme="http")

    def _start(self) -> None:
        binary = ensure_azurite(self.cache_dir)
        self.port = free_port()
        self._spawn("azurite", [str(binary), "--blobHost", LOOPBACK, "--blobPort", str(self.port),
                                "--inMemoryPersistence", "--loose", "--skipApiVersionCheck",
                                "--disableTelemetry"], env=dict(os.environ))
        self._wait(lambda: self._request("GET", "/?comp=list")[0] == 200, f"Azurite on port {self.port}")

    def create_container(self, name: str) -> str:
        """Create a blob container (3 to 63 of a-z, 0-9 and single hyphens); returns ``az://name``."""
        if not _CONTAINER.match(name):
            raise ValueError(f"container name {name!r} is not valid: 3 to 63 characters of a-z, 0-9 and "
                             "single '-' between them")
        status, body = self._request("PUT", f"/{name}?restype=container")
        if status != 201:
            raise ServiceError(f"creating container {name!r} on Azurite answered {status}: {body[:500]!r}")
        return f"az://{name}"

    def _request(self, method: str, path_and_query: str) -> tuple[int, bytes]:
        """A Shared Key signed request without a body (the Blob service's own auth, so no SDK is needed)."""
        path, _, query = path_and_query.partition("?")
        date, version = formatdate(usegmt=True), "2021-12-02"
        resource = f"/{self.account}/{self.account}{path}"
        for pair in sorted(q for q in query.split("&") if q):
            k, _, v = pair.partition("=")
            resource += f"\n{k.lower()}:{v}"
        to_sign = "\n".join([method, *[""] * 11, f"x-ms-date:{date}\nx-ms-version:{version}", resource])
        signature = base64.b64encode(hmac.new(base64.b64decode(self.key), to_sign.encode(), hashlib.sha256).digest())
        headers = {"x-ms-date": date, "x-ms-version": version, "Content-Length": "0",
                   "Authorization": f"SharedKey {self.account}:{signature.decode()}"}
        connection = http.client.HTTPConnection(LOOPBACK, self.port, timeout=10)
        try:
            connection.request(method, f"/{self.account}{path_and_query}", headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


# --- Spark ----------------------------------------------------------------------------------------------


def _spark_env(**extra: str) -> dict[str, str]:
    """The environment of a Spark JVM started from pyspark's jars: this Python for its workers, loopback."""
    env = dict(os.environ)
    env.update(SPARK_HOME=str(spark_home()), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP=LOOPBACK)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    env.update(extra)
    return env


class ConnectServer(_Service):
    """A Spark Connect server: a JVM of its own (``spark-submit --class ...SparkConnectServer``).

    It runs ``local[2]`` in its own working directory, so a classic local session can live in the same
    Python process as the Connect client (``SparkSession.builder.remote("local[2]")`` refuses that). Its
    Python workers run ``sys.executable``.
    """

    name = "connect"

    def __init__(self, workdir: str | os.PathLike[str] | None = None, *, master: str = "local[2]",
                 conf: Mapping[str, str] | None = None, startup_timeout_s: float = 180.0):
        super().__init__(workdir, startup_timeout_s=startup_timeout_s)
        self.master = master
        self.conf = dict(conf or {})
        self.port = 0
        self._session: Any = None

    @property
    def url(self) -> str:
        return f"sc://{LOOPBACK}:{self.port}"

    def _start(self) -> None:
        assert self.workdir is not None
        self.port = free_port()
        conf = {
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.local.dir": str(self.workdir / "local"),
            "spark.sql.warehouse.dir": str(self.workdir / "warehouse"),
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "1g",
            **self.conf,
        }
        argv = [str(spark_home() / "bin" / "spark-submit"), "--class",
                "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", self.master]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        self._spawn("connect-server", [*argv, "spark-internal"], cwd=self.workdir, env=_spark_env())
        self._wait(lambda: _port_open(LOOPBACK, self.port), f"Spark Connect server on port {self.port}")
        # The port opens before the server runs plans; one round trip on a throwaway session proves it does.
        from pyspark.sql.connect.session import SparkSession

        probe = SparkSession(connection=self.url)
        try:
            self._wait(lambda: probe.range(1).collect() is not None, f"Spark Connect server at {self.url}")
        finally:
            probe.stop()

    def session(self):
        """This server's Connect session (``builder.remote(url)``), created on first use and kept."""
        from pyspark.sql.connect.session import SparkSession

        if self._session is None or self._session.is_stopped:
            # create(), not getOrCreate(): the latter returns any earlier default Connect session, whatever its url.
            self._session = SparkSession.builder.remote(self.url).create()
        return self._session

    def _before_stop(self) -> None:
        if self._session is not None:
            with contextlib.suppress(Exception):
                self._session.stop()
            self._session = None


def _mount_namespace_works() -> bool:
    """Whether this process may give a child a private mount namespace with a tmpfs (root, or CAP_SYS_ADMIN)."""
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs tmpfs /mnt"], capture_output=True, timeout=30)
    return probe.returncode == 0


#: The isolated worker's host name (its own UTS namespace), so a task's ``socket.gethostname()`` tells it apart.
WORKER_HOSTNAME = "deltalog-worker"


class StandaloneCluster(_Service):
    """A Spark standalone master and one worker, each a JVM of its own in its own directory.

    Drivers run in subprocesses with :meth:`env` (the pytest process already has a classic local session);
    an application gets the worker's executors, which run in ``<workdir>/worker/work/<app>/<executor>``.

    With ``isolate=True`` (the default) the worker runs in private mount and UTS namespaces (``unshare
    --mount --uts``, host name ``deltalog-worker``) where the temporary directory (``/tmp``, and ``hide=``
    paths) is an empty tmpfs, except for the worker's own directory and whatever of Python, pyspark and
    ``python_path`` lives there, bound back at the same paths (:meth:`kept_paths`). Executors therefore
    cannot see a driver's temporary files (pytest's ``tmp_path`` included): a job that relies on a
    driver-local path fails as it would on a real cluster, instead of passing because the executor happened
    to share the disk. Without root (CAP_SYS_ADMIN) this is impossible; ``isolate=False`` then keeps only
    the separate directories. An application takes all the worker's cores unless it sets ``spark.cores.max``.
    """

    name = "cluster"

    def __init__(self, workdir: str | os.PathLike[str] | None = None, *, cores: int = 2, memory: str = "2g",
                 isolate: bool = True, hide: Sequence[str] = (), python_path: Sequence[str] = (),
                 startup_timeout_s: float = 180.0):
        super().__init__(workdir, startup_timeout_s=startup_timeout_s)
        self.cores = cores
        self.memory = memory
        self.isolate = isolate
        self.hide = [tempfile.gettempdir(), *hide] if isolate else []
        self.python_path = [str(p) for p in python_path]
        self.port = 0
        self.webui_port = 0

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def worker_dir(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "worker"

    @property
    def executor_work_dir(self) -> Path:
        """Where the worker creates each executor's working directory (``<app id>/<executor id>``)."""
        return self.worker_dir / "work"

    @property
    def worker_pid(self) -> int:
        return self._processes[1].pid

    def env(self) -> dict[str, str]:
        """Environment for a driver subprocess: the master, this Python, and a PYTHONPATH for executors.

        The master is in ``DELTALOG_SPARK_MASTER`` (read by deltalog's embedded session) and in
        ``SPARK_MASTER`` for a driver that builds its own session. Executors inherit nothing from the
        driver's environment, so ``spark.executorEnv.PYTHONPATH`` carries the path there through
        ``PYSPARK_SUBMIT_ARGS``, which pyspark reads when it launches the driver's JVM.
        """
        python_path = os.pathsep.join(
            [*self.python_path, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])
        env = _spark_env(DELTALOG_SPARK_MASTER=self.master_url, SPARK_MASTER=self.master_url)
        env.pop("SPARK_HOME")  # the driver's pyspark finds its own home
        if python_path:
            env["PYTHONPATH"] = python_path
            env["PYSPARK_SUBMIT_ARGS"] = shlex.join(
                ["--conf", f"spark.executorEnv.PYTHONPATH={python_path}", "pyspark-shell"])
        return env

    def _start(self) -> None:
        assert self.workdir is not None
        if self.isolate and not _mount_namespace_works():
            raise ServiceError("StandaloneCluster(isolate=True) needs `unshare --mount` (root or CAP_SYS_ADMIN) to "
                               "hide driver-local paths from executors; pass isolate=False to run the worker "
                               "in a separate directory only")
        spark_class = str(spark_home() / "bin" / "spark-class")
        self.port, self.webui_port = free_port(), free_port()
        master_dir = self.workdir / "master"
        for d in (master_dir, self.worker_dir, self.executor_work_dir, self.worker_dir / "local"):
            d.mkdir(parents=True, exist_ok=True)
        daemon_env = {"SPARK_DAEMON_MEMORY": "512m", "SPARK_NO_DAEMONIZE": "1"}
        self._spawn("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
                               "--port", str(self.port), "--webui-port", str(self.webui_port)],
                    cwd=master_dir, env=_spark_env(SPARK_LOCAL_DIRS=str(master_dir), **daemon_env))
        self._wait(lambda: _port_open(LOOPBACK, self.port), f"Spark master on port {self.port}")

        worker = [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK,
                  "--webui-port", str(free_port()), "--cores", str(self.cores), "--memory", self.memory,
                  "--work-dir", str(self.executor_work_dir), self.master_url]
        if self.isolate:
            worker = self._in_private_mounts(worker)
        self._spawn("worker", worker, cwd=self.worker_dir,
                    env=_spark_env(SPARK_LOCAL_DIRS=str(self.worker_dir / "local"),
                                   SPARK_WORKER_DIR=str(self.executor_work_dir), **daemon_env))
        self._wait(self._worker_alive, f"Spark worker registered with {self.master_url}")

    def kept_paths(self) -> list[str]:
        """Paths under a hidden one that executors still see: the worker's directory, and Python, pyspark
        and ``python_path`` if they live there (a checkout cloned under /tmp, say)."""
        def under(path: str, hidden: str) -> bool:
            path, hidden = os.path.realpath(path), os.path.realpath(hidden)
            return os.path.commonpath([path, hidden]) == hidden

        needed = [str(self.worker_dir), sys.prefix, sys.base_prefix, str(spark_home()), *self.python_path]
        kept = {os.path.realpath(p) for p in needed if os.path.isdir(p) and any(under(p, h) for h in self.hide)}
        return sorted(kept | {os.path.realpath(self.worker_dir)}, key=len)  # a parent is bound before its child

    def _in_private_mounts(self, argv: list[str]) -> list[str]:
        """Wrap ``argv`` to run in new mount and UTS namespaces where the hidden paths are empty tmpfs mounts.

        Each kept path is opened before the tmpfs covers it and bound back at the same path through the open
        descriptor, so it stays visible (and shared with the host) while its siblings disappear. mount must
        not canonicalize ``/proc/self/fd/N``: the name it would read there now leads into the empty tmpfs.
        """
        kept = self.kept_paths()
        if len(kept) > 7:  # sh redirects descriptors 0-9 only
            raise ServiceError(f"too many paths to keep visible under {self.hide}: {kept}")
        lines = ["set -e"] + [f"exec {3 + i}<{shlex.quote(p)}" for i, p in enumerate(kept)]
        lines += [f"mount -t tmpfs -o mode=1777,size=4g deltalog-hidden {shlex.quote(p)}" for p in self.hide]
        for i, path in enumerate(kept):
            lines += [f"mkdir -p {shlex.quote(path)}", f"mount --no-canonicalize --bind /proc/self/fd/{3 + i} {shlex.quote(path)}",
                      f"exec {3 + i}<&-"]
        lines += [f"cd {shlex.quote(str(self.worker_dir))}", f"hostname {WORKER_HOSTNAME}", 'exec "$@"']
        return ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", "\n".join(lines), "worker",
                *argv]

    def _worker_alive(self) -> bool:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.webui_port}/json/", timeout=2) as response:
            state = json.load(response)
        return any(w.get("state") == "ALIVE" for w in state.get("workers", []))
