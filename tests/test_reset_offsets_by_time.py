"""``deltalog consumer-groups --reset-offsets`` with the rest of Kafka's scenarios (``ConsumerGroupCommand``):
``--to-datetime``, ``--by-duration``, ``--shift-by``, ``--to-current``, ``--from-file`` and ``--export``, through the
real entry point (``deltalog.cli.main``)."""

from __future__ import annotations

import pytest
from conftest import run_cli

from deltalog import Record, Store
from deltalog.structs import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture
def root(tmp_path) -> str:
    """t-0: timestamps 1000, 2000, 3000 at offsets 0-2; t-1: 500 at offset 0; group g committed t-0 at 1."""
    root = str(tmp_path / "store")
    s = Store(root, create=True)
    s.create_topic("t", 2)
    s.append("t", 0, [Record(key=b"k", value=b"v", timestamp_ms=ts) for ts in (1000, 2000, 3000)])
    s.append("t", 1, [Record(key=b"k", value=b"v", timestamp_ms=500)])
    s.alter_consumer_group_offsets("g", {T0: 1})
    return root


def reset(capsys, root, *argv):
    return run_cli(capsys, "--store", root, "consumer-groups", "--reset-offsets", "--group", "g", *argv)


def committed(root):
    return {tp: om.offset for tp, om in Store(root).list_consumer_group_offsets("g").items()}


def test_to_datetime_finds_the_earliest_offset_at_or_after_the_time(capsys, root):
    code, out, err = reset(capsys, root, "--topic", "t", "--to-datetime", "1970-01-01T00:00:01.500", "--export")
    assert code == 0, err
    assert out == "t,0,1\nt,1,1\n\n"  # t-1 has no record at or after: the log end, as Kafka falls back
    assert "Partition 1 from topic t is empty. Falling back to latest known offset." in err
    assert "--execute option is missing" in err and committed(root) == {T0: 1}  # a dry run
    # a zone: 01:00:02.000+01:00 is 00:00:02.000 UTC
    code, out, err = reset(capsys, root, "--topic", "t:0", "--to-datetime", "1970-01-01T01:00:02.000+01:00",
                           "--execute", "--export")
    assert (code, out) == (0, "t,0,1\n\n") and committed(root) == {T0: 1}
    code, out, err = reset(capsys, root, "--topic", "t:0", "--to-datetime", "1970-01-01T00:00:02.001Z", "--execute")
    assert code == 0 and committed(root) == {T0: 2}
    # the forms `consume --as-of` takes (ISO 8601 without milliseconds, a date alone) are taken too
    code, out, err = reset(capsys, root, "--topic", "t:0", "--to-datetime", "1970-01-01T00:00:01.5Z", "--export")
    assert (code, out) == (0, "t,0,1\n\n"), err
    code, out, err = reset(capsys, root, "--topic", "t:0", "--to-datetime", "1970-01-01", "--export")
    assert (code, out) == (0, "t,0,0\n\n"), err


def test_by_duration_counts_back_from_now(capsys, root):
    Store(root).append("t", 1, [Record(key=b"k", value=b"now")])  # stamped now, at offset 1
    code, out, err = reset(capsys, root, "--topic", "t", "--by-duration", "PT1H", "--export")
    assert (code, out) == (0, "t,0,3\nt,1,1\n\n"), err


def test_shift_by_moves_the_committed_offset_clamped(capsys, root):
    code, out, err = reset(capsys, root, "--topic", "t:0", "--shift-by", "1", "--execute", "--export")
    assert (code, out) == (0, "t,0,2\n\n") and committed(root)[T0] == 2
    code, out, err = reset(capsys, root, "--topic", "t:0", "--shift-by", "-5", "--export")
    assert (code, out) == (0, "t,0,0\n\n")
    assert "New offset (-3) is lower than earliest offset for topic partition t-0. Value will be set to 0" in err
    code, out, err = reset(capsys, root, "--topic", "t", "--shift-by", "1")  # t-1 has no committed offset
    assert code == 1 and "Cannot shift offset for partition t-1 since there is no current committed offset" in err


def test_to_current_keeps_committed_offsets_and_ends_the_others(capsys, root):
    code, out, err = reset(capsys, root, "--topic", "t", "--to-current", "--export")
    assert (code, out) == (0, "t,0,1\nt,1,1\n\n")  # t-1 has no committed offset: its log end


def test_export_then_from_file_round_trips(capsys, root, tmp_path):
    code, out, _ = reset(capsys, root, "--topic", "t", "--to-earliest", "--export")
    plan = tmp_path / "plan.csv"
    plan.write_text(out.replace("t,1,0", "t,1,9"))  # 9 is past the log end: clamped to 1
    code, out, err = reset(capsys, root, "--from-file", str(plan), "--execute")
    assert code == 0, err
    assert "New offset (9) is higher than latest offset for topic partition t-1. Value will be set to 1" in err
    assert committed(root) == {T0: 0, T1: 1}
    plan.write_text("g,t,0,2\nother,t,1,0\n")  # Kafka's several-group format: only g's rows
    code, out, err = reset(capsys, root, "--from-file", str(plan), "--execute")
    assert code == 0 and committed(root) == {T0: 2, T1: 1}


@pytest.mark.parametrize(("argv", "message"), [
    (["--topic", "t", "--to-datetime", "31/01/2024"], "YYYY-MM-DDTHH:mm:SS.sss"),
    (["--topic", "t", "--by-duration", "1h"], "ISO-8601 duration"),
    (["--topic", "t", "--shift-by", "x"], "whole number of offsets"),
    (["--topic", "t", "--to-current", "--to-latest"], "not allowed with"),
    (["--topic", "t", "--from-file", "plan.csv"], "leave out --topic"),
    (["--from-file", "/nonexistent/plan.csv"], "--from-file /nonexistent/plan.csv"),
])
def test_bad_scenarios_are_usage_errors(capsys, root, argv, message):
    code, out, err = reset(capsys, root, *argv)
    assert code == 2 and message in err, err


def test_a_malformed_plan_names_its_line(capsys, root, tmp_path):
    plan = tmp_path / "plan.csv"
    plan.write_text("t,0,1\nt,zero,1\n")
    code, out, err = reset(capsys, root, "--from-file", str(plan))
    assert code == 1 and "line 2" in err and "'t,zero,1'" in err
