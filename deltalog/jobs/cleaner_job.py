"""The cleaner as a scheduled job: ``deltalog-cleaner --config conf/deltalog.json --once``.

The same command is ``python -m deltalog.jobs.cleaner_job``. On Databricks a ``python_wheel_task`` runs the
``deltalog-cleaner`` entry point of the deltalog wheel (``databricks.yml``, ``conf/cleaner_job.json``) with
parameters such as ``["--config", "/Workspace/.../conf/deltalog.databricks.json", "--store", "s3://...",
"--once"]``: absolute paths, since a task's working directory is not the repository's. Locally the same
command runs it on the embedded Spark session. The config file (documented in ``conf/README.md``) has four
sections, each optional; ``--store`` can stand in for the store section::

    {"store":   {"uri": "s3://bucket/deltalog", "storage_options": {"AWS_REGION": "eu-west-1"}},
     "cleaner": {"log.cleaner.threads": 2, "log.cleaner.backoff.ms": 15000, ...},   # broker names
     "spark":   {"master": null, "conf": {"spark.sql.shuffle.partitions": "8"}},
     "job":     {"once": true, "max_cycles": null, "vacuum": true, "progress_interval_s": 30,
                 "log_level": "INFO"}}

``store.uri`` is a local path or an ``s3://``, ``abfss://`` or ``gs://`` URI (``store.root`` is accepted as
its older name); ``storage_options`` are delta-rs / object-store options, string to string.

Each cycle prints one JSON line with its figures on stdout (the job's output) and logs progress with
:mod:`logging` (the driver log). ``--once`` runs one cycle, the form a schedule uses; without it the
job keeps cleaning, backing off ``log.cleaner.backoff.ms`` when there is nothing to do, until SIGTERM/SIGINT.
Two runs overlapping (a scheduled run starting while the last one is still going) are safe: each
partition is worked on under a lease, and the second run skips what the first holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deltalog.config import StoreConfig
from deltalog.errors import DeltalogError, InvalidConfigError
from deltalog.option_spec import OptionSpec, parse_options

if TYPE_CHECKING:  # imported when a run starts: --help and a bad config answer without pyarrow, numpy, delta-rs
    from deltalog.store import Store

log = logging.getLogger("deltalog.jobs.cleaner_job")

SECTIONS = ("store", "cleaner", "spark", "job")
STORE_KEYS = ("uri", "root", "storage_options")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _flag(name: str, raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise InvalidConfigError(f"job.{name} must be true or false, not {raw!r}")
    return raw


def _max_cycles(name: str, raw: Any) -> int | None:
    if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int) or raw < 1):
        raise InvalidConfigError(f"job.{name} must be null or an integer >= 1, not {raw!r}")
    return raw


def _interval(name: str, raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw <= 0:
        raise InvalidConfigError(f"job.{name} must be a number > 0, not {raw!r}")
    return float(raw)


def _log_level(name: str, raw: Any) -> str:
    level = str(raw).upper()
    if level not in LOG_LEVELS:
        raise InvalidConfigError(f"job.{name} must be DEBUG, INFO, WARNING or ERROR, not {level!r}")
    return level


def _ge_context(name: str, raw: Any) -> str | None:
    if raw is not None and (not isinstance(raw, str) or not raw):
        raise InvalidConfigError(f"job.{name} must be null or the directory of a Great Expectations file context, "
                                 f"not {raw!r}")
    return raw


def _port(name: str, raw: Any) -> int | None:
    if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= 65535):
        raise InvalidConfigError(f"job.{name} must be null or a port number 0-65535 (0: any free port), not {raw!r}")
    return raw


def _text(name: str, raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise InvalidConfigError(f"job.{name} must be a non-empty string, not {raw!r}")
    return raw


def _url(name: str, raw: Any) -> str | None:
    if raw is not None and (not isinstance(raw, str) or not raw.startswith(("http://", "https://"))):
        raise InvalidConfigError(f"job.{name} must be null or an http(s):// URL (a Pushgateway), not {raw!r}")
    return raw


#: The job section of the config file (:class:`~deltalog.option_spec.OptionSpec`, as every option table).
JOB_SPECS: tuple[OptionSpec, ...] = (
    OptionSpec("once", "once", _flag, False, "Run one cycle and exit (the form a schedule uses)."),
    OptionSpec("max_cycles", "max_cycles", _max_cycles, None, "Stop after this many cycles (null: no limit)."),
    OptionSpec("vacuum", "vacuum", _flag, True, "Remove replaced files after file.delete.delay.ms in each cycle."),
    OptionSpec("progress_interval_s", "progress_interval_s", _interval, 30.0,
               "Seconds between progress lines in the driver log while a pass runs."),
    OptionSpec("log_level", "log_level", _log_level, "INFO", "DEBUG, INFO, WARNING or ERROR."),
    OptionSpec("ge_context", "ge_context", _ge_context, None,
               "The directory of the team's Great Expectations file context for the check after clean (null: an "
               "ephemeral context)."),
    OptionSpec("metrics_port", "metrics_port", _port, None,
               "Serve Kafka's cleaner gauges for Prometheus on this port (/metrics, /health, /ready), updated after "
               "every cycle (null: no port; 0: any free port)."),
    OptionSpec("metrics_address", "metrics_address", _text, "127.0.0.1",
               "The address metrics_port listens on (0.0.0.0 for a scraper elsewhere)."),
    OptionSpec("pushgateway", "pushgateway", _url, None,
               "Push the same gauges to this Prometheus Pushgateway after every cycle (job deltalog-cleaner): for a "
               "scheduled run nothing scrapes (null: no push)."),
)
JOB_KEYS = tuple(spec.name for spec in JOB_SPECS)


@dataclass(frozen=True)
class JobConfig:
    """The job's settings, from a config file (every section optional) and the command line. ``root`` is the
    store's URI (or local path); ``storage_options`` go to delta-rs and the object store with it."""

    root: str
    cleaner: Mapping[str, Any] = field(default_factory=dict)
    spark_master: str | None = None
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    once: bool = False
    max_cycles: int | None = None
    vacuum: bool = True
    progress_interval_s: float = 30.0
    log_level: str = "INFO"
    storage_options: Mapping[str, str] = field(default_factory=dict)
    #: The Great Expectations file context (its directory) the check after clean runs in; None: an ephemeral one.
    ge_context: str | None = None
    #: Kafka's cleaner gauges for Prometheus: served on this port (None: not served), pushed to this gateway.
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    pushgateway: str | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "config", store_uri: str | None = None) -> JobConfig:
        """Validate a parsed config file; keys starting with ``_`` (comments) are ignored. ``store_uri`` (the
        command line's ``--store``) replaces the file's store.uri, so a file may leave it out."""
        data = {k: v for k, v in data.items() if not k.startswith("_")}
        unknown = sorted(set(data) - set(SECTIONS))
        if unknown:
            raise InvalidConfigError(f"{source}: unknown section(s) {unknown}; allowed: {list(SECTIONS)}")

        def section(name: str) -> dict[str, Any]:
            value = data.get(name) or {}
            if not isinstance(value, Mapping):
                raise InvalidConfigError(f"{source}: section {name!r} must be an object, not {value!r}")
            return {k: v for k, v in value.items() if not k.startswith("_")}

        store, cleaner, spark, job = (section(s) for s in SECTIONS)
        if store_uri is not None:
            store = {**{k: v for k, v in store.items() if k not in ("uri", "root")}, "uri": store_uri}
        StoreConfig.from_properties(cleaner)  # names the bad key and value
        extra = (sorted(set(store) - set(STORE_KEYS)) + sorted(set(spark) - {"master", "conf"})
                 + sorted(set(job) - set(JOB_KEYS)))
        if extra:
            raise InvalidConfigError(
                f"{source}: unknown key(s) {extra}; store has {list(STORE_KEYS)}, spark has 'master' and 'conf', "
                f"job has {list(JOB_KEYS)}"
            )
        if "uri" in store and "root" in store and store["uri"] != store["root"]:
            raise InvalidConfigError(f"{source}: store.uri and store.root (its older name) disagree: "
                                     f"{store['uri']!r} vs {store['root']!r}; give only store.uri")
        root = store.get("uri", store.get("root"))
        if not isinstance(root, str) or not root:
            raise InvalidConfigError(f"{source}: store.uri (or the command line's --store) must be the store's location "
                                     f"(a local path or an s3://, abfss:// or gs:// URI), not {root!r}")
        storage_options = storage_options_from(store.get("storage_options"), source=source)
        conf = spark.get("conf") or {}
        if not isinstance(conf, Mapping):
            raise InvalidConfigError(f"{source}: spark.conf must be an object of Spark settings, not {conf!r}")
        try:
            settings = parse_options(JOB_SPECS, job, defaults=True)
        except InvalidConfigError as e:
            raise InvalidConfigError(f"{source}: {e}") from None
        return cls(
            root=root, storage_options=storage_options, cleaner=cleaner, spark_master=spark.get("master"),
            spark_conf={str(k): str(v) for k, v in conf.items()}, **settings,
        )

    @classmethod
    def load(cls, path: str, *, store_uri: str | None = None) -> JobConfig:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise InvalidConfigError(f"config file {path} does not exist") from None
        except ValueError as e:
            raise InvalidConfigError(f"config file {path} is not valid JSON: {e}") from None
        if not isinstance(data, Mapping):
            raise InvalidConfigError(f"config file {path} must hold a JSON object with sections {list(SECTIONS)}")
        return cls.from_mapping(data, source=path, store_uri=store_uri)


def storage_options_from(value: Any, *, source: str = "config") -> dict[str, str]:
    """``store.storage_options`` as delta-rs takes them (string to string). Numbers and booleans in the JSON
    are written the way object_store parses them ("true", "30"); anything else is refused."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidConfigError(f"{source}: store.storage_options must be an object of option: value, not {value!r}")
    options: dict[str, str] = {}
    for key, v in value.items():
        if str(key).startswith("_"):
            continue
        if isinstance(v, bool):
            options[str(key)] = "true" if v else "false"
        elif isinstance(v, (str, int, float)):
            options[str(key)] = str(v)
        else:
            raise InvalidConfigError(f"{source}: store.storage_options.{key} must be a string, number or boolean, "
                                     f"not {v!r}")
    return options


def cycle_json(cycle: Any) -> dict[str, Any]:
    """A cycle's figures as one JSON-able object (the job's stdout line)."""
    return {
        "started_ms": cycle.started_ms,
        "finished_ms": cycle.finished_ms,
        "passes": len(cycle.cleans),
        "cleaned": sorted({f"{c.topic}-{c.partition}" for c in cycle.cleans}),
        "bytes_read": sum(c.bytes_read for c in cycle.cleans),
        "bytes_written": sum(c.bytes_written for c in cycle.cleans),
        "segments_deleted": cycle.segments_deleted,
        "files_vacuumed": cycle.files_vacuumed,
        "offsets_expired": cycle.offsets_expired,
        "newly_uncleanable": [f"{f.topic}-{f.partition}: {f.error_type}: {f.message[:200]}" for f in cycle.failures],
        "skipped_uncleanable": [f"{t}-{p}" for t, p in cycle.uncleanable],
        "busy": [f"{t}-{p}" for t, p in cycle.busy],
        "lost_races": [f"{t}-{p}" for t, p in cycle.conflicts],
    }


def refresh_state_tables(store: Store) -> dict[str, Any]:
    """Each cycle, every state table (topics with ``state.table.enable``) brought up to its log's last stable
    offsets (:meth:`Store.refresh_state`), whatever the cycle cleaned: a topic never cleaned still gets a fresh
    state table. A topic whose refresh fails is named and the others go on, as the cleaner goes on past an
    uncleanable partition."""
    refreshed, failed = {}, {}
    for topic in store.state_table_topics():
        try:
            result = store.refresh_state(topic)
        except DeltalogError as e:
            log.warning("refresh of the state table of %s failed: %s", topic, e)
            failed[topic] = f"{type(e).__name__}: {str(e)[:200]}"
            continue
        lag = store.state_lag(topic)
        refreshed[topic] = {"version": result.table_version, "records_read": result.records_read,
                            "rows_merged": result.rows_merged, "offsets_behind": lag.offsets_behind,
                            "time_behind_ms": lag.time_behind_ms}
    return {"refreshed": refreshed, "failed": failed}


def metrics_exporter(config: JobConfig, store: Store, cleaner: Any = None) -> Callable[[Any], None] | None:
    """With ``job.metrics_port`` or ``job.pushgateway``: what updates (and pushes) Kafka's cleaner gauges after each
    cycle (:mod:`deltalog.cleaner.prometheus`), the port served from now on; None without them.

    After a cycle the gauges take the figures the cycle recorded (``cleaner.last_metrics``, read from the cycle's
    own snapshots), as Kafka's gauges read the cleaner's state: no second walk of every partition. Only before the
    first cycle, or after one whose figures were not recorded, are they collected here."""
    if config.metrics_port is None and config.pushgateway is None:
        return None
    from deltalog import extras
    from deltalog.cleaner.metrics import collect
    from deltalog.cleaner.prometheus import CleanerExporter

    extras.require("metrics", "the cleaner's metrics_port / pushgateway (--metrics-port / --pushgateway)")
    exporter = CleanerExporter()
    exporter.update(collect(store.log_manager, state_lag=store.state_lag_of))
    if config.metrics_port is not None:
        server = exporter.serve(config.metrics_port, config.metrics_address)
        print(f"deltalog cleaner: metrics on http://{config.metrics_address}:{server.server_port}/metrics",
              file=sys.stderr, flush=True)

    seen = [getattr(cleaner, "last_metrics", None)]

    def after(cycle: Any) -> None:
        recorded = getattr(cleaner, "last_metrics", None)
        if recorded is None or recorded is seen[0]:  # the cycle recorded no figures (a full disk, metrics off)
            recorded = collect(store.log_manager, state_lag=store.state_lag_of)
        seen[0] = recorded
        exporter.update(recorded, cycle.cleans)
        if config.pushgateway is not None:
            try:
                exporter.push(config.pushgateway)
            except OSError as e:  # a gateway down must not stop the cleaner
                log.warning("could not push metrics to %s: %s", config.pushgateway, e)
    return after


def pass_may_run(cleaner: Any, topics: Sequence[str] | None = None) -> bool:
    """Whether a pass may run: some partition (of ``topics``, or of the store) is eligible now (the cleaner's own
    ranking; in a cycle, on the snapshots the cycle read)."""
    try:
        return bool(cleaner.manager.logs_to_clean(cleaner.clock.now_ms(), topics, on_damage=lambda *_: None))
    except DeltalogError as e:  # the cycle will meet it too, and say so
        log.debug("could not rank the partitions before the first cycle: %s", e)
        return False


def run(config: JobConfig, *, spark: Any = None, clock: Any = None, out: Any = None,
        on_cycle: Callable[[Any], None] | None = None) -> int:
    """Open the store and run the cleaner as ``config`` says, one JSON line per cycle on ``out`` (or, given
    ``on_cycle``, that called with each cycle's result instead: ``deltalog cleaner run --output text``);
    returns the number of cycles run."""
    from deltalog.sql.session import SessionStarter, local_session
    from deltalog.store import Store

    starter = None
    if spark is None:
        # Started only when a pass may run: a cycle with nothing to clean needs no JVM (retention, VACUUM and the
        # metrics read the Delta logs only), as ``deltalog clean`` does on an idle store. When one may, it starts
        # in the background (with its warm-up) while the cycle does its Spark-free work first.
        spark = starter = SessionStarter(
            lambda: local_session(config.spark_master, dict(config.spark_conf), app_name="deltalog-cleaner"))
    store = Store(config.root, storage_options=dict(config.storage_options) or None, spark=spark, clock=clock,
                  config=dict(config.cleaner))
    cleaner = store.log_cleaner(vacuum=config.vacuum, progress_interval_s=config.progress_interval_s,
                                ge_context=config.ge_context, state_tables=lambda: refresh_state_tables(store))
    out = out or sys.stdout
    if starter is not None:
        def start_spark_early() -> None:  # on the cycle's snapshots: a ranking without another read of the logs
            if not starter.started and pass_may_run(cleaner):
                starter.start()

        cleaner.on_snapshots = start_spark_early

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, lambda *_: cleaner.stop())
        except ValueError:  # not the main thread: the caller stops it
            pass
    log.info("deltalog cleaner on %s: threads=%d, %s", store.root, cleaner.threads,
             "one cycle" if config.once else f"max cycles {config.max_cycles or 'unbounded'}")
    exporter = metrics_exporter(config, store, cleaner)

    def emit(cycle: Any) -> None:
        states = cycle.state_tables  # refreshed by the cycle, before its metrics (which record their lag)
        if exporter is not None:
            exporter(cycle)
        if on_cycle is not None:
            on_cycle(cycle)
            return
        out.write(json.dumps({**cycle_json(cycle), "state_tables": states}) + "\n")
        out.flush()

    try:
        return cleaner.run(once=config.once, max_cycles=config.max_cycles, on_cycle=emit)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="deltalog-cleaner",
                                description="Run the deltalog log cleaner over a store (a scheduled job). Give the "
                                "store with --store, or in the config file's store.uri.")
    p.add_argument("--config", metavar="FILE",
                   help="the job config (see conf/deltalog.json); an absolute path on Databricks")
    p.add_argument("--store", metavar="URI",
                   help="the store: a local path or an s3://, abfss:// or gs:// URI (overrides store.uri)")
    p.add_argument("--storage-option", dest="storage_options", metavar="KEY=VALUE", action="append", default=[],
                   help="a storage option (added to store.storage_options), e.g. AWS_REGION=eu-west-1; repeatable")
    p.add_argument("--once", action="store_true", default=None, help="run one cycle and exit (job.once)")
    p.add_argument("--max-cycles", type=int, metavar="N", help="stop after N cycles (job.max_cycles)")
    add_metrics_options(p)
    return p


def add_metrics_options(p: argparse.ArgumentParser) -> None:
    """``--metrics-port``, ``--metrics-address`` and ``--pushgateway``: the job section's metrics keys on the command
    line, the same for ``deltalog-cleaner`` and ``deltalog cleaner run``."""
    p.add_argument("--metrics-port", type=int, metavar="PORT", default=None,
                   help="serve Kafka's cleaner gauges for Prometheus on PORT (/metrics; kafka_log_logcleaner_*, "
                   "kafka_log_logcleanermanager_*; /health, /ready), updated after every cycle (job.metrics_port; "
                   "default: no port)")
    p.add_argument("--metrics-address", metavar="HOST", default=None,
                   help="the address --metrics-port listens on (job.metrics_address; default 127.0.0.1; 0.0.0.0 for a "
                   "scraper elsewhere)")
    p.add_argument("--pushgateway", metavar="URL", default=None,
                   help="push the same gauges to a Prometheus Pushgateway after every cycle (job deltalog-cleaner), "
                   "for a scheduled run nothing scrapes (job.pushgateway)")


def metrics_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The metrics options given on the command line, validated as the config file's keys."""
    given = {k: getattr(args, k) for k in ("metrics_port", "metrics_address", "pushgateway")
             if getattr(args, k, None) is not None}
    return parse_options(tuple(s for s in JOB_SPECS if s.name in given), given) if given else {}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.config and not args.store:
        parser.error("give the store with --store URI, or a --config file whose store.uri names it")
    try:
        if args.config:
            config = JobConfig.load(args.config, store_uri=args.store)
        else:
            config = JobConfig.from_mapping({}, source="--store", store_uri=args.store)
        overrides: dict[str, Any] = {}
        if args.storage_options:
            given = {}
            for text in args.storage_options:
                key, sep, value = text.partition("=")
                if not sep or not key.strip():
                    raise InvalidConfigError(f"--storage-option must be KEY=VALUE, e.g. AWS_REGION=eu-west-1, "
                                             f"not {text!r}")
                given[key.strip()] = value.strip()
            overrides["storage_options"] = {**config.storage_options, **given}
        if args.once:
            overrides["once"] = True
        if args.max_cycles is not None:
            if args.max_cycles < 1:
                raise InvalidConfigError(f"--max-cycles must be >= 1, not {args.max_cycles}")
            overrides["max_cycles"] = args.max_cycles
        overrides.update(metrics_overrides(args))
        if overrides:
            config = dataclasses.replace(config, **overrides)
        logging.basicConfig(level=config.log_level, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("py4j").setLevel(logging.WARNING)  # one line per Spark call otherwise
        run(config)
    except DeltalogError as e:
        print(f"cleaner_job: error: {e}", file=sys.stderr)
        return 1
    return 0


def console_main() -> None:
    """The ``deltalog-cleaner`` entry point. A Databricks ``python_wheel_task`` calls it without arguments
    (the task's parameters are in ``sys.argv``) and ignores what it returns, so a failure must raise:
    ``SystemExit`` with a non-zero code fails the run, which is what sends the failure notifications."""
    code = main()
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
