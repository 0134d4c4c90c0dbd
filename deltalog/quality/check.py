"""``store.check(topic)``: run the guarantee suites with Great Expectations and keep the results.

By default, one ephemeral Great Expectations context per run, a Spark data source over the store's session,
one dataframe asset and whole-dataframe batch definition per suite, and a validation definition per suite so
the results can be rendered as Great Expectations data docs. Given a user's context (``context=``), the
suites, validation definitions and Checkpoints live there under stable names instead
(:mod:`deltalog.quality.ge_context`). Each run's results (deltalog's summary and
the Great Expectations validation results) are written as JSON to
``<root>/_deltalog/checks/<topic>/<time>-<id>.json`` through the store's :class:`~deltalog.storage.Storage`;
with ``data_docs=True`` the HTML site is built at ``<root>/_deltalog/checks/<topic>/data_docs/index.html``
(on an object store: built in a local temporary directory, then uploaded there).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from deltalog.errors import CheckFailedError, CorruptLogError, InvalidConfigError
from deltalog.log import damage
from deltalog.log.log_manager import LogManager
from deltalog.quality.frames import (
    CleanCommit,
    across_clean_frame,
    clean_commits,
    files_present,
    partition_frame,
)
from deltalog.quality.runner import ExpectationOutcome, _Runner
from deltalog.quality.suites import (
    across_clean_guarantees,
    clean_parameters,
    partition_guarantees,
    partition_parameters,
    state_guarantees,
)
from deltalog.state.equality import compare
from deltalog.state.table import StateTable
from deltalog.storage import join

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

CHECKS_DIR = "checks"


@dataclass(frozen=True)
class SuiteOutcome:
    """One suite run on one partition: ``suite`` is ``"partition"`` (the snapshot at ``version``) or
    ``"clean"`` (the clean commit at ``version`` against ``version - 1``)."""

    topic: str
    partition: int
    suite: str
    version: int
    expectations: tuple[ExpectationOutcome, ...]

    @property
    def success(self) -> bool:
        return all(e.success for e in self.expectations)

    @property
    def name(self) -> str:
        if self.suite == "state":  # the topic's state table (partition -1: all partitions)
            return f"{self.topic}.state-v{self.version}"
        what = "partition" if self.suite == "partition" else "clean"
        return f"{self.topic}-{self.partition}.{what}-v{self.version}"

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "suite": self.suite, "version": self.version,
                "success": self.success, "expectations": [e.as_dict() for e in self.expectations]}


@dataclass(frozen=True)
class CheckResult:
    """The verdict of ``store.check(topic)``: false when any expectation of any suite failed."""

    topic: str
    checked_at_ms: int
    suites: tuple[SuiteOutcome, ...]
    notes: tuple[str, ...] = ()
    path: str | None = None
    data_docs: str | None = None
    validations: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    @property
    def success(self) -> bool:
        return all(s.success for s in self.suites)

    def __bool__(self) -> bool:
        return self.success

    def partition(self, partition: int) -> list[SuiteOutcome]:
        return [s for s in self.suites if s.partition == partition]

    def failures(self) -> list[tuple[SuiteOutcome, ExpectationOutcome]]:
        """Every failed expectation with the suite (partition, version) it failed in."""
        return [(s, e) for s in self.suites for e in s.expectations if not e.success]

    def failed_expectations(self) -> set[str]:
        return {e.name for _, e in self.failures()}

    def as_dict(self, *, with_validations: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {"topic": self.topic, "success": self.success, "checked_at_ms": self.checked_at_ms,
                             "suites": [s.as_dict() for s in self.suites], "notes": list(self.notes),
                             "path": self.path, "data_docs": self.data_docs}
        if with_validations:
            d["great_expectations"] = list(self.validations)
        return d

    def summary(self) -> str:
        """A readable report: one line per suite, then every failure with its sample."""
        n = sum(len(s.expectations) for s in self.suites)
        failed = self.failures()
        lines = [f"Check of topic {self.topic!r}: {'PASSED' if self.success else 'FAILED'} "
                 f"({n - len(failed)}/{n} expectations passed in {len(self.suites)} suites)"]
        for s in self.suites:
            ok = sum(e.success for e in s.expectations)
            lines.append(f"  {'ok  ' if s.success else 'FAIL'} {s.name}: {ok}/{len(s.expectations)}")
        for s, e in failed:
            where = "state table" if s.suite == "state" else f"partition {s.partition}"
            lines.append(f"  {where}, {s.suite} suite (version {s.version}): {e.name} failed: "
                         f"{e.description}")
            if e.error:
                lines.append(f"      error: {e.error}")
            else:
                lines.append(f"      {e.unexpected_count} offending record(s); sample: "
                             + ", ".join(json.dumps(r, default=str) for r in e.sample[:5]))
        lines += [f"  note: {note}" for note in self.notes]
        if self.path:
            lines.append(f"  results: {self.path}")
        if self.data_docs:
            lines.append(f"  data docs: {self.data_docs}")
        return "\n".join(lines)


# -- running ---------------------------------------------------------------------------------------------


def check_topic(
    logs: LogManager,
    spark: SparkSession,
    topic: str,
    *,
    partitions: Iterable[int] | None = None,
    cleans: str | Mapping[int, Sequence[int]] = "last",
    data_docs: bool = False,
    save: bool = True,
    context: Any = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> CheckResult:
    """Run the per-partition suite on the latest snapshot of each partition, and the across-clean suite
    on its cleans: ``cleans="last"`` (default) the newest clean, ``"all"`` every clean whose earlier
    version's files are still on disk (VACUUM removes them after ``file.delete.delay.ms``), ``"none"``,
    or a mapping partition -> clean commit versions.

    ``context``: a Great Expectations data context, or the directory of a file context, to run in instead of
    an ephemeral one (:mod:`deltalog.quality.ge_context`): the suites are saved there, each run is one of its
    Checkpoints, results land in its stores and data docs are built by the checkpoints' actions.

    ``progress`` is told ``(partitions done, partitions in all, what is validated now)`` before each suite (the
    state table's suite, when it runs, is one more step)."""
    all_partitions = logs.partitions(topic)  # raises for an unknown topic before any path is built
    now = logs.clock.now_ms()
    topic_dir = logs.state_path(CHECKS_DIR, topic)
    if context is not None:
        from deltalog.quality.ge_context import ContextRunner, open_context

        runner: _Runner = ContextRunner(open_context(context))
        docs_location = docs_dir = None
    else:
        docs_location = join(topic_dir, "data_docs") if data_docs else None
        # Great Expectations writes its site to a local directory: on an object store, a temporary one, uploaded.
        docs_dir = (docs_location if docs_location is None or logs.storage.local
                    else tempfile.mkdtemp(prefix="gx-docs-"))
        runner = _Runner(docs_dir)
    wanted = list(partitions) if partitions is not None else all_partitions
    suites: list[SuiteOutcome] = []
    notes: list[str] = []
    steps = len(wanted) + (1 if partitions is None else 0)

    def tell(done: int, now: str) -> None:
        if progress is not None:
            progress(done, steps, now)

    for i, p in enumerate(wanted):
        tell(i, f"partition {p}")
        log = logs.log(topic, p)
        try:
            snap = log.snapshot()
            damage.raise_data_damage(log.storage, log.uri, snap.files, footers=True)
        except CorruptLogError as e:  # damaged: one failed expectation naming the file, and on to the next partition
            suites.append(_damaged_suite(topic, p, log, e))
            continue
        history = clean_commits(log)
        last = history[0] if history else None
        outcomes = runner.run(topic, "partition", f"{topic}-{p}.partition-v{snap.version}",
                              partition_guarantees(snap, last, saved=context is not None),
                              partition_frame(spark, log, snap), partition_parameters(snap, last))
        suites.append(SuiteOutcome(topic, p, "partition", snap.version, outcomes))
        for commit in _cleans_to_check(history, cleans, p):
            tell(i, f"partition {p}, across the clean at version {commit.version}")
            try:
                before = log.snapshot(commit.before_version)
                after = log.snapshot(commit.version)
            except CorruptLogError as e:  # an older version's commit files are damaged
                notes.append(f"partition {p}: clean at version {commit.version} not checked: {e}")
                continue
            if not files_present(log, before):
                notes.append(f"partition {p}: clean at version {commit.version} not checked: files of version "
                             f"{commit.before_version} were already removed by VACUUM")
                continue
            retention_ms = after.config.delete_retention_ms
            outcomes = runner.run(topic, "clean", f"{topic}-{p}.clean-v{commit.version}",
                                  across_clean_guarantees(commit, retention_ms),
                                  across_clean_frame(spark, log, before, after), clean_parameters(commit, retention_ms))
            suites.append(SuiteOutcome(topic, p, "clean", commit.version, outcomes))
    if partitions is None:
        tell(len(wanted), "the state table")
        suites.extend(_state_suite(logs, spark, runner, topic))
    tell(steps, "saving the results")
    docs_index = runner.data_docs(build=data_docs)
    if docs_dir is not None and docs_location is not None:
        runner.context.build_data_docs(site_names=["deltalog"])
        if docs_dir != docs_location:
            _upload_tree(logs, docs_dir, docs_location)
        docs_index = join(docs_location, "index.html")
    result = CheckResult(topic, now, tuple(suites), tuple(notes), None, docs_index, tuple(runner.validations))
    if save:
        path = join(topic_dir, f"{now}-{uuid.uuid4().hex[:8]}.json")
        result = CheckResult(topic, now, result.suites, result.notes, path, docs_index, result.validations)
        logs.storage.write_json(path, result.as_dict(with_validations=True), indent=1)
    if not result.success:
        logger.warning("%s", result.summary())
    return result


def _state_suite(logs: LogManager, spark: SparkSession, runner: _Runner, topic: str) -> list[SuiteOutcome]:
    """The state-table suite of ``topic`` when it has a state table: the comparison's rows validated
    (:func:`~deltalog.quality.suites.state_guarantees`)."""
    dt = StateTable(logs.storage, topic).open()
    if dt is None:
        return []
    details = compare(logs, topic, dt).details
    assert details is not None
    offsets = pc.coalesce(details.column("table_offset"), details.column("log_offset"))
    frame = spark.createDataFrame(details.append_column("offset", offsets).to_pandas())
    outcomes = runner.run(topic, "state", f"{topic}.state-v{dt.version()}", state_guarantees(), frame, {})
    return [SuiteOutcome(topic, -1, "state", dt.version(), outcomes)]


#: The expectation a damaged partition fails instead of its suites (see :mod:`deltalog.log.damage`).
READABLE = "partition_files_readable"


def _damaged_suite(topic: str, partition: int, log: Any, error: CorruptLogError) -> SuiteOutcome:
    """A damaged partition's suite: one failed expectation whose error names the damaged file(s)."""
    try:
        version = log.table(refresh=False).version()
    except CorruptLogError:  # no version can be read at all
        version = -1
    outcome = ExpectationOutcome(READABLE, "the Delta log and every data file of the current version can be read",
                                 False, 0, (), str(error))
    return SuiteOutcome(topic, partition, "partition", version, (outcome,))


def _cleans_to_check(history: list[CleanCommit], cleans: str | Mapping[int, Sequence[int]],
                     partition: int) -> list[CleanCommit]:
    if isinstance(cleans, Mapping):
        versions = set(cleans.get(partition, ()))
        return [c for c in history if c.version in versions]
    if cleans == "last":
        return history[:1]
    if cleans == "all":
        return list(history)
    if cleans == "none":
        return []
    raise InvalidConfigError(f"cleans must be 'last', 'all', 'none' or a mapping partition -> versions, not {cleans!r}")


def check_after_clean(logs: LogManager, spark: SparkSession, topic: str, results: Sequence[Any], *,
                      context: Any = None) -> dict[int, CheckFailedError]:
    """``deltalog.check.after.clean``: check each clean just made on ``topic`` (in ``context``, a user's Great
    Expectations context, if given); the partitions whose guarantees broke, each with the error that says how."""
    cleans: dict[int, list[int]] = {}
    for r in results:
        cleans.setdefault(r.partition, []).append(r.version)
    result = check_topic(logs, spark, topic, partitions=sorted(cleans), cleans=cleans, context=context)
    broken = sorted({s.partition for s in result.suites if not s.success})
    return {p: CheckFailedError(f"data-quality check failed after cleaning {topic}-{p}:\n{result.summary()}", result)
            for p in broken}


def saved_results(logs: LogManager, topic: str) -> list[str]:
    """Paths of the saved check results of a topic, oldest first."""
    d = logs.state_path(CHECKS_DIR, topic)
    base = logs.storage.key(d)
    return sorted(f.location for f in logs.storage.list_files(d)
                  if f.location.endswith(".json") and "/" not in logs.storage.key(f.location)[len(base):].strip("/"))


def _upload_tree(logs: LogManager, local_dir: str, location: str) -> None:
    """Copy a local directory (Great Expectations' data docs) to ``location`` in the store, then remove it."""
    try:
        for dirpath, _dirnames, filenames in os.walk(local_dir):
            for name in filenames:
                rel = os.path.relpath(os.path.join(dirpath, name), local_dir).replace(os.sep, "/")
                with open(os.path.join(dirpath, name), "rb") as f:
                    logs.storage.write_bytes(join(location, rel), f.read())
    finally:
        shutil.rmtree(local_dir, ignore_errors=True)
