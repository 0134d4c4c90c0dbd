"""``python -m benchmarks.state_table --records N --keys K``: the state table (docs/state-table.md) against the
current-state view, and its incremental refresh against a plain delta-rs MERGE and a rebuild.

One partition of ``--records`` records over ``--keys`` keys (100-byte random values, 5% tombstones), appended in
batches. Measured in one warm process, each query the median of ``--repeat`` runs, all through ``store.sql`` on the
embedded engine (DuckDB): ``count(*)`` and a point lookup by key on ``<topic>_state`` (the table's files) and on
``<topic>_current`` (the view over the log). Then, ``--rounds`` times, ``--new`` percent new records are
appended and applied two ways from the same table version: a bare delta-rs MERGE of the rows (their latest per key,
decoded, prepared beforehand and not timed) into a copy of the table, and ``store.refresh_state`` (which also reads
the new records and reduces them); the medians of the rounds are kept. Last, ``refresh_state(full=True)`` (rebuild
from the log). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
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


def _median(fn, repeat: int) -> tuple[float, object]:  # noqa: ANN001
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=1_500_000)
    p.add_argument("--keys", type=int, default=150_000)
    p.add_argument("--new", type=float, default=1.0, help="percent of --records appended before the refresh")
    p.add_argument("--batch", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3, help="rounds of new records, each applied both ways")
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="state-bench-"))
    rng = np.random.default_rng(35)
    store = Store(root / "store")
    store.create_topic("t", 1, config={"cleanup.policy": "compact", "state.table.enable": "true"})
    out: dict[str, object] = {"records": args.records, "keys": args.keys, "new_percent": args.new}
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
    out["count_speedup"] = out["view_count_s"] / out["state_count_s"]
    out["lookup_speedup"] = out["view_lookup_s"] / out["state_lookup_s"]

    location = store.state_table_location("t")
    config = store.topic_config("t")
    pk, kk = merge_keys(config)
    merges, refreshes = [], []
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

        merge_s, merged = _median(bare_merge, 1)
        refresh_s, result = _median(lambda: store.refresh_state("t"), 1)
        merges.append(merge_s)
        refreshes.append(refresh_s)
        shutil.rmtree(copy)
    out["new_records"] = new
    out["rounds"] = args.rounds
    out["merge_s"], out["refresh_s"] = statistics.median(merges), statistics.median(refreshes)
    out["merge_s_each"], out["refresh_s_each"] = merges, refreshes
    out["refresh_records_read"] = result.records_read
    out["refresh_rows_merged"] = result.rows_merged
    out["refresh_files"] = {k: v for k, v in result.merge_metrics.items() if "files" in k}
    out["bare_merge_files"] = {k: v for k, v in merged.items() if "files" in k}
    out["rebuild_s"], _ = _median(lambda: store.refresh_state("t", full=True), 1)
    out["equal"] = store.compare_state("t").equal
    out["refresh_vs_merge"] = out["refresh_s"] / out["merge_s"]
    out["refresh_vs_rebuild"] = out["refresh_s"] / out["rebuild_s"]
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
