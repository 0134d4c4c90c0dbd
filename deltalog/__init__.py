"""deltalog: Kafka's log compaction (``cleanup.policy=compact``) on Delta Lake tables, cleaned by Spark.

Producers append keyed records to the partitions of a topic and get offsets back; each partition is one
Delta table. The log cleaner, a Spark job, keeps the latest record per key without ever changing an
offset or the order of records. See README.md for a tour.
"""

from typing import TYPE_CHECKING

from deltalog.clock import Clock, ManualClock, WallClock
from deltalog.config import StoreConfig, TopicConfig
from deltalog.errors import (
    CheckFailedError,
    CleaningFailedError,
    CommitConflictError,
    CorruptLogError,
    CorruptStateError,
    DataLossError,
    DeltalogError,
    ForeignCommitError,
    GroupIdNotFoundError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPidMappingError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTopicError,
    InvalidTypeError,
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
from deltalog.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from deltalog.log.record import Record
    from deltalog.producer.router import ProduceResult, RecordMetadata
    from deltalog.store import Store

from deltalog.version import __version__  # noqa: E402 - after the public names, as before


def __getattr__(name: str) -> object:
    """``deltalog.Store`` on first use: the cleaner's Spark tasks import ``deltalog.cleaner.recopy`` and
    ``deltalog.cleaner.offset_map`` in every Python worker, and importing the store (delta-rs, Spark glue) there
    would cost every worker's start-up for nothing."""
    if name == "Store":
        from deltalog.store import Store  # lazy, for the workers' start-up time (above)

        return Store
    if name == "Record":
        from deltalog.log.record import Record  # lazy, as Store (above): pyarrow, which `deltalog --help` never needs

        return Record
    if name == "register_views":
        from deltalog.sql.ddl import register_views  # lazy, as Store (above)

        return register_views
    if name == "register_format":
        from deltalog.sql.kafka import register  # lazy, as Store (above): pyspark

        return register
    if name in ("ProduceResult", "RecordMetadata"):
        from deltalog.producer import router  # lazy, as Store (above)

        return getattr(router, name)
    raise AttributeError(f"module 'deltalog' has no attribute {name!r}")



def __dir__() -> list[str]:
    """The public names, those :func:`__getattr__` imports on first use (``Store``, ``Record``, ...) included, so
    ``dir(deltalog)`` and a notebook's completion offer them (PEP 562)."""
    return sorted(set(globals()) | set(__all__))

__all__ = [
    "CheckFailedError",
    "CleaningFailedError",
    "Clock",
    "CommitConflictError",
    "CorruptStateError",
    "ConsumerRecord",
    "CorruptLogError",
    "DataLossError",
    "DeltalogError",
    "ForeignCommitError",
    "GroupIdNotFoundError",
    "IllegalStateError",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTopicError",
    "InvalidTypeError",
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
    "InvalidTimestampError",
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
    "register_format",
    "register_views",
]
