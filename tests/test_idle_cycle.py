"""An idle cleaner cycle costs a few object-store requests per partition and no Spark: counted on moto's S3 server
through the request-logging proxy (tooling/fault_proxy.py), as the marginal requests of one more partition."""

from __future__ import annotations

import pyarrow as pa

from deltalog import Store

#: Requests an idle partition may cost: in a fresh process (its Delta log read once: delta-rs's open, the check for
#: other engines' commits, the log positions) and in a later cycle of the same process (one refresh of its snapshot
#: shared by the cycle's steps: a listing of its Delta log and a read of its _last_checkpoint; one listing of the
#: table's files for VACUUM's check). The uncleanable marks and the last passes' figures are listed once a cycle for
#: the whole store, so an unmarked, never-cleaned partition costs nothing there.
COLD_BOUND = 24
WARM_BOUND = 3
COMMITS = 3  # appends per partition, after the create


def _build(uri, options, partitions):
    store = Store(uri, storage_options=options)
    store.create_topic("t", partitions, config={"cleanup.policy": "compact"})
    for p in range(partitions):
        for _ in range(COMMITS):  # the active segment only: nothing to clean
            store.append("t", p, pa.table({"key": [b"k%d" % i for i in range(10)], "value": [b"v"] * 10}))


def _requests_per_cycle(proxy, uri, options, cycles=2):
    cleaner = Store(uri, storage_options=options).log_cleaner()  # a fresh store: nothing read yet

    def no_spark():
        raise AssertionError("an idle cycle asked for a Spark session")

    cleaner.spark = no_spark
    counts = []
    for _ in range(cycles):
        before = len(proxy.requests)
        cycle = cleaner.run_cycle()
        assert cycle.cleans == () and cycle.outcomes == ()
        counts.append(len(proxy.requests) - before)
    return counts


def test_an_idle_cycle_costs_a_bounded_number_of_requests_per_partition(s3_server, s3_store_uri, fault_proxy):
    options = fault_proxy.storage_options(s3_server.storage_options)
    small, large = 2, 5
    _build(f"{s3_store_uri}/small", options, small)
    _build(f"{s3_store_uri}/large", options, large)
    few = _requests_per_cycle(fault_proxy, f"{s3_store_uri}/small", options)
    many = _requests_per_cycle(fault_proxy, f"{s3_store_uri}/large", options)
    cold, warm = ((m - f) / (large - small) for f, m in zip(few, many, strict=True))
    assert cold <= COLD_BOUND, (few, many)
    assert warm <= WARM_BOUND, (few, many)
    assert warm < cold  # a later cycle reads only what changed
