"""The comparisons: each measured thing next to its alternative, in one process, on the same files.

Every round runs every case once, in the same order, so the machine's noise falls on all of them alike;
the report takes the median of the rounds. Every case starts from the same input: a cleaning pass gets a
fresh copy of the uncleaned store, MERGE a fresh copy of its target table, appends fresh tables. Every
output is checked (untimed), so a fast wrong answer fails the run instead of winning it.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from benchmarks import endpoint, transactions
from benchmarks import workload as wl
from benchmarks.check import BenchmarkFailure, check_offsets, check_survivors, expected_survivors, parquet_rows
from deltalog.cleaner.offset_map import OffsetMap, build_offset_map
from deltalog.clock import ManualClock
from deltalog.log.record import (
    BASE_SCHEMA,
    DELETE_HORIZON,
    HEADERS,
    KEY,
    OFFSET,
    RECORD_SCHEMA,
    TIMESTAMP,
    VALUE,
    parquet_write_options,
    row_group_rows,
    table_to_records,
)
from deltalog.sql.reads import SPARK_SCHEMA_DDL
from deltalog.sql.session import warm_python_workers
from deltalog.storage import Storage
from deltalog.store import Store

#: The pass with the store's Spark jobs on a Spark Connect session.
CONNECT_PASS = "deltalog clean pass, Spark Connect"
#: The pass on a copy of the store on the local S3 server (moto), the classic session.
S3_PASS = "deltalog clean pass, store on S3 (moto)"
#: format("deltalog") and its baselines.
SOURCE_READ = 'spark.read.format("deltalog") of the partition'
PARQUET_READ = "spark.read.parquet of the same files"
SOURCE_WRITE = 'df.write.format("deltalog") of Arrow data'
SOURCE_APPEND = "store.append of the same batches"
SOURCE_STREAM = 'spark.readStream.format("deltalog"), earliest to end'
#: The Spark views and the same queries over spark.read.parquet of the same files.
VIEW_LOG = "store.log_frame(topic).count()"
PARQUET_LOG = "the same count over spark.read.parquet"
VIEW_STATE = "store.current_state(topic).count()"
PARQUET_STATE = "the same current-state query over spark.read.parquet"
#: A plain pyarrow dedupe of the same files, one process, no Spark (row 20). It was meant as the least work a pass
#: can do, a floor; the pass beats it at the medium preset (it reads every column of every file, the pass does
#: not), so it is reported as the baseline it is: what a hand-written pyarrow job would take.
PYARROW_BASELINE = "pyarrow baseline: read + dedupe + write, one process"
#: The baseline holds the whole log decoded; it runs only if its estimated peak fits this share of the free memory.
BASELINE_MEMORY_SHARE = 0.6


def available_memory() -> int:
    """Bytes of memory free for a new allocation now (``MemAvailable``), or 8 GiB where /proc says nothing."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30


def first_line(error: Exception) -> str:
    """An error's first line (DuckDB's out-of-memory errors name the limit there), at most 200 characters."""
    return str(error).splitlines()[0][:200]


@dataclass
class Timings:
    """Seconds per round of each measured thing, plus figures the cases report."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, s: float) -> None:
        self.seconds.setdefault(name, []).append(s)

    def median(self, name: str) -> float:
        return statistics.median(self.seconds[name])


class Bench:
    """One workload, generated once into ``work_dir/pristine``, and the cases run against it."""

    def __init__(self, w: wl.Workload, work_dir: str, spark: Any, cores: int, log: Callable[[str], None] = print,
                 connect: Any = None, s3: Any = None):
        self.w = w
        self.dir = work_dir
        self.spark = spark
        #: A Spark Connect session (to a server with as many cores), for the same pass through Connect.
        self.connect = connect
        #: A started ``tooling.services.S3Server`` (moto), for the same pass on a store on S3.
        self.s3 = s3
        self._s3_bucket: str | None = None
        self.cores = cores
        self.log = log
        self.t = Timings()
        self.pristine = os.path.join(work_dir, "pristine")

    # -- setup ----------------------------------------------------------------------------------------

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def fresh(self, name: str) -> str:
        p = self.path(name)
        shutil.rmtree(p, ignore_errors=True)
        return p

    def store(self, root: str, now_ms: int = wl.NOW_MS, spark: Any = None) -> Store:
        return Store(root, spark=spark or self.spark, clock=ManualClock(now_ms), config=self.w.store_config())

    def setup(self) -> None:
        started = time.monotonic()
        self.gen = wl.generate(self.store(self.fresh("pristine")), self.w)
        plog = self.store(self.pristine).log(wl.TOPIC, 0)
        self.snap = plog.snapshot()
        self.uri = plog.uri
        self.storage = plog.storage
        self.files = list(self.snap.files)
        self.paths = [os.path.join(self.uri, f.path) for f in self.files]
        self.dirty_files = [f for f in self.files if f.max_offset >= self.gen.first_dirty_offset]
        self.expected = expected_survivors(self.paths)
        self.live_keys = self.expected.live_keys
        self.merge_pristine: str | None = None  # row 4's target table, written when that case first runs
        self.t.figures["generated"] = {
            "records_in_log": self.gen.total_records, "clean_records": self.gen.clean_records,
            "dirty_records": self.gen.dirty_records, "bytes": self.gen.bytes, "files": self.gen.files,
            "survivors": self.expected.num_rows, "live_keys": self.live_keys,
            "seconds": round(time.monotonic() - started, 1),
        }
        self.log(f"generated {self.t.figures['generated']}")

    def _skip(self, name: str, reason: str) -> None:
        """``name`` cannot run on this workload here this round (e.g. needs more memory than the machine has free):
        say so in the log and the figures (a reason per round skipped), and time nothing."""
        self.t.figures.setdefault("skipped", {}).setdefault(name, []).append(reason)
        self.log(f"  {name}: skipped, {reason}")

    def _merge_target(self) -> None:
        """The current-state table a MERGE user keeps: one row per live key as of the clean prefix."""
        clean = [p for p, f in zip(self.paths, self.files, strict=True) if f.max_offset < self.gen.first_dirty_offset]
        cols = [KEY, VALUE, OFFSET, TIMESTAMP]
        table = pq.read_table(clean, columns=cols) if clean else RECORD_SCHEMA.empty_table().select(cols)
        table = table.filter(pc.is_valid(table.column(VALUE)))
        self.merge_pristine = self.fresh("merge-pristine")
        write_deltalake(self.merge_pristine, table)

    # -- the cases (each: prepare untimed, run timed, check untimed) --------------------------------------

    def clean_pass(self, rnd: int, *, connect: bool = False) -> None:
        root = self.fresh("clean")
        shutil.copytree(self.pristine, root)
        # Each round's pass runs at its own "now" (a millisecond apart: no horizon passes in between), as
        # every real pass does; a rerun at the same now found its Spark code already compiled for exactly
        # those values, which no cleaner in production ever does.
        session = self.connect if connect else self.spark
        store = self.store(root, wl.NOW_MS + 1 + rnd, session)
        # Spark stops a Python worker idle for a minute: the classic session's are kept busy by the other
        # cases, the Connect server's were not (its passes then paid for new workers: map 7-11 s against
        # 2-3 s). A cleaner running passes back to back keeps them; start them untimed, on either session.
        warm_python_workers(session).join()
        self._time_pass(store, CONNECT_PASS if connect else "deltalog clean pass",
                        "clean connect" if connect else "clean")
        shutil.rmtree(root, ignore_errors=True)  # a copy of the whole log: the large preset's is gigabytes

    def _time_pass(self, store: Store, name: str, figures: str) -> None:
        """Time one forced pass over the partition; check it cleaned the whole dirty section and left exactly
        the latest record per key (untimed), and keep its figures under ``figures``."""
        holder: dict[str, Any] = {}

        def run() -> None:
            holder["result"] = store.clean_partition(wl.TOPIC, 0, force=True)

        def check() -> None:
            result = holder["result"]
            if result is None or result.end_offset != self.gen.log_end_offset:
                raise BenchmarkFailure(f"{name} did not clean the whole dirty section: {result}")
            check_survivors(store.log(wl.TOPIC, 0), self.expected)
            self.t.figures.setdefault(figures, []).append(result.as_dict())

        self._time(name, run, check)

    def clean_pass_connect(self, rnd: int) -> None:
        """The same pass with the store's Spark jobs on the Spark Connect session (same files, same checks)."""
        if self.connect is not None:
            self.clean_pass(rnd, connect=True)

    def row_number_dedupe(self, rnd: int) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        out = self.fresh("row-number")

        def run() -> None:
            df = self._spark_parquet()
            w = Window.partitionBy(KEY).orderBy(F.col(OFFSET).desc())
            df.withColumn("_rn", F.row_number().over(w)).where(F.col("_rn") == 1).drop("_rn").write.parquet(out)

        self._time("spark row_number() dedupe", run, lambda: self._count(out, self.expected.num_rows))

    def read_rewrite(self, rnd: int) -> None:
        out = self.fresh("rewrite")

        def run() -> None:
            self._spark_parquet().write.parquet(out)

        self._time("spark read + rewrite", run, lambda: self._count(out, self.gen.total_records))

    def duckdb_dedupe(self, rnd: int) -> None:
        import duckdb

        out = self.fresh("duckdb")
        os.makedirs(out)
        target = os.path.join(out, "survivors.parquet")
        con = duckdb.connect()
        con.execute(f"SET threads = {self.cores}")
        # At most half the memory free now (DuckDB's default is 80% of the machine's, which a shared machine does
        # not have), spilling past it to the work directory: the limit binds only where the input outgrows it.
        con.execute(f"SET memory_limit = '{max(available_memory() // 2 // 2**20, 256)}MiB'")
        con.execute(f"SET temp_directory = '{self.fresh('duckdb-spill')}'")
        files = ", ".join(f"'{p}'" for p in self.paths)

        def run() -> None:
            con.execute(
                f"COPY (SELECT * FROM read_parquet([{files}]) QUALIFY row_number() OVER "
                f"(PARTITION BY key ORDER BY \"offset\" DESC) = 1) TO '{target}' (FORMAT parquet, COMPRESSION snappy)"
            )

        def check() -> None:
            con.close()
            shutil.rmtree(self.path("duckdb-spill"), ignore_errors=True)
            self._count(out, self.expected.num_rows)
            check_offsets(target, self.expected, "DuckDB's dedupe")  # the pass's survivors, not only as many

        try:
            self._time("duckdb dedupe", run, check)
        except duckdb.OutOfMemoryException as e:
            con.close()
            self._skip("duckdb dedupe", f"DuckDB ran out of memory: {first_line(e)}")
        finally:
            shutil.rmtree(out, ignore_errors=True)

    def floor_pass(self, rnd: int) -> None:
        """The pyarrow baseline (row 20), once called the floor: a plain pyarrow dedupe. Every file of the
        partition read whole with pyarrow (a thread per core: Arrow's decoders release the GIL), the latest
        record of each key kept (an Arrow hash group-by), surviving tombstones given their delete horizon as a
        pass stamps them, and the survivors written as Parquet with the pass's options
        (``parquet_write_options``, row groups of ``row_group_rows``), one file per core, in parallel. No map, no
        bitmap, no commit, no bounded memory; but it reads every column of every file, which pass 1 does not, so it
        is no lower bound for a pass."""
        from concurrent.futures import ThreadPoolExecutor

        need, free = self._floor_memory(), available_memory()
        if need > BASELINE_MEMORY_SHARE * free:
            self._skip(PYARROW_BASELINE, f"holding the whole log decoded takes ~{need / 2**30:.1f} GiB, more than "
                              f"{BASELINE_MEMORY_SHARE:.0%} of the {free / 2**30:.1f} GiB available")
            return
        out = self.fresh("floor")
        os.makedirs(out)
        horizon = wl.NOW_MS + wl.DELETE_RETENTION_MS
        written: list[str] = []

        def run() -> None:
            with ThreadPoolExecutor(self.cores) as pool:
                table = pa.concat_tables(pool.map(lambda p: pq.read_table(p, use_threads=False), self.paths),
                                         promote_options="default")  # files with and without the key-hash columns
                latest = table.select([KEY, OFFSET]).group_by(KEY).aggregate([(OFFSET, "max")])
                keep = np.zeros(self.gen.log_end_offset, dtype=bool)
                keep[latest.column(f"{OFFSET}_max").to_numpy()] = True
                survivors = table.filter(pa.array(keep[table.column(OFFSET).to_numpy()]))
                stamp = pc.and_(pc.is_null(survivors.column(VALUE)), pc.is_null(survivors.column(DELETE_HORIZON)))
                stamped = pc.if_else(stamp, pa.scalar(horizon, pa.int64()), survivors.column(DELETE_HORIZON))
                survivors = survivors.set_column(survivors.schema.get_field_index(DELETE_HORIZON),
                                                 survivors.schema.field(DELETE_HORIZON), stamped)
                share = -(-survivors.num_rows // self.cores)

                def write(i: int) -> str:
                    part = survivors.slice(i * share, share)
                    path = os.path.join(out, f"part-{i}.parquet")
                    pq.write_table(part, path, row_group_size=row_group_rows(part), **parquet_write_options(part))
                    return path

                written[:] = pool.map(write, range(self.cores))

        def check() -> None:
            check_offsets(written, self.expected, "the pyarrow baseline")

        self._time(PYARROW_BASELINE, run, check)

    def _floor_memory(self) -> int:
        """What the floor holds at its peak, estimated: the log decoded (the files' uncompressed sizes, from their
        footers) and a third as much again for the group-by, the offsets and the survivors."""
        if not hasattr(self, "_decoded_bytes"):
            footers = [pq.read_metadata(p) for p in self.paths]
            self._decoded_bytes = sum(m.row_group(i).total_byte_size for m in footers for i in range(m.num_row_groups))
        return int(self._decoded_bytes * 1.3)

    def delta_merge(self, rnd: int) -> None:
        if self.merge_pristine is None:
            self._merge_target()
        target = self.fresh("merge")
        shutil.copytree(self.merge_pristine, target)
        dirty = [os.path.join(self.uri, f.path) for f in self.dirty_files]

        def run() -> None:
            batch = pq.read_table(dirty, columns=[KEY, VALUE, OFFSET, TIMESTAMP])
            latest = batch.group_by(KEY).aggregate([(OFFSET, "max")]).column(f"{OFFSET}_max")
            source = batch.filter(pc.is_in(batch.column(OFFSET), latest))
            (
                DeltaTable(target)
                .merge(source, "t.key = s.key", source_alias="s", target_alias="t")
                .when_matched_delete("s.value IS NULL")
                .when_matched_update_all("s.value IS NOT NULL")
                .when_not_matched_insert_all("s.value IS NOT NULL")
                .execute()
            )

        def check() -> None:
            rows = sum(DeltaTable(target).get_add_actions(flatten=True).column("num_records").to_pylist())
            if rows != self.live_keys:
                raise BenchmarkFailure(f"MERGE left {rows} rows in the current-state table, expected {self.live_keys}")

        self._time("delta-rs MERGE", run, check)

    def build_map(self) -> OffsetMap:
        """Pass 1 as a pass runs it: the dirty section's key and offset columns, hashed and reduced in Spark tasks."""
        capacity = self.store(self.pristine).config.offset_map_capacity
        return build_offset_map(self.spark, self.storage, self.uri, self.files, self.gen.first_dirty_offset,
                                self.gen.log_end_offset, capacity, os.path.join(self.uri, "map-spill"))

    def map_build(self, rnd: int) -> None:
        holder: dict[str, Any] = {}

        def run() -> None:
            holder["map"] = self.build_map()

        def check() -> None:
            m = holder["map"]
            distinct = len(pc.unique(pq.read_table([os.path.join(self.uri, f.path) for f in self.dirty_files],
                                                   columns=[KEY]).column(KEY)))
            if m.entries != distinct or m.full:
                raise BenchmarkFailure(f"the offset map holds {m.entries} entries, the dirty section {distinct} keys")
            if len(m.latest) != m.entries:
                raise BenchmarkFailure(f"the map's {m.entries} entries have {len(m.latest)} distinct latest offsets")
            self.t.figures["map_entries"] = m.entries

        self._time("offset map build", run, check)

    def appends(self, rnd: int) -> None:
        batches = wl.append_batches(self.w)
        # store.append takes the records as Arrow (columns key, value, headers, timestamp_ms: what a bulk
        # producer holds), checked column-wise; the Record path is timed too, for reference.
        arrow = [b.select([KEY, VALUE, HEADERS, TIMESTAMP]) for b in batches]
        records = [table_to_records(b) for b in batches]
        n = sum(b.num_rows for b in batches)
        store = self.store(self.fresh("append-store"))
        store.create_topic("append", 1, config={"cleanup.policy": "compact"})
        record_store = self.store(self.fresh("append-records"))
        record_store.create_topic("append", 1, config={"cleanup.policy": "compact"})

        def run_store() -> None:
            for b in arrow:
                store.append("append", 0, b)

        def run_records() -> None:
            for recs in records:
                record_store.append("append", 0, recs)

        uri = self.fresh("append-delta")
        DeltaTable.create(uri, BASE_SCHEMA)  # the columns a plain append writes

        def run_delta() -> None:
            for b in batches:
                write_deltalake(uri, b, mode="append")

        self._time("store.append", run_store, lambda: self._log_rows(store, n))
        self._time("store.append, Records", run_records, lambda: self._log_rows(record_store, n))
        self._time("delta-rs write_deltalake", run_delta,
                   lambda: self._table_rows(uri, n))
        self.t.figures["append_records"] = n
        self.produces(arrow, n)

    def produces(self, arrow: list[pa.Table], n: int) -> None:
        """The same Arrow batches produced to 3 partitions (Kafka's partitioner on the keys): the idempotent
        producer (sequence checks and producer state committed with each batch) vs plain ``store.produce``,
        alternating, each into a fresh store."""
        plain = self.store(self.fresh("produce-plain"))
        plain.create_topic("produce", 3, config={"cleanup.policy": "compact"})
        idem = self.store(self.fresh("produce-idempotent"))
        idem.create_topic("produce", 3, config={"cleanup.policy": "compact"})
        producer = idem.producer(enable_idempotence=True)

        def run_plain() -> None:
            for b in arrow:
                plain.produce("produce", b)

        def run_idempotent() -> None:
            for b in arrow:
                producer.send("produce", b)

        def check(store: Store) -> Callable[[], None]:
            def rows() -> None:
                got = sum(store.log("produce", p).head().log_end_offset for p in range(3))
                if got != n:
                    raise BenchmarkFailure(f"produce left {got} records in 3 partitions, expected {n}")
            return rows

        self._time("store.produce, 3 partitions", run_plain, check(plain))
        self._time("idempotent producer.send, 3 partitions", run_idempotent, check(idem))
        transactions.produce_in_transaction(self, arrow, n)

    def transaction_cases(self, rnd: int) -> None:
        """Row 14 (see :mod:`benchmarks.transactions`; row 13 runs inside :meth:`produces`)."""
        transactions.cases(self, rnd)

    def endpoint_cases(self, rnd: int) -> None:
        """Rows 18 and 19 (see :mod:`benchmarks.endpoint`)."""
        endpoint.cases(self, rnd)

    def kafka_source(self, rnd: int) -> None:
        """``format("deltalog")`` beside its baselines, on the same partition: a batch read of the
        whole log vs ``spark.read.parquet`` of the same files (both to Spark's ``noop`` sink, every column
        read), a batch write of Arrow data vs ``store.append`` of the same batches, and a streaming read from
        the earliest offset to the end (``availableNow``, ``noop`` sink) for its records/s."""
        import deltalog.sql.kafka

        deltalog.sql.kafka.register(self.spark)

        def source() -> Any:
            return (self.spark.read.format("deltalog").option("store", self.pristine)
                    .option("subscribe", wl.TOPIC).load())

        self._time(SOURCE_READ, lambda: source().write.format("noop").mode("overwrite").save(),
                   lambda: self._rows(source(), self.gen.total_records))
        def parquet() -> Any:
            return self.spark.read.parquet(*self.paths)

        self._time(PARQUET_READ, lambda: parquet().write.format("noop").mode("overwrite").save(),
                   lambda: self._rows(parquet(), self.gen.total_records))

        batches = [b.select([KEY, VALUE]) for b in wl.append_batches(self.w)]
        rows = sum(b.num_rows for b in batches)
        df = self.spark.createDataFrame(pa.concat_tables(batches).to_pandas()).cache()  # untimed: the input
        df.count()
        sink = self.store(self.fresh("source-write"))
        sink.create_topic("written", 1, config={"cleanup.policy": "compact"})
        appended = self.store(self.fresh("source-append"))
        appended.create_topic("written", 1, config={"cleanup.policy": "compact"})
        self._time(SOURCE_WRITE, lambda: df.write.format("deltalog").option("store", sink.root)
                   .option("topic", "written").mode("append").save(),
                   lambda: self._written(sink, rows))
        self._time(SOURCE_APPEND, lambda: [appended.append("written", 0, b) for b in batches],
                   lambda: self._written(appended, rows))
        df.unpersist()

        checkpoint = self.fresh("source-stream-checkpoint")

        def stream() -> None:
            q = (self.spark.readStream.format("deltalog").option("store", self.pristine)
                 .option("subscribe", wl.TOPIC).option("startingOffsets", "earliest").load()
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
            q.awaitTermination()

        self._time(SOURCE_STREAM, stream, lambda: None)
        self.t.figures["stream_records"] = self.gen.total_records

    def embedded_sql(self, rnd: int) -> None:
        from benchmarks.embedded_sql import embedded_sql

        embedded_sql(self, rnd)

    def cli_startup(self, rnd: int) -> None:
        from benchmarks.cli_startup import cli_startup

        cli_startup(self, rnd)

    def cold_pass(self, rnd: int) -> None:
        from benchmarks.cold_pass import cold_pass

        cold_pass(self, rnd)

    def fleet(self, rnd: int) -> None:
        from benchmarks.fleet import fleet

        fleet(self, rnd)

    def _rows(self, df: Any, expected: int) -> None:
        got = df.count()
        if got != expected:
            raise BenchmarkFailure(f"the read returned {got} records, expected {expected}")

    @staticmethod
    def _written(store: Store, expected: int) -> None:
        end = store.log("written", 0).head().log_end_offset
        if end % expected:
            raise BenchmarkFailure(f"the write left the log end at {end}, not a multiple of {expected}")

    def current_state_reads(self, rnd: int) -> None:
        compacted = self.path("compacted")
        if not os.path.exists(compacted):
            shutil.copytree(self.pristine, compacted)
            self.store(compacted).clean_partition(wl.TOPIC, 0, force=True)
        for label, root in (("read current state, compacted", compacted),
                            ("read current state, uncompacted", self.pristine)):
            store = self.store(root)
            df_of = self._current_state_reader(store)
            self._time(label, lambda df_of=df_of: df_of().write.format("noop").mode("overwrite").save(),
                       lambda df_of=df_of: self._current_state_rows(df_of))

    def _current_state_reader(self, store: Store) -> Callable[[], Any]:
        """The current state (latest live record per key) as a DataFrame: through deltalog's own view when the
        store has one, else a Spark row_number() over the partition's snapshot (noted in the report)."""
        if hasattr(store, "current_state"):
            self.t.figures["current_state_via"] = "store.current_state"
            return lambda: store.current_state(wl.TOPIC)
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        from deltalog.sql.reads import read_snapshot, storage_of

        self.t.figures["current_state_via"] = "Spark row_number() over deltalog.sql.reads.read_snapshot"
        log = store.log(wl.TOPIC, 0)

        def df() -> Any:
            w = Window.partitionBy(KEY).orderBy(F.col(OFFSET).desc())
            records = read_snapshot(self.spark, storage_of(log), log.uri, log.snapshot())
            latest = records.withColumn("_rn", F.row_number().over(w)).where(F.col("_rn") == 1).drop("_rn")
            return latest.where(F.col(VALUE).isNotNull())

        return df

    def _current_state_rows(self, df_of: Callable[[], Any]) -> None:
        rows = df_of().count()
        if rows != self.live_keys:
            raise BenchmarkFailure(f"the current state has {rows} rows, expected {self.live_keys} live keys")

    def spark_views(self, rnd: int) -> None:
        """The Spark views over the local (uncompacted) store beside the same queries written over
        ``spark.read.parquet`` of the same files: a count of the log (offsets from the log start) and a count of
        the current state (the clean section's live keys not overwritten in the dirty tail, plus the tail's
        latest live record per key), each to ``count()``. The views list the snapshot with delta-rs and read
        with Spark's Parquet reader on a local disk (:mod:`deltalog.sql.parquet_reads`), so this is what the
        listing, the planning and the view's filters cost on top of the scan."""
        from pyspark.sql import functions as F

        store = self.store(self.pristine)
        start, first_dirty = self.snap.log_start_offset, self.gen.first_dirty_offset
        clean = [p for p, f in zip(self.paths, self.files, strict=True) if f.min_offset < first_dirty]
        tail = [p for p, f in zip(self.paths, self.files, strict=True) if f.max_offset >= first_dirty]
        cols = [OFFSET, KEY, VALUE, HEADERS, TIMESTAMP]

        def parquet(paths: list[str]) -> Any:
            return self.spark.read.schema(SPARK_SCHEMA_DDL).parquet(*paths).where(F.col(OFFSET) >= start)

        def parquet_state() -> Any:
            c = parquet(clean).where((F.col(OFFSET) < first_dirty) & F.col(KEY).isNotNull()
                                     & F.col(VALUE).isNotNull()).select(*cols)
            latest = (parquet(tail).where((F.col(OFFSET) >= first_dirty) & F.col(KEY).isNotNull())
                      .groupBy(KEY).agg(F.max_by(F.struct(*[F.col(x) for x in cols]), F.col(OFFSET)).alias("r"))
                      .select("r.*"))
            keys = latest.select(KEY).hint("broadcast")
            return c.join(keys, [KEY], "left_anti").select(*cols).unionByName(latest.where(F.col(VALUE).isNotNull()))

        log_rows: dict[str, int] = {}
        self._time(VIEW_LOG, lambda: log_rows.__setitem__("view", store.log_frame(wl.TOPIC).count()), lambda: None)
        self._time(PARQUET_LOG, lambda: log_rows.__setitem__("parquet", parquet(self.paths).count()), lambda: None)
        state_rows: dict[str, int] = {}
        self._time(VIEW_STATE, lambda: state_rows.__setitem__("view", store.current_state(wl.TOPIC).count()),
                   lambda: None)
        self._time(PARQUET_STATE, lambda: state_rows.__setitem__("parquet", parquet_state().count()), lambda: None)
        if not log_rows["view"] == log_rows["parquet"] == self.gen.total_records:
            raise BenchmarkFailure(f"log counts differ: {log_rows}, expected {self.gen.total_records}")
        if not state_rows["view"] == state_rows["parquet"] == self.live_keys:
            raise BenchmarkFailure(f"current-state counts differ: {state_rows}, expected {self.live_keys} live keys")
        if rnd == 0:
            from deltalog.sql.parquet_reads import parquet_readable
            from deltalog.sql.source import file_slices

            probe = file_slices(self.uri, 0, self.files)[0]
            self.t.figures["views_read_with"] = ("Spark's Parquet reader" if parquet_readable(
                self.spark, self.storage, probe) else "the Python data source")

    # -- helpers --------------------------------------------------------------------------------------

    def _spark_parquet(self) -> Any:
        """The partition's files through Spark's own Parquet reader: the plain-Spark baselines read as any Spark
        user would (deltalog's own reads go through its Python data source, deltalog.sql.source)."""
        return self.spark.read.schema(SPARK_SCHEMA_DDL).parquet(*self.paths)

    def _time(self, name: str, run: Callable[[], None], check: Callable[[], None]) -> None:
        started = time.perf_counter()
        run()
        seconds = time.perf_counter() - started
        check()
        self.t.add(name, seconds)
        self.log(f"  {name}: {seconds:.2f} s")

    @staticmethod
    def _count(out_dir: str, expected: int) -> None:
        rows = parquet_rows(out_dir)
        if rows != expected:
            raise BenchmarkFailure(f"{out_dir} holds {rows} rows, expected {expected}")

    def clean_pass_s3(self, rnd: int) -> None:
        """The same pass on a copy of the uncleaned store uploaded to the local S3 server: every read and write
        of both passes, the spill files and the commit go over HTTP to moto instead of to the local disk."""
        if self.s3 is None:
            return
        if self._s3_bucket is None:
            self._s3_bucket = self.s3.create_bucket("deltalog-bench")
        uri = f"{self._s3_bucket}/clean-{rnd}-{os.urandom(4).hex()}"
        target = Storage(uri, self.s3.storage_options)
        for folder, _, names in os.walk(self.pristine):  # untimed: the upload of the uncleaned store
            for name in names:
                local = os.path.join(folder, name)
                with open(local, "rb") as f:
                    target.write_bytes(target.location(*os.path.relpath(local, self.pristine).split(os.sep)),
                                       f.read())
        store = Store(uri, storage_options=self.s3.storage_options, spark=self.spark,
                      clock=ManualClock(wl.NOW_MS + 1 + rnd))
        self._time_pass(store, S3_PASS, "clean s3")

    @staticmethod
    def _log_rows(store: Store, expected: int) -> None:
        head = store.log("append", 0).head()
        if head.log_end_offset != expected:
            raise BenchmarkFailure(f"store.append left the log end at {head.log_end_offset}, expected {expected}")

    @staticmethod
    def _table_rows(uri: str, expected: int) -> None:
        rows = sum(pa.table(DeltaTable(uri).get_add_actions(flatten=True)).column("num_records").to_pylist())
        if rows != expected:
            raise BenchmarkFailure(f"write_deltalake left {rows} rows, expected {expected}")

    def warm_up(self) -> None:
        """Run every Spark case once on the tiny preset, untimed: the first Spark job of a JVM pays for class
        loading and JIT compilation (a cleaning pass took 4x longer cold than warm here), which is not what
        any of the comparisons is about."""
        tiny = Bench(wl.PRESETS["tiny"], self.path("warm-up"), self.spark, self.cores, log=lambda _: None,
                     connect=self.connect)
        os.makedirs(tiny.dir, exist_ok=True)
        tiny.setup()
        for case in (tiny.clean_pass, tiny.clean_pass_connect, tiny.row_number_dedupe, tiny.read_rewrite,
                     tiny.map_build, tiny.current_state_reads, tiny.spark_views):
            case(0)
        shutil.rmtree(tiny.dir, ignore_errors=True)

    def run(self, repeats: int, rows: set[int] | None = None) -> Timings:
        """Every case ``repeats`` times, in a fixed order; with ``rows``, only the cases behind those report
        rows (and no map memory figures unless row 5 is among them)."""
        cases = [c for c in CASE_ORDER if rows is None or any(c in ROW_CASES[r] for r in rows)]
        #: Wall seconds of each case a round, its setup and checks included, and of the warm-up and generation:
        #: what a run costs, for planning one (docs/benchmarks.md, "How long a run takes").
        took = self.t.figures.setdefault(CASE_SECONDS, {})
        started = time.perf_counter()
        self.log("warming up the JVM on the tiny preset (untimed)")
        self.warm_up()
        took["warm-up"] = [time.perf_counter() - started]
        started = time.perf_counter()
        self.setup()
        took["setup"] = [time.perf_counter() - started]
        for rnd in range(repeats):
            self.log(f"round {rnd + 1}/{repeats}")
            for case in cases:
                started = time.perf_counter()
                getattr(self, case)(rnd)
                took.setdefault(case, []).append(time.perf_counter() - started)
        if rows is None or 5 in rows:
            from benchmarks.memory import measure_map_memory

            started = time.perf_counter()
            self.t.figures["map_memory"] = measure_map_memory(self)
            took["map memory"] = [time.perf_counter() - started]
        self.log("wall seconds a case took, all rounds: " + ", ".join(f"{case} {sum(v):.0f}" for case, v in took.items()))
        return self.t


#: ``Timings.figures`` key: the wall seconds each case took a round (and the warm-up's, the setup's).
CASE_SECONDS = "case_seconds"
#: The cases of a round, in the order they run.
CASE_ORDER = ("clean_pass", "clean_pass_connect", "clean_pass_s3", "row_number_dedupe", "read_rewrite",
              "duckdb_dedupe", "floor_pass", "delta_merge", "map_build", "appends", "current_state_reads",
              "kafka_source", "transaction_cases", "embedded_sql", "spark_views", "endpoint_cases", "cli_startup",
              "cold_pass", "fleet")
#: The cases each report row needs (``python -m benchmarks --rows``).
ROW_CASES = {
    1: ("clean_pass", "row_number_dedupe"), 2: ("clean_pass", "read_rewrite"), 3: ("clean_pass", "duckdb_dedupe"),
    4: ("clean_pass", "delta_merge"), 5: ("map_build",), 6: ("appends",), 7: ("current_state_reads",),
    8: ("clean_pass", "clean_pass_connect"), 9: ("clean_pass", "clean_pass_s3"),
    10: ("kafka_source",), 11: ("kafka_source",), 12: ("kafka_source",), 13: ("appends",), 14: ("transaction_cases",),
    15: ("embedded_sql",), 16: ("spark_views",), 17: ("spark_views",),
    18: ("endpoint_cases",), 19: ("endpoint_cases",), 20: ("clean_pass", "floor_pass"), 21: ("cli_startup",),
    22: ("cold_pass",), 23: ("fleet",), 24: ("fleet",),
}
