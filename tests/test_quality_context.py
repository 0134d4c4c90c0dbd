"""The guarantee suites in a user's Great Expectations file context: saved under stable names, used as saved
(a user's added expectation runs next time), each run a Checkpoint whose result is in the context's validation
results store and whose UpdateDataDocsAction builds the data docs."""

from __future__ import annotations

import os

import great_expectations as gx
import great_expectations.expectations as gxe
import pytest

from deltalog import Record, Store
from deltalog.cli import main
from deltalog.errors import InvalidArgumentError
from deltalog.quality.ge_context import open_context

TOPIC = "prices"


def fill(store: Store) -> None:
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    for key, value in [(b"grape", b"2.69"), (b"lime", b"0.49"), (b"grape", None), (b"lime", b"1.59")]:
        store.append(TOPIC, 0, [Record(key=key, value=value)])


def test_suites_are_saved_in_the_context_and_a_users_added_expectation_runs_next_time(spark_store, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    fill(spark_store)

    first = spark_store.check(TOPIC, cleans="none", context=str(project))
    assert first.success, first.summary()
    context = gx.get_context(mode="file", project_root_dir=str(project))
    assert {s.name for s in context.suites.all()} == {"deltalog.prices.partition"}
    assert {c.name for c in context.checkpoints.all()} == {"deltalog.prices.partition"}
    keys = context.validation_results_store.list_keys()
    assert [k.run_id.run_name for k in keys] == [f"{TOPIC}-0.partition-v{first.suites[0].version}"]
    assert first.data_docs is not None and first.data_docs.startswith("file://")
    assert os.path.exists(first.data_docs[len("file://"):])

    # A user adds an expectation to the saved suite (offsets stay below 2: false here, offset 3 exists).
    suite = context.suites.get("deltalog.prices.partition")
    suite.add_expectation(gxe.ExpectColumnMaxToBeBetween(column="offset", max_value=2))
    suite.save()

    spark_store.append(TOPIC, 0, [Record(key=b"kiwi", value=b"0.35")])
    code = main(["--store", spark_store.root, "check", TOPIC, "--cleans", "none", "--ge-context",
                 str(project / "gx")])
    assert code == 3  # broken data found (the exit code of a failed check): the user's expectation failed
    second = context.validation_results_store.list_keys()
    assert len(second) == 2
    latest = max(second, key=lambda k: k.run_id.run_time)
    result = context.validation_results_store.get(latest)
    failed = [r.expectation_config.type for r in result.results if not r.success]
    assert failed == ["expect_column_max_to_be_between"]
    assert sum(1 for r in result.results if (r.expectation_config.meta or {}).get("deltalog")) == \
        len(first.suites[0].expectations)


def test_a_context_that_is_neither_a_context_nor_a_directory_is_refused(tmp_path):
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        open_context(tmp_path / "missing")
    with pytest.raises(InvalidArgumentError, match="data context or the directory"):
        open_context(42)


def test_the_jobs_ge_context_is_a_directory_name_or_null():
    from deltalog.errors import InvalidConfigError
    from deltalog.jobs.cleaner_job import JobConfig

    config = JobConfig.from_mapping({"store": {"uri": "/tmp/s"}, "job": {"ge_context": "/srv/gx-project"}})
    assert config.ge_context == "/srv/gx-project"
    assert JobConfig.from_mapping({"store": {"uri": "/tmp/s"}}).ge_context is None
    with pytest.raises(InvalidConfigError, match="job.ge_context must be null or the directory"):
        JobConfig.from_mapping({"store": {"uri": "/tmp/s"}, "job": {"ge_context": 3}})
