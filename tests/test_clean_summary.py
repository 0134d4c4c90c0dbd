"""The cleaner's log line says what a pass did in words a reader can act on: a pass whose files came out larger
than it read says so, never "-25.8% size reduction"."""

from __future__ import annotations

import dataclasses

from deltalog.cleaner.cleaner import CleanResult


def result(bytes_read: int, bytes_written: int) -> CleanResult:
    fields = {f.name: 0 for f in dataclasses.fields(CleanResult)}
    fields.update(topic="t", bytes_read=bytes_read, bytes_written=bytes_written, records_read=4, records_written=3,
                  map_utilization=0.1)
    return CleanResult(**fields)


def test_a_larger_rewrite_is_no_size_reduction():
    line = next(x for x in result(1000, 1258).summary().splitlines() if "size reduction" in x)
    assert line.strip().startswith("no size reduction: 25.8% larger with 25.0% fewer messages") and "-" not in line
    assert result(1000, 1258).size_reduction < 0  # the figure as data stays what it is


def test_a_smaller_rewrite_reads_as_kafkas_line():
    assert "  50.0% size reduction (25.0% fewer messages)" in result(1000, 500).summary().splitlines()
