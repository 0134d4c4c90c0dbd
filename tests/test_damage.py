"""Damaged tables: every entry point names the damaged partition and file; the cleaner goes on with the others;
doctor walks every partition without Spark; VACUUM removes what killed writers left.

Real tables, damaged through the store's Storage (tooling/reliability/damage.py builds them: partition 0 of a
two-partition compacted topic damaged, partition 1 healthy); one store per kind of damage, shared by the tests.
"""

from __future__ import annotations

import pytest

from deltalog import Record, Store
from deltalog.cleaner.uncleanable import UncleanablePartitions
from deltalog.cli.doctor_checks import FAIL, OK, check_store_damage, scan_store
from deltalog.errors import CleaningFailedError, CorruptLogError
from deltalog.log import damage as log_damage
from deltalog.storage import basename
from tooling.reliability import damage


@pytest.fixture(scope="module")
def damaged_stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("damaged")
    built: dict[str, damage.DamagedStore] = {}

    def get(kind: str) -> damage.DamagedStore:
        if kind not in built:
            built[kind] = damage.build(str(root / kind), kind)
        return built[kind]

    return get


def _cases():
    for kind in damage.KINDS:
        for entry in damage.ENTRIES:
            marks = [pytest.mark.spark] if entry in damage.SPARK_ENTRIES else []
            if entry == "doctor":  # it runs `java -version`
                marks.append(pytest.mark.subprocess)
            if (kind, entry) in damage.BLIND_SPOTS:  # by design; strict: a fix shows up here
                marks.append(pytest.mark.xfail(strict=True, reason=damage.BLIND_SPOTS[kind, entry]))
                if entry in damage.SPARK_ENTRIES:  # a failing Spark job: ~30 s on 2 shared cores
                    marks.append(pytest.mark.slow)
            yield pytest.param(kind, entry, marks=marks, id=f"{kind}-{entry.replace(' ', '_')}")


@pytest.mark.parametrize(("kind", "entry"), list(_cases()))
def test_entry_point_names_the_damaged_partition_and_file(damaged_stores, kind, entry, request):
    spark = request.getfixturevalue("spark") if entry in damage.SPARK_ENTRIES else None
    outcome = damage.try_entry(damaged_stores(kind), entry, spark)
    assert outcome.held, outcome.detail


def test_the_healthy_partition_reads_beside_a_damaged_one(damaged_stores):
    for kind in damage.KINDS:
        store = damaged_stores(kind).store()
        latest = {r.key: r.value for r in store.read(damage.TOPIC, damage.HEALTHY_PARTITION)}  # maybe cleaned by now
        last = damage.BATCHES_BEFORE_CHECKPOINT + damage.BATCHES_AFTER_CHECKPOINT - 1
        assert latest == {f"k{j}".encode(): f"v{last}-{j}".encode() for j in range(damage.KEYS)}, kind


@pytest.mark.parametrize("kind", ["commit_missing", "data_truncated"])
def test_cleaner_cycle_marks_only_the_damaged_partition_and_cleans_the_other(tmp_path, spark, kind):
    damaged = damage.build(str(tmp_path / "s"), kind)
    store = damaged.store(spark=spark)
    cycle = store.log_cleaner().run_cycle()
    assert [(f.topic, f.partition, f.error_type) for f in cycle.failures] == [
        (damage.TOPIC, damage.DAMAGED_PARTITION, "CorruptLogError")]
    assert basename(damaged.file) in cycle.failures[0].message
    assert {(c.topic, c.partition) for c in cycle.cleans} == {(damage.TOPIC, damage.HEALTHY_PARTITION)}
    healthy = store.log(damage.TOPIC, damage.HEALTHY_PARTITION).snapshot()
    assert healthy.cleaner_checkpoint == healthy.active_segment_base  # cleaned up to the active segment
    marks = UncleanablePartitions(store.storage).marks()
    assert [(m.topic, m.partition) for m in marks] == [(damage.TOPIC, damage.DAMAGED_PARTITION)]
    # The next cycle skips the marked partition quietly, and the metrics count it (a damaged log has no figures).
    again = store.log_cleaner().run_cycle()
    assert again.failures == () and again.uncleanable == ((damage.TOPIC, damage.DAMAGED_PARTITION),)
    from deltalog.cleaner.metrics import collect

    assert collect(store.log_manager).uncleanable_partitions_count == 1


def test_store_clean_raises_after_cleaning_the_rest(tmp_path, spark):
    damaged = damage.build(str(tmp_path / "s"), "hint_dangling")
    store = damaged.store(spark=spark)
    with pytest.raises(CleaningFailedError) as e:
        store.clean()
    assert f"{damage.TOPIC}-{damage.DAMAGED_PARTITION}" in str(e.value) and "_last_checkpoint" in str(e.value)
    assert [(r.topic, r.partition) for r in e.value.results] == [(damage.TOPIC, damage.HEALTHY_PARTITION)]
    assert store.clean() == []  # marked: skipped until reset, nothing raised


# -- doctor ----------------------------------------------------------------------------------------------------


def test_doctor_finds_one_damage_per_kind_naming_the_fix(damaged_stores):
    for kind in damage.KINDS:
        damaged = damaged_stores(kind)
        scan = scan_store(damaged.store().storage)
        assert scan.partitions == 2
        assert [(d.partition_name, d.file) for d in scan.damages] == [
            (f"{damage.TOPIC}-{damage.DAMAGED_PARTITION}", damaged.file)], kind
        assert "restore" in scan.damages[0].fix or "delete" in scan.damages[0].fix


def test_doctor_passes_a_healthy_store(tmp_path):
    store = Store(tmp_path / "s")
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record(key=b"k", value=b"v")])
    store.log("t", 0).table().create_checkpoint()
    store.append("t", 0, [Record(key=b"k", value=b"w")])
    checks = check_store_damage(store.root)
    assert [c.status for c in checks] == [OK] and "2 partition(s)" in checks[0].detail


def test_doctor_warns_of_an_orphan_and_vacuum_removes_it_after_the_delay(tmp_path):
    outcome = damage.orphan_round_trip(str(tmp_path / "s"))
    assert outcome == damage.OrphanOutcome(doctor_warned=1, kept_inside_delay=True, removed_after_delay=True,
                                           doctor_after="OK", records_intact=True)


def test_doctor_on_a_store_without_topics_and_where_no_store_is(tmp_path):
    assert check_store_damage(str(tmp_path / "nothing"))[0].status == "INFO"
    Store(tmp_path / "empty")
    assert [c.status for c in check_store_damage(str(tmp_path / "empty"))] == [OK]


def test_doctor_walks_a_store_on_s3(s3_server, s3_store_uri):
    options = s3_server.storage_options
    for kind in ("data_truncated", "commit_missing", "hint_dangling"):
        damaged = damage.build(f"{s3_store_uri}/{kind}", kind, storage_options=options)
        checks = check_store_damage(damaged.root, options)
        failed = [c for c in checks if c.status == FAIL]
        assert [c.name for c in failed] == [f"damage {damage.TOPIC}-{damage.DAMAGED_PARTITION}"], checks
        assert damaged.file in failed[0].detail
        with pytest.raises(CorruptLogError, match=basename(damaged.file)):
            damaged.store().read(damage.TOPIC, damage.DAMAGED_PARTITION)


# -- the diagnosis itself ----------------------------------------------------------------------------------------


def test_a_task_error_comes_back_as_corrupt_log_error():
    text = ("py4j...PythonException: An exception was thrown from the Python worker:\nTraceback ...\n"
            "deltalog.errors.CorruptLogError: partition t-0 is damaged: /s/topics/t/0/x.parquet is missing\n")
    error = log_damage.worker_error(RuntimeError(text))
    assert isinstance(error, CorruptLogError) and str(error) == "partition t-0 is damaged: /s/topics/t/0/x.parquet is missing"
    assert log_damage.worker_error(RuntimeError("something else")) is None
    assert log_damage.partition_of("s3://b/p/topics/my.topic/12/cleaned-1-x/f.parquet") == ("my.topic", 12)
