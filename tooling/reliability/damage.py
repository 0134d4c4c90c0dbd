"""Damaged tables at every entry point: build a store, damage one partition, try each way in, judge the answer.

Each :data:`KINDS` damage is made to partition 0 of a two-partition compacted topic (partition 1 stays
healthy) through the store's :class:`~deltalog.storage.Storage`, so the same damage is made on a local disk
or an object store. Each :data:`ENTRIES` entry point is then tried for real (the API, or the ``deltalog``
command line run in this process) and :func:`try_entry` says whether it *held*: a deltalog error (the CLI:
``deltalog: error: ...``, exit 1, no traceback) that names the partition and the damaged file. The test
suite (``tests/test_damage.py``) and the figures (``python -m tooling.reliability``) run the same code.
"""

from __future__ import annotations

import contextlib
import io
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deltalog.errors import CleaningFailedError, DeltalogError
from deltalog.log.record import Record
from deltalog.storage import basename, join

TOPIC = "damaged"
DAMAGED_PARTITION = 0
HEALTHY_PARTITION = 1
#: Appends before the checkpoint, and after it (so a commit after the checkpoint can go missing).
BATCHES_BEFORE_CHECKPOINT = 8
BATCHES_AFTER_CHECKPOINT = 3
KEYS = 20

#: kind -> what is done to partition 0.
KINDS = {
    "data_deleted": "a data file deleted",
    "data_truncated": "a data file truncated to half its size",
    "data_overwritten": "a data file overwritten with random bytes of the same size",
    "commit_missing": "a commit file (_delta_log/<version>.json) after the checkpoint missing",
    "hint_dangling": "_last_checkpoint pointing at a deleted checkpoint",
    "checkpoint_corrupt": "the checkpoint file overwritten with random bytes",
}

#: entry point -> what is tried (the CLI ones run ``deltalog`` in this process).
ENTRIES = {
    "read": "store.read(topic, 0)",
    "consume": "deltalog consume --partition 0 --from-beginning",
    "describe": "store.describe(topic)",
    "topics describe": "deltalog topics describe",
    "clean": "store.clean()",
    "cleaner run": "deltalog cleaner run --once",
    "check": "store.check(topic, partitions=[0])",
    "deltalog check": "deltalog check --partition 0",
    "sql": "store.sql(...).collect()",
    "deltalog sql": "deltalog sql",
    "doctor": "deltalog doctor --no-spark",
}
#: (kind, entry) pairs that cannot hold by design, and why: same-size garbage is seen only by reading a data
#: file's footer, which describe (the Delta log and one listing per partition) and the SQL API (a lazy DataFrame,
#: whose Spark tasks then fail with pyspark's error; ``deltalog sql`` names the file) do not do on the driver.
BLIND_SPOTS = {
    ("data_overwritten", "describe"): "reads the Delta log and one listing, no data file",
    ("data_overwritten", "topics describe"): "reads the Delta log and one listing, no data file",
    ("data_overwritten", "sql"): "a lazy DataFrame: its tasks raise pyspark's PythonException, the file named inside",
}
#: Entry points that run Spark jobs.
SPARK_ENTRIES = ("clean", "cleaner run", "check", "deltalog check", "sql", "deltalog sql")


@dataclass(frozen=True)
class DamagedStore:
    """A store whose partition 0 of :data:`TOPIC` has ``kind`` of damage, in ``file`` (a location)."""

    root: str
    storage_options: dict[str, str] | None
    kind: str
    file: str

    def store(self, **options: Any) -> Any:
        from deltalog.store import Store

        return Store(self.root, storage_options=self.storage_options, **options)


@dataclass(frozen=True)
class Outcome:
    """What one entry point answered: ``held`` when it was a deltalog error naming the partition and the file."""

    kind: str
    entry: str
    held: bool
    detail: str
    seconds: float


def build(root: str, kind: str, *, storage_options: dict[str, str] | None = None) -> DamagedStore:
    """A fresh store at ``root`` with ``kind`` of damage to partition 0 (appends and a checkpoint: no Spark)."""
    from deltalog.store import Store

    if kind not in KINDS:
        raise ValueError(f"unknown damage kind {kind!r}; kinds: {', '.join(KINDS)}")
    store = Store(root, storage_options=storage_options)
    store.create_topic(TOPIC, 2, config={"cleanup.policy": "compact", "segment.bytes": "2000",
                                          "min.cleanable.dirty.ratio": "0.01"})
    for p in (DAMAGED_PARTITION, HEALTHY_PARTITION):
        for i in range(BATCHES_BEFORE_CHECKPOINT + BATCHES_AFTER_CHECKPOINT):
            if i == BATCHES_BEFORE_CHECKPOINT:
                store.log(TOPIC, p).table().create_checkpoint()
            store.append(TOPIC, p, [Record(key=f"k{j}".encode(), value=f"v{i}-{j}".encode()) for j in range(KEYS)])
    plog = store.log(TOPIC, DAMAGED_PARTITION)
    storage, log_dir = store.storage, join(plog.uri, "_delta_log")
    checkpoint = join(log_dir, f"{BATCHES_BEFORE_CHECKPOINT:020d}.checkpoint.parquet")
    if kind.startswith("data_"):
        files = plog.snapshot().files
        target = join(plog.uri, files[len(files) // 2].path)  # a middle file: in the section a pass cleans
        data = storage.read_bytes(target)
        if kind == "data_deleted":
            storage.delete(target)
        elif kind == "data_truncated":
            storage.write_bytes(target, data[: len(data) // 2])
        else:
            import random

            storage.write_bytes(target, random.Random(14).randbytes(len(data)))
    elif kind == "commit_missing":
        target = join(log_dir, f"{BATCHES_BEFORE_CHECKPOINT + 2:020d}.json")
        storage.delete(target)
    elif kind == "hint_dangling":
        storage.delete(checkpoint)
        target = join(log_dir, "_last_checkpoint")
    else:
        import random

        target = checkpoint
        storage.write_bytes(target, random.Random(14).randbytes(len(storage.read_bytes(target))))
    return DamagedStore(store.root, dict(storage_options) if storage_options else None, kind, target)


def names_damage(text: str, damaged: DamagedStore) -> bool:
    """Whether ``text`` names the damaged partition and the damaged file."""
    return f"{TOPIC}-{DAMAGED_PARTITION}" in text and basename(damaged.file) in text


def _cli(argv: list[str]) -> tuple[int, str, str]:
    """``deltalog`` in this process: (exit code, stdout, stderr); an escaping exception is a traceback on stderr."""
    from deltalog.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except BaseException:  # noqa: BLE001 - what a user would see: the traceback
            err.write(traceback.format_exc())
            code = 1
    return code, out.getvalue(), err.getvalue()


def _store_args(damaged: DamagedStore) -> list[str]:
    args = ["--store", damaged.root]
    for k, v in (damaged.storage_options or {}).items():
        args += ["--storage-option", f"{k}={v}"]
    return args


def _judge_error(damaged: DamagedStore, error: BaseException) -> tuple[bool, str]:
    text = str(error)
    if not isinstance(error, DeltalogError):
        return False, f"raw {type(error).__module__}.{type(error).__name__}: {' '.join(text.split())[:300]}"
    if not names_damage(text, damaged):
        return False, f"{type(error).__name__} without the partition or the file: {text[:300]}"
    return True, f"{type(error).__name__}: {text[:700]}"


def _json_error(err: str) -> bool:
    """Whether ``err`` ends with the one JSON object a command under ``--output json`` (the default of
    ``deltalog cleaner run``) says its error with: ``{"error": ..., "type": ..., "exit_code": ...}``."""
    import json

    lines = err.strip().splitlines()
    try:
        said = json.loads(lines[-1]) if lines else None
    except ValueError:
        return False
    return isinstance(said, dict) and isinstance(said.get("error"), str)


def _judge_cli(damaged: DamagedStore, code: int, out: str, err: str, *, in_stdout: bool = False) -> tuple[bool, str]:
    if "Traceback" in err:
        return False, f"traceback: {err.strip().splitlines()[-1][:300]}"
    if code == 0:
        return False, "exit 0"
    text = out if in_stdout else err
    if not in_stdout and "deltalog: error:" not in err and not _json_error(err):
        return False, f"exit {code} without 'deltalog: error:' (or, under --output json, an error object): {err[:300]}"
    if not names_damage(text, damaged):
        return False, f"exit {code}, the partition or the file not named: {(text or err)[:300]}"
    line = next((ln for ln in text.splitlines() if basename(damaged.file) in ln), text)
    return True, f"exit {code}: {line.strip()[:300]}"


def try_entry(damaged: DamagedStore, entry: str, spark: Any = None) -> Outcome:
    """Try one entry point on ``damaged`` (Spark ones on ``spark``; the CLI ones on the active session) and
    judge the answer. Marks left by an earlier clean are cleared first, so each clean meets the damage anew."""
    from deltalog.cleaner.uncleanable import UncleanablePartitions

    store = damaged.store(spark=spark)
    UncleanablePartitions(store.storage).reset()
    started = time.monotonic()
    held, detail = _try(damaged, entry, store)
    return Outcome(damaged.kind, entry, held, detail, time.monotonic() - started)


def _try(damaged: DamagedStore, entry: str, store: Any) -> tuple[bool, str]:
    cli = _store_args(damaged)
    api: dict[str, Callable[[], Any]] = {
        "read": lambda: store.read(TOPIC, DAMAGED_PARTITION),
        "describe": lambda: store.describe(TOPIC),
        "sql": lambda: store.sql(f"SELECT count(*) FROM {TOPIC}_current").collect(),
    }
    if entry in api:
        try:
            api[entry]()
        except Exception as e:  # noqa: BLE001 - judged: a raw error is the finding
            return _judge_error(damaged, e)
        return False, "no error"
    if entry == "clean":
        try:
            results = store.clean()
        except CleaningFailedError as e:
            held, detail = _judge_error(damaged, e)
            cleaned = {(r.topic, r.partition) for r in e.results}
            if (TOPIC, HEALTHY_PARTITION) not in cleaned:
                return False, f"the healthy partition was not cleaned: {detail}"
            return held, detail
        except Exception as e:  # noqa: BLE001
            return _judge_error(damaged, e)
        return False, f"no error ({len(results)} passes)"
    if entry == "check":
        try:
            result = store.check(TOPIC, partitions=[DAMAGED_PARTITION], cleans="none", save=False)
        except Exception as e:  # noqa: BLE001
            return _judge_error(damaged, e)
        errors = [f"{e.error}" for s, e in result.failures() if s.partition == DAMAGED_PARTITION and e.error]
        if result.success or not any(names_damage(f"{TOPIC}-{DAMAGED_PARTITION} {t}", damaged) for t in errors):
            return False, f"check {'passed' if result.success else 'failed without naming the file'}"
        return True, f"failed check: {errors[0][:300]}"
    argv = {
        "consume": [*cli, "consume", TOPIC, "--partition", str(DAMAGED_PARTITION), "--from-beginning"],
        "topics describe": [*cli, "topics", "describe", TOPIC],
        "cleaner run": [*cli, "cleaner", "run", "--once", "--no-vacuum"],
        "deltalog check": [*cli, "check", TOPIC, "--partition", str(DAMAGED_PARTITION), "--cleans", "none"],
        "deltalog sql": [*cli, "sql", f"SELECT count(*) FROM {TOPIC}_current"],
        "doctor": [*cli, "doctor", "--no-spark"],
    }[entry]
    code, out, err = _cli(argv)
    return _judge_cli(damaged, code, out, err, in_stdout=entry in ("deltalog check", "doctor"))


@dataclass(frozen=True)
class OrphanOutcome:
    """An uncommitted data file (what an append killed before its commit leaves): what doctor and VACUUM made of it."""

    doctor_warned: int  # orphans counted by doctor's WARN
    kept_inside_delay: bool  # VACUUM at once left it
    removed_after_delay: bool  # VACUUM past the delay removed it, and only it
    doctor_after: str  # doctor's partitions status afterwards
    records_intact: bool  # the committed records read as before

    @property
    def held(self) -> bool:
        return (self.doctor_warned == 1 and self.kept_inside_delay and self.removed_after_delay
                and self.doctor_after == "OK" and self.records_intact)


def orphan_round_trip(root: str) -> OrphanOutcome:
    """Write a data file the way an append does and never commit it, then run doctor, VACUUM inside the delay
    and VACUUM past it (the store's manual clock moved past ``ORPHAN_MIN_AGE_MS``: ``file.delete.delay.ms`` is 1 s,
    an orphan waits at least that long)."""
    from deltalog.cli.doctor_checks import WARN, check_store_damage
    from deltalog.clock import ManualClock
    from deltalog.log import arrow_records, delta
    from deltalog.store import Store

    clock = ManualClock(int(time.time() * 1000))
    store = Store(root, clock=clock)
    store.create_topic("orphans", 1, config={"cleanup.policy": "compact", "file.delete.delay.ms": "1000"})
    store.append("orphans", 0, [Record(key=b"k", value=b"v")])
    plog = store.log("orphans", 0)
    import pyarrow as pa

    batch = arrow_records.validated(pa.table({"key": [b"k"], "value": [b"w"]}), plog.head().config, "orphans",
                                    clock.now_ms())
    orphan = delta.write_data_file(store.storage, plog.uri, arrow_records.with_log_columns(batch, range(1, 2), 0),
                                   clock.now_ms())
    warned = [c for c in check_store_damage(store.root) if c.status == WARN]
    count = int(warned[0].detail.split(" ", 1)[0]) if warned else 0
    kept = store.vacuum(dry_run=False)[0].files == ()
    from deltalog.log.vacuum import ORPHAN_MIN_AGE_MS

    clock.advance(ORPHAN_MIN_AGE_MS + 1_000)
    removed = store.vacuum(dry_run=False)[0].files == (orphan.path,)
    after = check_store_damage(store.root)
    return OrphanOutcome(count, kept, removed, "/".join(c.status for c in after),
                         [r.value for r in store.read("orphans", 0)] == [b"v"])


def measure(workdir: str, spark: Any, log: Callable[[str], None] = print) -> list[Outcome]:
    """Every kind of damage x every entry point, one fresh store per kind under ``workdir``."""
    outcomes = []
    for kind in KINDS:
        damaged = build(join(workdir, f"damage-{kind}"), kind)
        for entry in ENTRIES:
            outcome = try_entry(damaged, entry, spark)
            log(f"damage {kind} / {entry}: {'held' if outcome.held else 'NOT HELD'} ({outcome.seconds:.1f} s)")
            outcomes.append(outcome)
    return outcomes
