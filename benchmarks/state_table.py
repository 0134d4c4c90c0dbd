"""``python -m benchmarks.state_table --records N --keys K``: the state table (docs/state-table.md) against the
current-state view, and its incremental refresh against a plain delta-rs MERGE and a rebuild.

One partition of ``--records`` records over ``--keys`` keys (100-byte random values, 5% tombstones), appended in
batches. Measured in one warm process, each query the median of ``--repeat`` runs, all through ``store.sql`` on the
embedded engine (DuckDB): ``count(*)`` and a point lookup by key on ``<topic>_state`` (the table's files) and on
``<topic>_current`` (the view over the log). Then, ``--rounds`` times, ``--new`` percent new records are
appended and applied two ways from the same table version: a bare delta-rs MERGE of the rows (their latest per key,
decoded, prepared beforehand and not timed) into a copy of the table, and ``store.refresh_state`` (which also reads
the new records and reduces them), each round the other first, timed by the wall clock and by the process's CPU
time (steadier on a loaded machine); the medians of the rounds are kept. Last, ``refresh_state(full=True)`` (rebuild
from the log). Prints one JSON object, with the load average at the start and the end. The medium preset's shape:
``--records 20000000 --keys 2000000`` (add ``--spark --spark-repeat 1``: Spark's view over 20 M records is slow).
``--check`` also times a refresh followed by the full proof that the table equals the log and one followed by the
incremental proof (``log.state.table.check``, :mod:`deltalog.state.increment`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from benchmarks.workload import key_bytes, random_values
from deltalog import Store
from deltalog.state import refresh as state_refresh
from deltalog.state.rows import DELETED, latest_per_key, merge_keys, state_rows


def _batch(rng: np.random.Generator, n: int, keys: int) -> pa.Table:
    tomb = rng.random(n) < 0.05
    return pa.table({"key": key_bytes(rng.integers(0, keys, n)), "value": random_values(rng, n, 100, tomb)})


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process: delta-rs's too
    return r.ru_utime + r.ru_stime


def _timed(fn) -> tuple[float, float, object]:  # noqa: ANN001
    """Wall and CPU seconds of one call, and its result: on a loaded machine the CPU time is the steadier figure."""
    c, t = _cpu_s(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t, _cpu_s() - c, out


def _median(fn, repeat: int) -> tuple[float, object]:  # noqa: ANN001
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _spark_rows(store: Store, key: str, repeat: int, out: dict[str, object]) -> None:
    from deltalog.sql.session import local_session

    spark = local_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    spark_store = Store(store.root, spark=spark)
    files = DeltaTable(store.state_table_location("t")).file_uris()
    state = lambda: spark.read.parquet(*files)  # noqa: E731 - what delta.`<location>` reads
    view = "t_current"
    spark_store.sql(f"SELECT count(*) FROM {view}", engine="spark").collect()  # warm up
    state().count()
    out["spark_state_count_s"], _ = _median(lambda: state().count(), repeat)
    out["spark_view_count_s"], _ = _median(
        lambda: spark_store.sql(f"SELECT count(*) FROM {view}", engine="spark").collect(), repeat)
    out["spark_state_lookup_s"], _ = _median(
        lambda: state().where(f"key = CAST('{key}' AS BINARY)").collect(), repeat)
    out["spark_view_lookup_s"], _ = _median(
        lambda: spark_store.sql(f"SELECT value FROM {view} WHERE key = CAST('{key}' AS BINARY)",
                                engine="spark").collect(), repeat)
    out["spark_count_speedup"] = out["spark_view_count_s"] / out["spark_state_count_s"]
    out["spark_lookup_speedup"] = out["spark_view_lookup_s"] / out["spark_state_lookup_s"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=1_500_000)
    p.add_argument("--keys", type=int, default=150_000)
    p.add_argument("--new", type=float, default=1.0, help="percent of --records appended before the refresh")
    p.add_argument("--batch", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--spark-repeat", type=int, default=None, help="--repeat for the Spark queries (default: --repeat)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of new records, each applied both ways")
    p.add_argument("--dir", default=None)
    p.add_argument("--check", action="store_true", help="also time the proof that the table equals the log: the "
                   "full proof (the whole log) against the incremental one after a refresh (the rows its commit "
                   "changed), each after its own round of --new percent new records")
    p.add_argument("--spark", action="store_true", help="also count and look up in Spark: the state table's "
                   "snapshot files (spark.read.parquet, as delta-spark would read them) against the current-state "
                   "view (store.sql(engine='spark'))")
    args = p.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="state-bench-"))
    rng = np.random.default_rng(35)
    store = Store(root / "store")
    store.create_topic("t", 1, config={"cleanup.policy": "compact", "state.table.enable": "true"})
    out: dict[str, object] = {"records": args.records, "keys": args.keys, "new_percent": args.new,
                              "load_average_start": os.getloadavg()}
    t = time.perf_counter()
    for i in range(0, args.records, args.batch):
        store.append("t", 0, _batch(rng, min(args.batch, args.records - i), args.keys))
    out["append_s"] = time.perf_counter() - t
    out["first_refresh_s"], _ = _median(lambda: store.refresh_state("t"), 1)
    out["state_rows"] = store.state("t", columns=["offset"]).num_rows
    key = key_bytes(np.array([7]))[0].as_py().decode()
    for rel in ("t_state", "t_current"):  # warm up: DuckDB's first query, the OS cache of the files
        store.sql(f"SELECT count(*) FROM {rel}").fetchall()
    for name, rel in (("state", "t_state"), ("view", "t_current")):
        out[f"{name}_count_s"], got = _median(lambda rel=rel: store.sql(f"SELECT count(*) FROM {rel}").fetchall(),
                                              args.repeat)
        out[f"{name}_count"] = got[0][0]
        out[f"{name}_lookup_s"], _ = _median(
            lambda rel=rel: store.sql(f"SELECT value FROM {rel} WHERE key = CAST('{key}' AS BLOB)").fetchall(),
            args.repeat)
    assert out["state_count"] == out["view_count"], out
    out["state_arrow_count_s"], _ = _median(lambda: store.state("t", columns=["offset"]).num_rows, args.repeat)
    if args.spark:
        _spark_rows(store, key, args.spark_repeat or args.repeat, out)
    out["count_speedup"] = out["view_count_s"] / out["state_count_s"]
    out["lookup_speedup"] = out["view_lookup_s"] / out["state_lookup_s"]

    location = store.state_table_location("t")
    config = store.topic_config("t")
    pk, kk = merge_keys(config)
    merges, refreshes, merge_cpus, refresh_cpus = [], [], [], []
    for r in range(args.rounds):  # each round: 1% new records, applied by a bare MERGE (on a copy) and by a refresh
        copy = str(root / f"merge-copy-{r}")
        shutil.copytree(location, copy)
        applied = store.state_history("t", limit=1)[0].offsets[0]
        new = int(args.records * args.new / 100)
        store.append("t", 0, _batch(rng, new, args.keys))
        read = state_refresh.read_partition(store.log("t", 0), applied)
        rows = state_rows(latest_per_key(read.records.combine_chunks()), 0, config)
        upd = {f'"{c}"': f's."{c}"' for c in rows.column_names if c != DELETED}

        def bare_merge(copy: str = copy, rows: pa.Table = rows, upd: dict = upd) -> dict:
            dt = DeltaTable(copy)
            return (dt.merge(rows, f't."{pk}" = s."{pk}" AND t."{kk}" = s."{kk}"', source_alias="s",
                             target_alias="t")
                    .when_matched_update(upd, predicate='NOT s."_deleted"')
                    .when_matched_delete(predicate='s."_deleted"')
                    .when_not_matched_insert(upd, predicate='NOT s."_deleted"').execute())

        # the two in turn first (the machine's load and the OS cache favour neither), wall and CPU time each
        first, second = (bare_merge, lambda: store.refresh_state("t"))[::1 if r % 2 == 0 else -1]
        timed = [_timed(first), _timed(second)][::1 if r % 2 == 0 else -1]
        (merge_s, merge_cpu, merged), (refresh_s, refresh_cpu, result) = timed
        merges.append(merge_s)
        refreshes.append(refresh_s)
        merge_cpus.append(merge_cpu)
        refresh_cpus.append(refresh_cpu)
        shutil.rmtree(copy)
    out["new_records"] = new
    out["rounds"] = args.rounds
    out["merge_s"], out["refresh_s"] = statistics.median(merges), statistics.median(refreshes)
    out["merge_s_each"], out["refresh_s_each"] = merges, refreshes
    out["merge_cpu_s"], out["refresh_cpu_s"] = statistics.median(merge_cpus), statistics.median(refresh_cpus)
    out["merge_cpu_s_each"], out["refresh_cpu_s_each"] = merge_cpus, refresh_cpus
    out["refresh_vs_merge_cpu"] = out["refresh_cpu_s"] / out["merge_cpu_s"]
    out["refresh_records_read"] = result.records_read
    out["refresh_rows_merged"] = result.rows_merged
    out["refresh_files"] = {k: v for k, v in result.merge_metrics.items() if "files" in k}
    out["bare_merge_files"] = {k: v for k, v in merged.items() if "files" in k}
    if args.check:  # a refresh with the full proof (nothing proven in this process yet), then one with the incremental
        for how in ("full", "incremental"):
            store.append("t", 0, _batch(rng, new, args.keys))
            wall, cpu, checked = _timed(lambda: store.refresh_state("t", check=True))
            assert checked.checked == how, checked
            out[f"refresh_{how}_check_s"], out[f"refresh_{how}_check_cpu_s"] = wall, cpu
        out["incremental_vs_full_check_cpu"] = out["refresh_incremental_check_cpu_s"] / out["refresh_full_check_cpu_s"]
        out["load_average_after_check"] = os.getloadavg()
    out["rebuild_s"], out["rebuild_cpu_s"], _ = _timed(lambda: store.refresh_state("t", full=True))
    out["refresh_vs_rebuild_cpu"] = out["refresh_cpu_s"] / out["rebuild_cpu_s"]
    out["equal"] = store.compare_state("t").equal
    out["refresh_vs_merge"] = out["refresh_s"] / out["merge_s"]
    out["refresh_vs_rebuild"] = out["refresh_s"] / out["rebuild_s"]
    out["load_average_end"] = os.getloadavg()
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
