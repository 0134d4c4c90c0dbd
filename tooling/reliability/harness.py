"""The crash and concurrency harness: real processes, real SIGKILLs, and the store checked against a model.

Every scenario runs against a store ``location`` (a local path today; an object-store URI with its
``storage_options`` and environment once stores take URIs: nothing here reads the store other than through
deltalog's API, except the optional count of orphaned files on a local disk) and keeps its own files (side
files of acknowledgements, the processes' logs) in a local ``workdir``:

* **producer kills**: a producer process appending random batches (and rolling) beside a bystander producer
  is SIGKILLed at a random moment after it starts appending, or kills itself at an append or roll commit
  boundary (``DELTALOG_FAULT_KILL``, :mod:`deltalog.log.faults`): before the commit (its data file written,
  no commit) or after it (committed, not yet acknowledged).
* **cleaner kills**: with every partition made dirty, a cleaner process (``deltalog cleaner run --once``, the
  job ``python -m deltalog.jobs.cleaner_job --once``, or ``Store.clean()`` in a script, in turn) is SIGKILLed
  with its whole process group (Spark's JVM and Python workers too) at a random moment of its cycle, or
  kills itself right before or after its n-th cleaning or retention commit.
* **concurrency**: several producer processes append for a bounded time while two cleaner jobs, started at
  the same moment, run continuously with retention, tombstone expiry and VACUUM.

After every kill the store is verified (:func:`tooling.reliability.model.verify`) as it was left, then a
cleaning pass in the harness's own process must complete (no failure, no partition busy, no lost race) and
the store is verified again, with the compaction check (:func:`~tooling.reliability.model.verify_compacted`).
Results are data (:class:`KillOutcome`, :class:`ConcurrencyOutcome`), which the tests assert on and
``python -m tooling.reliability`` writes up in ``docs/RELIABILITY.md``.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import deltalog
from deltalog.log import faults
from tooling.reliability.model import (
    Batch,
    Producer,
    Verification,
    Workload,
    read_side_files,
    verify,
    verify_compacted,
)
from tooling.reliability.model import wall_ms as model_wall_ms
from tooling.reliability.worker import READY

#: What the job and ``deltalog cleaner run`` log once their Spark session is up and the first cycle starts.
JOB_READY = "deltalog cleaner on "
_PASS_STARTED = re.compile(r"cleaning (\S+): dirty section")
_FAULT_LINE = re.compile(r"deltalog fault injection: SIGKILL at (\S+) #(\d+)")
_CLI_MAIN = "import sys; from deltalog.cli import main; sys.exit(main(sys.argv[1:]))"

#: The kill scenarios' topics: ``crash`` is compacted (tombstones kept a day: the model checks every one),
#: ``crash-retained`` is compact,delete with records a producer dates two minutes back, so retention deletes
#: them in every cycle (a retention commit to kill at).
KILL_TOPICS = {"crash": 3, "crash-retained": 1}
KILL_TOPIC_CONFIGS = {
    "crash": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"},
    "crash-retained": {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.01",
                       "retention.ms": "60000"},
}
KILL_WORKLOAD = Workload({"crash": 3}, keys=30, max_batch=8, tombstones=0.1, rolls=0.3)
RETAINED_WORKLOAD = Workload({"crash-retained": 1}, keys=10, max_batch=4, tombstones=0.1, rolls=1.0,
                             age_ms={"crash-retained": 120_000})

#: The concurrency scenario's topics: segments roll every 500 ms (and at 3,000 bytes in ``busy-retained``),
#: tombstones expire after 3 s, retention deletes after 4 s, and VACUUM removes replaced files after 2 s, all
#: while producers append.
BUSY_TOPICS = {"busy": 3, "busy-retained": 1}
BUSY_TOPIC_CONFIGS = {
    "busy": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "500",
             "delete.retention.ms": "3000", "file.delete.delay.ms": "2000"},
    # segment.bytes keeps cleaned segments apart: a group merged with a young segment takes its newest timestamp,
    # and would never age past retention.ms while producers write (Kafka's groupSegmentsBySize does the same).
    "busy-retained": {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "500",
                      "segment.bytes": "3000", "delete.retention.ms": "3000", "retention.ms": "4000",
                      "file.delete.delay.ms": "2000"},
}
BUSY_WORKLOAD = Workload(BUSY_TOPICS, keys=50, max_batch=10, tombstones=0.15, rolls=0.0, pause_s=0.02)

CLEANER_ENTRIES = ("cli", "job", "api")
#: The commit boundaries a cleaner run is killed at (``<point>@<n>``: the n-th time the process reaches it).
CLEANER_BOUNDARIES = ("clean:before-commit@1", "clean:after-commit@1", "clean:before-commit@2",
                      "clean:after-commit@2", "retention:before-commit@1", "retention:after-commit@1")
PRODUCER_BOUNDARIES = ("append:before-commit", "append:after-commit", "roll:before-commit", "roll:after-commit")


def cleaner_boundary_plan(kills: int) -> list[tuple[str, str]]:
    """``kills`` (entry point, boundary) pairs that take every pair in turn, varying both from the first kill on
    (18 kills cover the 6 boundaries x 3 entry points)."""
    b, e = len(CLEANER_BOUNDARIES), len(CLEANER_ENTRIES)
    return [(CLEANER_ENTRIES[(i + i // b) % e], CLEANER_BOUNDARIES[i % b]) for i in range(kills)]


def producer_boundary_plan(kills: int) -> list[str]:
    """``kills`` producer boundaries: each append/roll boundary in turn, at its 1st to 5th occurrence."""
    return [f"{PRODUCER_BOUNDARIES[i % len(PRODUCER_BOUNDARIES)]}@{1 + i % 5}" for i in range(kills)]


def _package_parents() -> list[str]:
    """Where the worker processes find ``deltalog`` and this ``tooling`` package (``python -m
    tooling.reliability.worker``): the checkout's root, and deltalog's own parent when it is installed elsewhere."""
    roots = [str(Path(__file__).resolve().parents[2]), str(Path(deltalog.__file__).resolve().parents[1])]
    return list(dict.fromkeys(roots))


@dataclass
class KillOutcome:
    """One kill: what was killed, how and where, and what the checks found afterwards."""

    kind: str  # "producer" or "cleaner"
    how: str  # "random" or "boundary"
    entry: str  # producer | cli | job | api
    target: str | None  # the boundary asked for (<point>@<n>)
    killed: bool  # died of SIGKILL (False: finished first, or never reached the boundary)
    where: str  # where the kill landed
    seconds: float  # from the worker's ready line to the kill
    verification: Verification | None = None  # the store as the kill left it
    recovery: Verification | None = None  # after the next pass
    next_pass: str = ""  # what the next pass did ("" when none was run)
    problems: list[str] = field(default_factory=list)

    @property
    def survived(self) -> bool:
        return self.killed and not self.problems


@dataclass
class ConcurrencyOutcome:
    producers: int
    jobs: int
    seconds: float
    batches_acked: int
    records_acked: int
    job_cycles: list[int]
    passes: list[int]
    busy_skips: int
    lost_races: int
    segments_deleted: int
    files_vacuumed: int
    job_exit_codes: list[int | None]
    drain_seconds: float = 0.0  # after the producers stopped, until both jobs found nothing left to clean
    verification: Verification | None = None
    recovery: Verification | None = None
    problems: list[str] = field(default_factory=list)


class Harness:
    """Runs the scenarios against one store. ``spark`` is the session the harness's own recovery passes run
    on (None: the store's embedded one); ``env`` is added to every process's environment (object-store
    endpoints and credentials, say); ``log`` gets a line per step."""

    def __init__(self, location: str, workdir: str | os.PathLike[str], *, spark: Any = None,
                 storage_options: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
                 seed: int = 0, spark_master: str = "local[1]", log: Callable[[str], None] = lambda _: None) -> None:
        self.location = location
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.spark = spark
        self.storage_options = dict(storage_options or {})
        self.rng = random.Random(seed)
        self.log = log
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([*_package_parents(), *filter(None, os.environ.get("PYTHONPATH", "").split(
                os.pathsep))]),
            "PYSPARK_PYTHON": sys.executable,
            "DELTALOG_SPARK_MASTER": spark_master,
            "DELTALOG_SPARK_LOG_LEVEL": "ERROR",
            **(env or {}),
        }
        self.env.pop(faults.ENV, None)
        #: Per entry point, the span after a cleaner's ready line in which its random kill is drawn (see
        #: :meth:`cleaner_kill`): it tracks the length of a cycle.
        self.windows: dict[str, float] = dict.fromkeys(CLEANER_ENTRIES, 8.0)
        self._round = 0
        self._dirtier: Producer | None = None
        self._retained: Producer | None = None

    # -- stores and processes --------------------------------------------------------------------------------

    def store(self) -> Any:
        from deltalog.store import Store

        options = {"storage_options": self.storage_options} if self.storage_options else {}
        return Store(self.location, spark=self.spark, **options)

    def _spec_store(self) -> dict[str, Any]:
        return {"store": self.location, **({"storage_options": self.storage_options} if self.storage_options else {})}

    def _start(self, argv: Sequence[str], name: str, env: Mapping[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
        logfile = self.workdir / "logs" / f"{name}.log"
        logfile.parent.mkdir(exist_ok=True)
        with open(logfile, "wb") as out:
            proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env={**self.env, **(env or {})}, start_new_session=True)
        return proc, logfile

    def _start_producer(self, side_dir: Path, name: str, workload: Workload, *, batches: int | None = None,
                        seconds: float | None = None, env: Mapping[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
        spec = {**self._spec_store(), "name": name, "side": str(side_dir / f"{name}.side.jsonl"),
                "workload": workload.as_json(), "seed": self.rng.randrange(2**31), "batches": batches,
                "seconds": seconds}
        return self._start([sys.executable, "-m", "tooling.reliability.worker", "producer", json.dumps(spec)], name,
                           env)

    def _start_cleaner(self, entry: str, name: str, env: Mapping[str, str] | None = None
                       ) -> tuple[subprocess.Popen, Path]:
        if entry == "cli":
            argv = [sys.executable, "-c", _CLI_MAIN, "--store", self.location, "cleaner", "run", "--once",
                    "--progress-interval", "5"]
        elif entry == "job":
            argv = [sys.executable, "-m", "deltalog.jobs.cleaner_job", "--store", self.location, "--once"]
        else:
            argv = [sys.executable, "-m", "tooling.reliability.worker", "clean", json.dumps(self._spec_store())]
        return self._start(argv, name, env)

    @staticmethod
    def _wait_for(logfile: Path, marker: str, proc: subprocess.Popen, timeout_s: float) -> float | None:
        """Wait until ``marker`` appears in the process's log; the monotonic time it was seen, or None if the
        process ended (or the time ran out) first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if marker in logfile.read_text(errors="replace"):
                return time.monotonic()
            if _exited(proc):
                return time.monotonic() if marker in logfile.read_text(errors="replace") else None
            time.sleep(0.02)
        return None

    @staticmethod
    def _kill_group(proc: subprocess.Popen) -> None:
        """SIGKILL the process and everything it started (Spark's JVM and Python workers), then reap it.

        The group is signalled only while the process is unreaped: its pid, which is the group's id, cannot
        have been reused by then, so nothing but what this harness started is ever signalled."""
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()

    # -- checks ----------------------------------------------------------------------------------------------

    def batches(self, side_dir: Path) -> list[Batch]:
        return read_side_files(sorted(side_dir.glob("*.side.jsonl")))

    def _recover(self, batches: list[Batch], outcome_problems: list[str]) -> tuple[Verification, str]:
        """The next pass, in this process: it must complete (no failure, busy partition or lost race), and the
        store must then pass the model and the compaction check."""
        store = self.store()
        round_ = store.log_cleaner().clean_filthiest_logs()
        what = (f"{len(round_.cleans)} pass(es); failures {len(round_.failures)}, busy {len(round_.busy)}, "
                f"lost races {len(round_.conflicts)}")
        if round_.failures or round_.busy or round_.conflicts:
            outcome_problems.append(f"the next pass did not complete: {what}: "
                                    f"{[f.message[:300] for f in round_.failures]}")
        after = verify(self.store(), batches)
        outcome_problems += [f"after the next pass: {p}" for p in after.problems]
        outcome_problems += [f"after the next pass: {p}" for p in verify_compacted(self.store(), batches)]
        return after, what

    def _check(self, outcome: KillOutcome, side_dir: Path, *, recover: bool) -> KillOutcome:
        batches = self.batches(side_dir)
        outcome.verification = verify(self.store(), batches)
        outcome.problems += outcome.verification.problems
        if recover:
            outcome.recovery, outcome.next_pass = self._recover(batches, outcome.problems)
        return outcome

    # -- setup -----------------------------------------------------------------------------------------------

    def _create_topics(self, topics: Mapping[str, int], configs: Mapping[str, Mapping[str, str]]) -> None:
        store = self.store()
        for topic, partitions in topics.items():
            if not store.topic_exists(topic):
                store.create_topic(topic, partitions, config=dict(configs[topic]))

    def _kill_dir(self) -> Path:
        side = self.workdir / "kills"
        side.mkdir(exist_ok=True)
        self._create_topics(KILL_TOPICS, KILL_TOPIC_CONFIGS)
        return side

    def _dirty_everything(self, side: Path) -> None:
        """In this process: two batches into every ``crash`` partition and old records into ``crash-retained``,
        each followed by a roll, so every partition has something to clean (and retention something to delete)."""
        store = self.store()
        if self._dirtier is None:
            self._dirtier = Producer(store, "h", side / "h.side.jsonl", KILL_WORKLOAD, seed=self.rng.randrange(2**31))
            self._retained = Producer(store, "hr", side / "hr.side.jsonl", RETAINED_WORKLOAD,
                                      seed=self.rng.randrange(2**31))
        assert self._retained is not None
        self._dirtier.store = self._retained.store = store
        for partition in range(KILL_TOPICS["crash"]):
            for _ in range(2):
                self._dirtier.batch("crash", partition)
            store.roll("crash", partition)
        self._retained.batch("crash-retained", 0)
        store.roll("crash-retained", 0)

    def _commits(self) -> dict[tuple[str, int], int]:
        store = self.store()
        return {(t, p): store.log(t, p).table().version() for t in KILL_TOPICS for p in range(KILL_TOPICS[t])}

    def _operations_since(self, versions: Mapping[tuple[str, int], int]) -> Counter[str]:
        store = self.store()
        ops: Counter[str] = Counter()
        for (t, p), v in versions.items():
            table = store.log(t, p).table()
            new = table.version() - v
            if new > 0:
                ops.update(str(h.get("deltalog.operation", h.get("operation"))) for h in table.history(new))
        return ops

    # -- producer kills ----------------------------------------------------------------------------------------

    def producer_kill(self, boundary: str | None = None) -> KillOutcome:
        """Kill a producer at a random moment (``boundary`` None) or at ``<point>@<n>`` of its own commits."""
        side = self._kill_dir()
        self._round += 1
        name = f"r{self._round}"
        env = {faults.ENV: boundary} if boundary else None
        victim, victim_log = self._start_producer(side, f"{name}-victim", KILL_WORKLOAD, seconds=60, env=env)
        bystander, _ = self._start_producer(side, f"{name}-bystander", KILL_WORKLOAD, batches=10)
        outcome = KillOutcome("producer", "boundary" if boundary else "random", "producer", boundary, False, "", 0.0)
        ready = self._wait_for(victim_log, READY, victim, 180)
        if ready is None:
            outcome.problems.append(f"the producer never started: {victim_log.read_text()[-2000:]}")
        elif boundary:
            died = _wait_exit(victim, 120)
            outcome.seconds = time.monotonic() - ready
            self._kill_group(victim)
            hit = _FAULT_LINE.search(victim_log.read_text(errors="replace"))
            outcome.killed = died and victim.returncode == -signal.SIGKILL and hit is not None
            outcome.where = f"at {hit.group(1)} #{hit.group(2)}" if hit else "boundary not reached"
        else:
            delay = self.rng.uniform(0.05, 1.5)
            _wait_exit(victim, max(0.0, ready + delay - time.monotonic()))
            outcome.killed = not _exited(victim)
            outcome.seconds = time.monotonic() - ready
        self._kill_group(victim)
        if bystander.wait(timeout=300) != 0:
            outcome.problems.append(f"the bystander producer failed: exit {bystander.returncode}")
        in_flight = _last_in_flight(side / f"{name}-victim.side.jsonl")
        self._check(outcome, side, recover=False)
        landed = in_flight is not None and outcome.verification is not None and any(
            in_flight in p.landed_batches for p in outcome.verification.partitions)
        if not boundary:
            outcome.where = ("a batch in flight, which landed" if landed else "a batch in flight, which did not land"
                             ) if in_flight else "between batches"
        self.log(f"producer kill ({outcome.how}{', ' + boundary if boundary else ''}): {outcome.where}; "
                 f"{'OK' if not outcome.problems else outcome.problems[:3]}")
        return outcome

    def recover_after_producer_kills(self) -> tuple[str, list[str]]:
        """After a series of producer kills: one cleaning pass must complete and the store pass every check."""
        problems: list[str] = []
        _, what = self._recover(self.batches(self._kill_dir()), problems)
        return what, problems

    # -- cleaner kills -----------------------------------------------------------------------------------------

    def cleaner_kill(self, entry: str, boundary: str | None = None) -> KillOutcome:
        """Make every partition dirty, start a cleaner run through ``entry`` (cli | job | api) and kill it at a
        random moment of its cycle (``boundary`` None) or at ``<point>@<n>``; then check and recover."""
        side = self._kill_dir()
        self._dirty_everything(side)
        self._round += 1
        before = self._commits()
        env = {faults.ENV: boundary} if boundary else None
        proc, logfile = self._start_cleaner(entry, f"r{self._round}-{entry}", env)
        marker = READY if entry == "api" else JOB_READY
        outcome = KillOutcome("cleaner", "boundary" if boundary else "random", entry, boundary, False, "", 0.0)
        ready = self._wait_for(logfile, marker, proc, 600)
        if ready is None:
            outcome.problems.append(f"the cleaner never started: {logfile.read_text(errors='replace')[-3000:]}")
        elif boundary:
            died = _wait_exit(proc, 600)
            if not died:
                outcome.problems.append("the cleaner ran for 10 minutes without reaching its boundary")
            outcome.seconds = time.monotonic() - ready
            self._kill_group(proc)  # its JVM outlives a driver that killed itself
            hit = _FAULT_LINE.search(logfile.read_text(errors="replace"))
            outcome.killed = died and proc.returncode == -signal.SIGKILL and hit is not None
            outcome.where = f"at {hit.group(1)} #{hit.group(2)}" if hit else "boundary not reached"
            if died and proc.returncode not in (0, -signal.SIGKILL):
                outcome.problems.append(f"the cleaner failed (exit {proc.returncode}): "
                                        f"{logfile.read_text(errors='replace')[-3000:]}")
        else:
            delay = self.rng.uniform(0.0, self.windows[entry])
            _wait_exit(proc, max(0.0, ready + delay - time.monotonic()))
            outcome.seconds = time.monotonic() - ready
            outcome.killed = not _exited(proc)
            self._kill_group(proc)
            # The window follows the length of a cycle: it grows while kills land, and a cycle that ends before
            # its kill sets it to the length just seen; so kills spread over the whole cycle, passes and all.
            self.windows[entry] = min(self.windows[entry] * 1.25, 300.0) if outcome.killed else max(0.5, outcome.seconds)
            if not outcome.killed:
                if proc.returncode != 0:
                    outcome.problems.append(f"the cleaner failed (exit {proc.returncode}): "
                                            f"{logfile.read_text(errors='replace')[-3000:]}")
        self._kill_group(proc)
        text = logfile.read_text(errors="replace")
        ops = self._operations_since(before)
        started = len(_PASS_STARTED.findall(text))
        if not boundary:
            outcome.where = _where(outcome.killed, started, ops["clean"], ops["retention"])
        outcome.where += f" ({ops['clean']} clean and {ops['retention']} retention commit(s) landed)"
        self._check(outcome, side, recover=True)
        self.log(f"cleaner kill ({entry}, {outcome.how}{', ' + boundary if boundary else ''}): {outcome.where}; "
                 f"after {outcome.seconds:.1f} s; next pass: {outcome.next_pass}; "
                 f"{'OK' if not outcome.problems else outcome.problems[:3]}")
        return outcome

    # -- concurrency ---------------------------------------------------------------------------------------------

    def concurrency(self, seconds: float, *, producers: int = 3, jobs: int = 2) -> ConcurrencyOutcome:
        """``producers`` producer processes append for ``seconds`` while ``jobs`` cleaner jobs, started at the
        same moment, run continuously (retention, cleaning, VACUUM, metrics); then the jobs are stopped with
        SIGTERM and the store is checked, cleaned once more, and checked again."""
        side = self.workdir / "concurrency"
        side.mkdir(exist_ok=True)
        self._create_topics(BUSY_TOPICS, BUSY_TOPIC_CONFIGS)
        config = self.workdir / "job.json"
        config.write_text(json.dumps({
            "store": {"uri": self.location, **({"storage_options": self.storage_options} if self.storage_options
                                                else {})},
            "cleaner": {"log.cleaner.backoff.ms": 200},
            "job": {"once": False, "progress_interval_s": 5, "log_level": "INFO"},
        }))
        started = [self._start([sys.executable, "-m", "deltalog.jobs.cleaner_job", "--config", str(config)],
                               f"job-{j}") for j in range(jobs)]
        problems: list[str] = []
        for proc, logfile in started:
            if self._wait_for(logfile, JOB_READY, proc, 600) is None:
                problems.append(f"a cleaner job never started: {logfile.read_text(errors='replace')[-3000:]}")
        t0 = time.monotonic()
        writers = [self._start_producer(side, f"busy-{i}", BUSY_WORKLOAD, seconds=seconds) for i in range(producers)]
        for proc, logfile in writers:
            try:
                if proc.wait(timeout=seconds + 300) != 0:
                    problems.append(f"a producer failed: {logfile.read_text(errors='replace')[-3000:]}")
            except subprocess.TimeoutExpired:
                problems.append("a producer did not finish")
                self._kill_group(proc)
        elapsed = time.monotonic() - t0
        # Let the jobs catch up before stopping them: each must finish a cycle that started after the last append
        # and found nothing left to clean (a SIGTERM mid-pass is tested on its own).
        caught_up_after = model_wall_ms()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not all(
                any(c["started_ms"] >= caught_up_after and c["passes"] == 0 for c in _job_cycles(logfile))
                or _exited(proc) for proc, logfile in started):
            time.sleep(0.2)
        drained = time.monotonic() - t0 - elapsed
        for proc, _ in started:
            if not _exited(proc):
                os.killpg(proc.pid, signal.SIGTERM)  # unreaped: the group is still this job's
        codes: list[int | None] = []
        for proc, _ in started:
            stopped = _wait_exit(proc, 300)
            if not stopped:
                problems.append("a cleaner job did not stop within 5 minutes of SIGTERM")
            self._kill_group(proc)
            codes.append(proc.returncode if stopped else None)
        cycles = [_job_cycles(logfile) for _, logfile in started]
        for (_proc, logfile), code in zip(started, codes, strict=True):
            if code != 0:
                problems.append(f"a cleaner job exited {code}: {logfile.read_text(errors='replace')[-3000:]}")
        batches = self.batches(side)
        out = ConcurrencyOutcome(
            producers=producers, jobs=jobs, seconds=elapsed,
            batches_acked=sum(1 for b in batches if b.acked),
            records_acked=sum(len(b.records) for b in batches if b.acked),
            job_cycles=[len(c) for c in cycles],
            passes=[sum(c["passes"] for c in cs) for cs in cycles],
            busy_skips=sum(len(c["busy"]) for cs in cycles for c in cs),
            lost_races=sum(len(c["lost_races"]) for cs in cycles for c in cs),
            segments_deleted=sum(c["segments_deleted"] for cs in cycles for c in cs),
            files_vacuumed=sum(c["files_vacuumed"] for cs in cycles for c in cs),
            job_exit_codes=codes, problems=problems, drain_seconds=drained,
        )
        for cs in cycles:
            for c in cs:
                problems += [f"a cleaner job marked {u} uncleanable" for u in c["newly_uncleanable"]]
        out.verification = verify(self.store(), batches)
        problems += out.verification.problems
        out.recovery, _ = self._recover(batches, problems)
        self.log(f"concurrency: {producers} producers x {elapsed:.0f} s, {jobs} jobs: {out.records_acked} records "
                 f"acknowledged, passes {out.passes}, busy skips {out.busy_skips}, lost races {out.lost_races}, "
                 f"segments deleted {out.segments_deleted}, files vacuumed {out.files_vacuumed}; "
                 f"{out.verification.summary()}; "
                 f"{'OK' if not problems else problems[:3]}")
        return out

    # -- figures -----------------------------------------------------------------------------------------------

    def orphaned_files(self) -> int | None:
        """Data files on a local store's disk that no current or earlier commit references (files of appends or
        passes killed before their commit); None for an object store."""
        if "://" in self.location:
            return None
        store = self.store()
        count = 0
        for plog in store.logs():
            referenced = {f.path for f in plog.snapshot().files}
            from deltalog.log.vacuum import removal_times

            known = referenced | set(removal_times(plog.storage, plog.uri))
            for dirpath, dirnames, filenames in os.walk(plog.uri):
                if "_delta_log" in dirnames:
                    dirnames.remove("_delta_log")
                for name in filenames:
                    rel = os.path.relpath(os.path.join(dirpath, name), plog.uri)
                    if name.endswith(".parquet") and rel not in known:
                        count += 1
        return count


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the process has ended, without reaping it (``Popen.poll`` would)."""
    if proc.returncode is not None:
        return True
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _wait_exit(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the process to end, without reaping it; whether it ended."""
    deadline = time.monotonic() + timeout_s
    while not _exited(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _where(killed: bool, started: int, cleans: int, retentions: int) -> str:
    if not killed:
        return "finished before the kill"
    if started == 0:
        return "before the first pass (start-up, retention or planning)"
    if started > cleans:
        return f"in pass {started}, before its commit"
    return f"after pass {started}'s commit (metrics, retention, VACUUM or the next plan)"


def _last_in_flight(side_file: Path) -> str | None:
    """The batch a killed producer had announced and not seen acknowledged, if any."""
    if not side_file.exists():
        return None
    last = None
    for line in side_file.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        last = entry
    return last["intent"] if last and "intent" in last else None


def _job_cycles(logfile: Path) -> list[dict[str, Any]]:
    out = []
    for line in logfile.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"passes"' in line:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out
