"""deltalog: Kafka's log compaction (``cleanup.policy=compact``) on Delta Lake tables, cleaned by Spark.

Producers append keyed records to the partitions of a topic and get offsets back; each partition is one
Delta table. The log cleaner, a Spark job, keeps the latest record per key without ever changing an
offset or the order of records. See README.md for a tour.
"""

from typing import TYPE_CHECKING

from deltalog.clock import Clock, ManualClock, WallClock
from deltalog.config import CleanerConfig, StoreConfig, TopicConfig
from deltalog.errors import (
    CheckFailedError,
    CleaningFailedError,
    CommitConflictError,
    CorruptLogError,
    CorruptStateError,
    DeltalogError,
    ForeignCommitError,
    GroupIdNotFoundError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPidMappingError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTopicError,
    NoOffsetForPartitionError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PartitionBusyError,
    PartitionUncleanableError,
    ProducerFencedError,
    RecordTooLargeError,
    StorageError,
    TopicExistsError,
    UnknownProducerIdError,
    UnknownTopicOrPartitionError,
)
from deltalog.log.record import Record
from deltalog.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from deltalog.log.producer import ProduceResult, RecordMetadata
    from deltalog.store import Store

from deltalog.version import __version__  # noqa: E402 - after the public names, as before


def __getattr__(name: str) -> object:
    """``deltalog.Store`` on first use: the cleaner's Spark tasks import ``deltalog.cleaner.recopy`` and
    ``deltalog.cleaner.offset_map`` in every Python worker, and importing the store (delta-rs, Spark glue) there
    cost ~0.5 s a worker for nothing."""
    if name == "Store":
        from deltalog.store import Store  # lazy, for the workers' start-up time (above)

        return Store
    if name in ("ProduceResult", "RecordMetadata"):
        from deltalog.log import producer  # lazy, as Store (above)

        return getattr(producer, name)
    raise AttributeError(f"module 'deltalog' has no attribute {name!r}")

__all__ = [
    "CheckFailedError",
    "CleanerConfig",
    "CleaningFailedError",
    "Clock",
    "CommitConflictError",
    "CorruptStateError",
    "ConsumerRecord",
    "CorruptLogError",
    "DeltalogError",
    "ForeignCommitError",
    "GroupIdNotFoundError",
    "IllegalStateError",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTopicError",
    "ManualClock",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetMetadataTooLargeError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "UnknownProducerIdError",
    "PartitionBusyError",
    "PartitionUncleanableError",
    "ProduceResult",
    "InvalidPidMappingError",
    "ProducerFencedError",
    "Record",
    "RecordMetadata",
    "RecordTooLargeError",
    "Store",
    "StorageError",
    "StoreConfig",
    "TopicConfig",
    "TopicExistsError",
    "TopicPartition",
    "UnknownTopicOrPartitionError",
    "WallClock",
    "__version__",
]
