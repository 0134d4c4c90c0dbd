"""Data-quality checks that prove, on a user's own tables, that compaction kept its promises (the guarantees
Kafka's ``LogCleaner`` documents).

The guarantees are Great Expectations suites (:mod:`deltalog.quality.suites`) validated on Spark
DataFrames of the partition tables (:mod:`deltalog.quality.frames`); :func:`check_topic` runs them and
keeps the results (:mod:`deltalog.quality.check`). ``store.check(topic)`` is the entry point.
"""

from deltalog.errors import CheckFailedError
from deltalog.quality.check import (
    CheckResult,
    ExpectationOutcome,
    SuiteOutcome,
    check_after_clean,
    check_topic,
    saved_results,
)

__all__ = ["CheckFailedError", "CheckResult", "ExpectationOutcome", "SuiteOutcome", "check_after_clean", "check_topic",
           "saved_results"]
