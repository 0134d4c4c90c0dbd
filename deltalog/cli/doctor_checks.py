"""``deltalog doctor``: is this machine ready to run deltalog, is its store intact, and if not, what to fix.

Each check returns a :class:`Check` (OK, WARN, FAIL, or INFO for facts that need no action); the
command prints them as a table and exits non-zero when any check FAILs. The store's partitions are walked
without Spark (:func:`scan_store`, through :class:`~deltalog.storage.Storage`, so on object stores too): each
damaged Delta log or data file is one FAIL naming the partition, the file and the fix
(:mod:`deltalog.log.damage`), and orphaned data files left by killed writers one WARN. The Spark check really starts
the embedded local session and runs a tiny job, because a JVM that is found but cannot start (wrong
Java, no memory, a broken ``JAVA_HOME``) is the usual first-run failure.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from importlib import metadata

from deltalog.clock import WallClock
from deltalog.errors import CorruptLogError, DeltalogError, StorageError
from deltalog.log import damage, duplicates, foreign_commits
from deltalog.log.damage import Damage
from deltalog.log.log_manager import STATE_DIR, LogManager, is_store
from deltalog.log.partition_log import PartitionLog
from deltalog.spark import is_connect
from deltalog.storage import Storage
from deltalog.storage import join as storage_join
from deltalog.text import format_table

OK, WARN, FAIL, INFO = "OK", "WARN", "FAIL", "INFO"
MIN_PYTHON = (3, 10)
MIN_JAVA = 17


@dataclass(frozen=True)
class Check:
    """One check: what was looked at, what was found, and what to do about it (empty when nothing)."""

    name: str
    status: str
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def check_python() -> Check:
    v = sys.version_info
    found = f"Python {v.major}.{v.minor}.{v.micro} ({sys.executable})"
    if (v.major, v.minor) < MIN_PYTHON:
        return Check("python", FAIL, found, f"use Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer (3.11 recommended)")
    return Check("python", OK, found)


def find_java() -> str | None:
    """``$JAVA_HOME/bin/java`` if it exists (what Spark uses), else ``java`` on the PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


def java_major(version_output: str) -> int | None:
    """The major version from ``java -version`` output: ``"17.0.15"`` -> 17, ``"1.8.0_392"`` -> 8."""
    m = re.search(r'version "([^"]+)"', version_output) or re.search(r"\b(\d+)(?:\.\d+)*\b", version_output)
    if not m:
        return None
    parts = _version_tuple(m.group(1))
    if not parts:
        return None
    return parts[1] if parts[0] == 1 and len(parts) > 1 else parts[0]


def check_java() -> Check:
    java = find_java()
    fix = f"install Java {MIN_JAVA} or newer (e.g. apt-get install openjdk-17-jre-headless) and put it on the PATH or in JAVA_HOME"
    if java is None:
        return Check("java", FAIL, "no java on the PATH and no usable $JAVA_HOME", fix)
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("java", FAIL, f"{java} -version failed: {e}", fix)
    output = (proc.stderr or "") + (proc.stdout or "")
    major = java_major(output)
    first_line = output.strip().splitlines()[0] if output.strip() else "no output"
    if major is None:
        return Check("java", FAIL, f"cannot tell the version of {java}: {first_line}", fix)
    if major < MIN_JAVA:
        return Check("java", FAIL, f"Java {major} at {java}; Spark 4 needs {MIN_JAVA}+", fix)
    return Check("java", OK, f"Java {major} at {java} ({first_line})")


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _import_or_none(module: str) -> object | None:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def check_package(name: str, *, needed: bool = True, below_major: int | None = None, why: str = "",
                  extra: str | None = None, used_by: str = "") -> Check:
    """A distribution's installed version (read from its metadata, so nothing heavy is imported). One that an
    ``extra`` brings is only named when missing (INFO): the base install leaves it out on purpose."""
    version = package_version(name)
    if version is None and extra is not None:
        return Check(name, INFO, f"not installed: only {used_by} needs it (pip install 'deltalog[{extra}]')")
    if version is None:
        status = FAIL if needed else INFO
        return Check(name, status, "not installed", f"pip install deltalog (installs {name})" if needed else "")
    if below_major is not None and _version_tuple(version)[:1] >= (below_major,):
        return Check(name, WARN, f"{name} {version}; {why}", f"pip install '{name}<{below_major}'")
    return Check(name, OK, f"{name} {version}")


def check_delta_rs() -> Check:
    """delta-rs really creates a table, commits to it and reads it back (in a temporary directory)."""
    version = package_version("deltalake")
    if version is None:
        return Check("deltalake", FAIL, "deltalake (delta-rs) is not installed", "pip install deltalog")
    try:  # importing them is part of the check: a broken native library fails here
        import pyarrow as pa
        from deltalake import DeltaTable, write_deltalake

        with tempfile.TemporaryDirectory(prefix="deltalog-doctor-") as tmp:
            write_deltalake(tmp, pa.table({"x": [1, 2, 3]}))
            dt = DeltaTable(tmp)
            rows = dt.to_pyarrow_table().num_rows
        if rows != 3:
            return Check("deltalake", FAIL, f"deltalake {version}: wrote 3 rows, read back {rows}", "reinstall deltalake")
    except Exception as e:  # any failure of the native library is what this check is for
        return Check("deltalake", FAIL, f"deltalake {version} cannot write a table: {e}", "pip install --force-reinstall deltalake")
    return Check("deltalake", OK, f"deltalake {version}: created, wrote and read a Delta table")


def check_spark() -> tuple[Check, object | None]:
    """Import pyspark, start (or join) the embedded local session and run a tiny job."""
    # Databricks Runtime ships pyspark as files on the path, not as a distribution: ask the module.
    version = package_version("pyspark") or getattr(_import_or_none("pyspark"), "__version__", None)
    if version is None:
        return Check("spark", FAIL, "pyspark is not installed (the base install of deltalog leaves it out)",
                     "pip install 'deltalog[spark]' (on Databricks the runtime provides pyspark), or doctor "
                     "--no-spark"), None
    try:  # starting Spark is the check (and `doctor --no-spark` must not import pyspark)
        from deltalog.sql.session import local_session

        started = time.monotonic()
        session = local_session()
        total = session.range(0, 100, numPartitions=2).selectExpr("sum(id) AS s").collect()[0]["s"]
        seconds = time.monotonic() - started
    except Exception as e:  # a JVM that cannot start raises many kinds of errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return Check("spark", FAIL, f"pyspark {version}: the local session failed: {first}",
                     "check the java row above; set JAVA_HOME to a Java 17+ install"), None
    if total != 4950:
        return Check("spark", FAIL, f"pyspark {version}: a tiny job returned {total}, expected 4950",
                     "reinstall pyspark"), session
    return Check("spark", OK, f"pyspark {version}: {_session_kind(session)} ran a job in {seconds:.1f} s"), session


def _session_kind(session: object) -> str:
    if is_connect(session):
        return f"Spark Connect session ({os.environ.get('SPARK_REMOTE') or 'a session given'})"
    return f"local session {session.sparkContext.master}"  # type: ignore[attr-defined]


def _worker_probe(batches: object) -> object:
    """Runs in a Spark Python worker: the cleaner's task code, on three keys (imported there, in the worker)."""
    import pyarrow as pa

    import deltalog
    from deltalog.log.key_hash import key_hashes

    for _ in batches:  # type: ignore[attr-defined]
        pass
    hi, _lo = key_hashes(pa.array([b"a", b"b", b"a"]))
    yield pa.RecordBatch.from_pylist([{"version": deltalog.__version__, "ok": int(hi[0] == hi[2]) + int(hi[0] != hi[1])}],
                                     schema=pa.schema([("version", pa.string()), ("ok", pa.int64())]))


def check_spark_workers(session: object | None) -> Check:
    """The cleaner's tasks run deltalog's own Python code (pyarrow and numpy) in Spark's Python workers:
    on a cluster that needs deltalog installed on the executors, not only on the driver."""
    import deltalog

    if session is None:
        return Check("spark workers", INFO, "skipped (no Spark session)")
    fix = ("install deltalog (and its dependencies) on every executor, e.g. as a job library "
           "(conf/cleaner_job.json), or in the serverless environment")
    try:
        probe = session.range(0, 1, numPartitions=1).mapInArrow(_worker_probe, "version string, ok long")  # type: ignore[attr-defined]
        found = [tuple(r) for r in probe.collect()]
    except Exception as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        detail = next((line for line in reversed(lines) if "Error" in line), lines[0] if lines else type(e).__name__)
        return Check("spark workers", FAIL, f"a Python worker cannot run the cleaner's code: {detail[:300]}", fix)
    version, ok = found[0]
    if ok != 2:
        return Check("spark workers", FAIL, "a Python worker hashed keys inconsistently", fix)
    if version != deltalog.__version__:
        return Check("spark workers", WARN, f"the workers run deltalog {version}, the driver {deltalog.__version__}",
                     "install the same deltalog version on the driver and the executors")
    return Check("spark workers", OK, f"Python workers import deltalog {version} and hash keys")


def check_delta_spark_jars(session: object | None) -> Check:
    """Informational: deltalog commits through delta-rs and never needs delta-spark's JARs."""
    pip = package_version("delta-spark")
    on_classpath: bool | None = None
    if session is not None and not is_connect(session):  # Spark Connect shows no JVM to ask
        try:
            jvm = session.sparkContext._jvm  # type: ignore[attr-defined]
            jvm.java.lang.Class.forName("io.delta.sql.DeltaSparkSessionExtension")
            on_classpath = True
        except Exception:
            on_classpath = False
    where = {True: "on the Spark classpath", False: "not on the Spark classpath", None: "classpath not checked"}
    detail = (f"delta-spark {'pip package ' + pip if pip else 'pip package not installed'}, JARs "
              f"{where[on_classpath]}; not needed: deltalog writes Delta through delta-rs")
    return Check("delta-spark", INFO, detail)


def check_store_writable(path: str, storage_options: Mapping[str, str] | None = None) -> Check:
    """The store accepts a new file, gives it back, and refuses to create it a second time (the conditional
    put every Delta commit and lease relies on); nothing is left behind. A local store that does not exist
    yet is probed in its nearest existing parent directory, and is not created."""
    try:
        storage = Storage(path, storage_options)
    except DeltalogError as e:
        return Check("store", FAIL, str(e), "point --store or $DELTALOG_STORE at a local path or an s3://, az://, "
                     "abfss:// or gs:// URI")
    if storage.local:
        return _check_local_store(storage.root)
    try:
        storage.check_conditional_put(storage.location(STATE_DIR))
        state = "holds a deltalog store" if is_store(storage) else "has no store yet (it is created on first use)"
    except StorageError as e:
        return Check("store", FAIL, str(e), "use object storage that honours If-None-Match (AWS S3, Azure, GCS)")
    except Exception as e:  # credentials, endpoint, bucket: whatever the object store says
        detail = " ".join(str(e).split())[:300]
        return Check("store", FAIL, f"cannot write to {storage.root}: {detail}",
                     "check the bucket or container and the credentials and endpoint in the environment "
                     "(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...) or --storage-option")
    return Check("store", OK, f"{storage.root} {state}; wrote, read and conditionally created a probe file")


def _check_local_store(target: str) -> Check:
    probe_dir = target
    while not os.path.exists(probe_dir):
        parent = os.path.dirname(probe_dir)
        if parent == probe_dir:
            break
        probe_dir = parent
    if not os.path.isdir(probe_dir):
        return Check("store", FAIL, f"{probe_dir} is not a directory", "point --store or $DELTALOG_STORE at a directory")
    try:
        Storage(probe_dir).check_conditional_put(probe_dir)
    except (OSError, StorageError) as e:
        return Check("store", FAIL, f"cannot write in {probe_dir}: {getattr(e, 'strerror', None) or e}",
                     "point --store or $DELTALOG_STORE at a writable directory")
    state = "exists" if probe_dir == target else f"will be created (in {probe_dir})"
    return Check("store", OK, f"{target} {state}, writable")


@dataclass(frozen=True)
class StoreScan:
    """What :func:`scan_store` found: every damaged file, and the orphans (relative paths) of each partition."""

    partitions: int
    damages: tuple[Damage, ...]
    orphans: tuple[tuple[str, int, tuple[str, ...]], ...]  # (topic, partition, paths) with at least one

    @property
    def orphan_count(self) -> int:
        return sum(len(paths) for _t, _p, paths in self.orphans)


def scan_partition(plog: PartitionLog) -> tuple[list[Damage], list[str]]:
    """One partition's damages (its Delta log first; its data files once the log reads) and orphans."""
    from deltalog.log.vacuum import removal_times  # VACUUM's own view of what commits removed

    found = damage.log_damage(plog.storage, plog.uri)
    if found:
        return found, []  # without a readable log there is no list of data files to check
    try:
        foreign = plog.foreign_commits()  # another engine's DELETE, UPDATE, MERGE...: named, not a traceback
    except CorruptLogError:
        foreign = ()
    if foreign:
        err = foreign_commits.error_for(f"{plog.topic}-{plog.partition}", plog.uri, foreign)
        log_dir = storage_join(plog.uri, damage.DELTA_LOG_DIR)
        return [Damage(plog.topic, plog.partition, log_dir,
                       f"has a commit another engine made that changes records, {c.describe()}; deltalog refuses to "
                       "read or write the partition (the cleaner skips it)",
                       f"restore the table to version {err.restore_version} (Delta's RESTORE: "
                       f"DeltaTable(\"{plog.uri}\").restore({err.restore_version}) in delta-rs, or "
                       f"RESTORE TABLE ... TO VERSION AS OF {err.restore_version})") for c in foreign], []
    try:
        snap = plog.snapshot()
    except CorruptLogError as e:  # delta-rs refuses a log the walk found nothing wrong with
        return [Damage(plog.topic, plog.partition, storage_join(plog.uri, damage.DELTA_LOG_DIR),
                       f"cannot be read: {e}", damage.RESTORE)], []
    found = damage.data_damage(plog.storage, plog.uri, snap.files, footers=True)
    if not found:  # an offset held twice (file stats first, then the offsets of overlapping files only)
        twice = plog.duplicated_offsets(snap)
        if twice is not None:
            found = [Damage(plog.topic, plog.partition, plog.uri, twice.problem(), duplicates.FIX)]
    removed = removal_times(plog.storage, plog.uri)
    return found, damage.orphans(plog.storage, plog.uri, [f.path for f in snap.files], list(removed))


def scan_store(storage: Storage) -> StoreScan:
    """Walk every partition of the store at ``storage`` (no Spark): Delta logs, data files, orphans."""
    logs = LogManager(storage, WallClock(), create=False)
    damages: list[Damage] = []
    orphans: list[tuple[str, int, tuple[str, ...]]] = []
    n = 0
    for plog in logs.logs():
        n += 1
        found, lost = scan_partition(plog)
        damages += found
        if lost:
            orphans.append((plog.topic, plog.partition, tuple(lost)))
    return StoreScan(n, tuple(damages), tuple(orphans))


def check_store_damage(path: str, storage_options: Mapping[str, str] | None = None) -> list[Check]:
    """One FAIL per damaged file (partition, file, what is wrong, what to do), a WARN for orphaned data files,
    or one OK: every partition's Delta log and data files are intact."""
    try:
        storage = Storage(path, storage_options)
        if not is_store(storage):
            return [Check("partitions", INFO, f"{storage.root} holds no store yet: no partitions to check")]
        scan = scan_store(storage)
    except Exception as e:  # the store check above already says why the store cannot be reached
        return [Check("partitions", FAIL, f"cannot walk the store's partitions: {' '.join(str(e).split())[:300]}",
                      "see the store row above")]
    checks = [Check(f"damage {d.partition_name}", FAIL, f"{d.file} {d.problem}", d.fix) for d in scan.damages]
    if scan.orphans:
        where = ", ".join(f"{t}-{p} ({len(paths)})" for t, p, paths in scan.orphans)
        checks.append(Check("orphans", WARN, f"{scan.orphan_count} orphaned data file(s) that no commit references "
                            f"(left by writers killed before their commit): {where}",
                            "nothing to restore: VACUUM ('deltalog cleaner vacuum --apply', or each cleaner cycle) "
                            "removes them once older than file.delete.delay.ms (and at least 60 s)"))
    temp = storage.list_temp_files(storage.root)
    if temp:
        checks.append(Check("temporary files", WARN, f"{len(temp)} temporary file(s) (*.deltalog-tmp, "
                            f"{sum(f.size for f in temp):,} bytes) of writes killed before their rename, e.g. "
                            f"{storage.key(temp[0].location)}",
                            "nothing to restore: 'deltalog cleaner vacuum --apply' (or each cleaner cycle) removes "
                            "them once a day old; sooner, delete them by hand while no deltalog process runs"))
    if not scan.damages:
        checks.insert(0, Check("partitions", OK, f"{scan.partitions} partition(s): every Delta log and data file "
                               "reads, every data file has the size its commit records, no offset is held twice"))
    return checks


def check_state_documents(path: str, storage_options: Mapping[str, str] | None = None) -> list[Check]:
    """One FAIL per damaged state document (the producer-id counter, a transactional id's document, a topic
    marker, an uncleanable mark), a WARN per damaged cleaner figure and per hanging transaction, naming the file
    or the partition and the fix; or one OK (see :mod:`deltalog.state_check`)."""
    from deltalog import state_check

    try:
        storage = Storage(path, storage_options)
        if not is_store(storage):
            return []
        count, problems = state_check.scan_state(storage)
    except Exception as e:  # the store check above already says why the store cannot be reached
        return [Check("state", FAIL, f"cannot read the store's state documents: {' '.join(str(e).split())[:300]}",
                      "see the store row above")]
    checks = [Check(p.name, p.status, p.detail, p.fix) for p in problems]
    if not problems:
        checks.append(Check("state", OK, f"{count} state document(s) (producer ids, transactional ids, topic "
                                         "markers, cleaner state) read and valid; no hanging transaction"))
    return checks


def check_state_tables(path: str, storage_options: Mapping[str, str] | None = None) -> list[Check]:
    """Per state table (docs/state-table.md): OK when it is up to date and equal to its log, WARN when it is behind
    (the next refresh applies the rest), FAIL when it is ahead of its log or differs from it; and one INFO naming
    what each engine needs to read the tables (delta-spark's JARs for Spark, the delta extension for DuckDB)."""
    from deltalog.state.equality import compare
    from deltalog.state.lag import state_lag
    from deltalog.state.table import StateTable

    try:
        storage = Storage(path, storage_options)
        if not is_store(storage):
            return []
        logs = LogManager(storage, WallClock(), create=False)
        topics = [t for t in logs.list_topics() if StateTable(storage, t).exists()]
    except Exception:  # the store rows above already say why the store cannot be read
        return []
    checks = []
    now = int(time.time() * 1000)
    for topic in topics:
        name = f"state table {topic}"
        try:
            lag = state_lag(logs, topic, now)
            dt = StateTable(storage, topic).open()
            comparison = compare(logs, topic, dt) if dt is not None else None
        except DeltalogError as e:
            checks.append(Check(name, FAIL, f"cannot be compared with its log: {' '.join(str(e).split())[:300]}",
                                f"deltalog state refresh {topic} --full"))
            continue
        if lag.ahead:
            checks.append(Check(name, FAIL, "ahead of its log: it records offsets past the log end "
                                + ", ".join(f"{p.partition}:{p.applied_offset}>{p.log_end_offset}"
                                            for p in lag.partitions if p.ahead),
                                f"rebuild it from the log: deltalog state refresh {topic} --full"))
        elif comparison is not None and not comparison.equal:
            checks.append(Check(name, FAIL, f"differs from its log at version {comparison.table_version}: "
                                f"{comparison.missing} missing, {comparison.extra} extra, {comparison.different} "
                                f"different row(s); {'; '.join(comparison.examples[:3])}",
                                f"rebuild it from the log: deltalog state refresh {topic} --full"))
        elif lag.offsets_behind:
            checks.append(Check(name, WARN, f"equal to its log up to the offsets it records, {lag.offsets_behind} "
                                f"offset(s) behind (at most {lag.time_behind_ms // 1000} s)",
                                f"deltalog state refresh {topic}, or let the cleaner job's next cycle do it"))
        else:
            checks.append(Check(name, OK, f"up to date (version {lag.table_version}) and equal to its log"))
    if topics:
        checks.append(Check("state table readers", INFO,
                            "delta-rs, Polars and Databricks read the state tables as they are; Spark needs "
                            "delta-spark (pip install delta-spark; JARs io.delta:delta-spark_2.13 in "
                            "spark.jars.packages); DuckDB needs its delta extension (INSTALL delta); Trino its Delta "
                            "Lake connector (deltalog views --engine ENGINE prints each)"))
    return checks


def run_checks(store_path: str, *, spark: bool = True, storage_options: Mapping[str, str] | None = None,
               progress: Callable[[int, int, str], None] | None = None) -> list[Check]:
    """Every check, in the order a newcomer should fix them. ``progress`` is told ``(steps done, steps in all,
    what is checked now)`` before each step (``deltalog doctor``'s bar: starting Spark alone takes seconds)."""
    checks = [check_python(), check_java()]
    session = None
    steps: list[tuple[str, Callable[[], list[Check]]]] = []
    if spark:
        def spark_checks() -> list[Check]:
            nonlocal session
            spark_check, session = check_spark()
            return [spark_check, check_spark_workers(session)]
        steps.append(("starting Spark", spark_checks))
    else:
        checks.append(Check("spark", INFO, "skipped (--no-spark)"))
    steps += [
        ("package versions", lambda: [
            check_delta_rs(), check_package("pyarrow"), check_package("numpy"),
            check_package("pandas", below_major=3, why="PySpark 4.2/4.3 warns under pandas 3", extra="spark",
                          used_by="Spark"),
            check_package("great-expectations", extra="quality", used_by="deltalog check"),
            check_delta_spark_jars(session)]),
        ("the store is writable", lambda: [check_store_writable(store_path, storage_options)]),
        ("every partition's files", lambda: check_store_damage(store_path, storage_options)),
        ("the state documents", lambda: check_state_documents(store_path, storage_options)),
        ("the state tables", lambda: check_state_tables(store_path, storage_options)),
    ]
    for i, (what, step) in enumerate(steps):
        if progress is not None:
            progress(i, len(steps), what)
        checks += step()
    if progress is not None:
        progress(len(steps), len(steps), "done")
    return checks


def failed(checks: list[Check]) -> bool:
    return any(c.status == FAIL for c in checks)


def render(checks: list[Check], out: Callable[[str], object] = print) -> None:

    out(format_table(("check", "status", "detail"), [(c.name, c.status, c.detail) for c in checks]))
    fixes = [c for c in checks if c.fix and c.status in (FAIL, WARN)]
    if fixes:
        out("")
        out("To fix:")
        for c in fixes:
            out(f"  {c.name} ({c.status}): {c.fix}")
    out("")
    out("Some checks FAILED." if failed(checks) else "Ready: deltalog can run here.")
