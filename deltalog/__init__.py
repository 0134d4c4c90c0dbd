"""deltalog: Kafka's log compaction (``cleanup.policy=compact``) on Delta Lake tables, cleaned by Spark.

Producers append keyed records to the partitions of a topic and get offsets back; each partition is one
Delta table. The log cleaner, a Spark job, keeps the latest record per key without ever changing an
offset or the order of records. See README.md for a tour.
"""

from deltalog.clock import Clock, ManualClock, WallClock
from deltalog.config import StoreConfig, TopicConfig
from deltalog.errors import (
    CleaningFailedError,
    CommitConflictError,
    CorruptLogError,
    DeltalogError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    PartitionUncleanableError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from deltalog.record import Record
from deltalog.store import Store

__version__ = "0.1.0"

__all__ = [
    "CleaningFailedError",
    "Clock",
    "CommitConflictError",
    "CorruptLogError",
    "DeltalogError",
    "InvalidConfigError",
    "InvalidRecordError",
    "InvalidTopicError",
    "ManualClock",
    "OffsetOutOfRangeError",
    "PartitionUncleanableError",
    "Record",
    "RecordTooLargeError",
    "Store",
    "StoreConfig",
    "TopicConfig",
    "TopicExistsError",
    "UnknownTopicOrPartitionError",
    "WallClock",
    "__version__",
]
