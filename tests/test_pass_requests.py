"""What one more cleaning pass costs in object-store requests, in a round of shared Spark jobs on moto's S3 server:
counted through the request-logging proxy (tooling/fault_proxy.py) as the marginal requests of one more small
partition, driver and Spark tasks together (the tasks reach the store through the same proxy). docs/scale.md plans a
store of 100,000 partitions on S3 from this figure."""

from __future__ import annotations

from collections import Counter

import pytest

from deltalog import Record, Store

#: Requests one more small partition's pass may cost, whatever the method: 74 measured on a log of 8 commits since
#: its last checkpoint (a third of them reads of those commits, by the pass's handles and checks; a sixth listings;
#: each data file read several times; the lease, the commit, the figures). docs/scale.md has the breakdown.
PASS_BOUND = 80


def _build(uri, options, spark, partitions):
    store = Store(uri, storage_options=options, spark=spark)
    store.create_topic("cdc", partitions, config={"cleanup.policy": "compact"})
    for p in range(partitions):
        for r in range(3):  # three closed segments of five keys: a small dirty section
            store.append("cdc", p, [Record(f"k{i}", f"v{r}") for i in range(5)])
            store.roll("cdc", p)
        store.append("cdc", p, [Record("active", "a")])
    return store


def _clean(proxy, uri, options, spark, partitions):
    """(requests, by method) of cleaning every partition of a fresh store, in this process's shared rounds."""
    store = _build(uri, options, spark, partitions)
    store.log_cleaner()  # imported and built before counting
    before = len(proxy.requests)
    cleaned = store.log_cleaner(shared_jobs=True).clean_filthiest_logs()
    assert len(cleaned.cleans) == partitions and not cleaned.outcomes
    seen = proxy.requests[before:]
    return len(seen), Counter(r.method for r in seen)


@pytest.mark.spark
@pytest.mark.object_store
def test_one_more_pass_costs_a_bounded_number_of_requests(spark, s3_server, s3_store_uri, fault_proxy):
    options = fault_proxy.storage_options(s3_server.storage_options)
    small, large = 2, 6
    _clean(fault_proxy, f"{s3_store_uri}/warm-up", options, spark, 2)  # the session's first jobs, uncounted
    few, few_methods = _clean(fault_proxy, f"{s3_store_uri}/small", options, spark, small)
    many, many_methods = _clean(fault_proxy, f"{s3_store_uri}/large", options, spark, large)
    per_pass = (many - few) / (large - small)
    by_method = {m: (many_methods[m] - few_methods[m]) / (large - small) for m in many_methods}
    print(f"requests a pass: {per_pass:.1f} {by_method}")  # the figure docs/scale.md uses (pytest -s)
    assert 0 < per_pass <= PASS_BOUND, (few, many, by_method)
