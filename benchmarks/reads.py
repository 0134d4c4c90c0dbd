"""``python -m benchmarks.reads``: what a small read of a big data file costs, against reading the whole file.

One bulk append of ``--records`` small records makes one data file. Each measured read runs in a fresh Python
process (so the peak of Arrow's allocations, ``pyarrow.default_memory_pool().max_memory()``, and the process's
max RSS are its own): ``store.read(max_records=1000)`` at the start, the middle and the end of the file, a
consumer's ``poll(max_records=1000)``, and a whole-file ``pyarrow.parquet.read_table`` for reference. Prints one
line per read and the ratio of its peak Arrow memory and time to the whole-file read's. No Spark.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = """
import json, resource, sys, time, glob
import pyarrow as pa, pyarrow.parquet as pq
from deltalog import Store
from deltalog.structs import TopicPartition
root, what, position = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = Store(root)
started = time.perf_counter()
if what == "read":
    n = len(store.read("big", 0, position, max_records=1000))
elif what == "poll":
    consumer = store.consumer(max_poll_records=1000, enable_auto_commit=False)
    consumer.assign([TopicPartition("big", 0)])
    consumer.seek(TopicPartition("big", 0), position)
    n = sum(len(v) for v in consumer.poll(max_records=1000).values())
else:
    (path,) = glob.glob(root + "/topics/big/0/*.parquet")
    n = pq.read_table(path).num_rows
seconds = time.perf_counter() - started
print(json.dumps({"records": n, "seconds": seconds, "arrow_peak": pa.default_memory_pool().max_memory(),
                  "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def build(root: str, records: int) -> float:
    """The store with one partition of one data file of ``records`` records; returns the append's seconds."""
    import pyarrow as pa

    from deltalog import Store

    store = Store(root)
    store.create_topic("big", 1)
    keys = pa.array([b"k%09d" % i for i in range(records)], pa.binary())
    values = pa.array([b"v%09d-%s" % (i, b"." * 16) for i in range(records)], pa.binary())
    started = time.perf_counter()
    store.append("big", 0, pa.table({"key": keys, "value": values}))
    return time.perf_counter() - started


def measure(root: str, what: str, position: int = 0) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _CHILD, root, what, str(position)], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.reads", description=__doc__)
    p.add_argument("--records", type=int, default=5_000_000, help="records in the one data file (default 5 M)")
    p.add_argument("--work-dir", default=None, help="where the store goes (default: a temporary directory)")
    args = p.parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="deltalog-bench-reads-")
    root = os.path.join(work, "store")
    n = args.records
    print(f"appending {n:,} records as one data file ...", flush=True)
    # In a process of its own: a child inherits its parent's max RSS, which the append would set.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    built = subprocess.run([sys.executable, "-c", f"from benchmarks.reads import build; print(build({root!r}, {n}))"],
                           capture_output=True, text=True, env=env, check=True)
    print(f"append: {float(built.stdout.strip().splitlines()[-1]):.2f} s")
    whole = measure(root, "whole")
    cases = [("read", 0), ("read", n // 2), ("read", max(0, n - 1000)), ("poll", n // 2)]
    print(f"{'read':<28}{'records':>9}{'Arrow peak MB':>15}{'max RSS MB':>12}{'ms':>9}{'memory vs whole':>17}"
          f"{'time vs whole':>15}")
    for what, position in cases:
        m = measure(root, what, position)
        print(f"{what + ' @ ' + format(position, ','):<28}{m['records']:>9,}{m['arrow_peak'] / 1e6:>15.1f}"
              f"{m['max_rss'] / 1e6:>12.0f}{m['seconds'] * 1000:>9.1f}{m['arrow_peak'] / whole['arrow_peak']:>17.3f}"
              f"{m['seconds'] / whole['seconds']:>15.3f}")
    print(f"{'whole file (read_table)':<28}{whole['records']:>9,}{whole['arrow_peak'] / 1e6:>15.1f}"
          f"{whole['max_rss'] / 1e6:>12.0f}{whole['seconds'] * 1000:>9.1f}{1:>17.3f}{1:>15.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
