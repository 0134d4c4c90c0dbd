"""One exception root, a few children that mean something to a caller.

Every error deltalog raises on purpose is a :class:`DeltalogError`; its message names what was wrong
and what is allowed. Nothing is half-written when one is raised: appends, topic creation and config
changes validate everything before the first Delta commit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

#: ANSI terminal escape sequences (colours, cursor moves): delta-rs formats the causes of its errors with them.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


class DeltalogError(Exception):
    """Root of every error deltalog raises on purpose.

    ``errno`` is the Kafka error code a Kafka client is answered with when ``deltalog serve`` meets the error, and
    ``retriable`` whether Kafka's client retries on it (``org.apache.kafka.common.protocol.Errors``; kafka-python's
    ``kafka.errors`` keeps both on the class the same way). Each class says its own; one that does not inherits its
    parent's, so the lookup walks the class hierarchy as Kafka's ``Errors.forException`` does, ending here at
    ``UNKNOWN_SERVER_ERROR``. A new error's Kafka code is decided in its class, nowhere else."""

    errno: int = -1  # UNKNOWN_SERVER_ERROR
    retriable: bool = False


def shown(value: object, limit: int = 100) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages: a message that echoes a megabyte of
    bad input (or a 5,000-digit number, whose repr Python refuses) is not a clear one."""
    try:
        text = repr(value)
    except ValueError:  # int too large to convert to a string
        return f"<an int of {value.bit_length()} bits>" if isinstance(value, int) else f"<a {type(value).__name__}>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def error_chain(error: BaseException | None) -> Iterator[BaseException]:
    """``error``, then what caused it (``__cause__``, else ``__context__``), and so on: each exception once.

    Python lets a chain loop back on itself (``raise e from e``, or an error re-raised while handling one it
    caused), and a walk that trusts it to end spins for ever; this one stops at the first exception it has
    already seen. The one way deltalog walks a chain (as Kafka's code looks through ``getCause()`` for the
    error that matters)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def plain(text: str) -> str:
    """``text`` without terminal colour codes, its lines joined: delta-rs renders an error's chain of causes as
    coloured lines (``Generic LocalFileSystem error\\n  \\x1b[31m↳\\x1b[0m No space left on device``), which a log
    file, a JSON report or a non-terminal shows as garbage. Every message deltalog passes on from delta-rs or
    object_store goes through here."""
    lines = [line.strip() for line in _ANSI.sub("", text).splitlines()]
    return ": ".join(line.lstrip("↳").strip() for line in lines if line.lstrip("↳").strip())


class InvalidConfigError(DeltalogError, ValueError):
    """A config key is unknown, or its value is of the wrong type or out of range."""

    errno = 40  # INVALID_CONFIG


class InvalidPartitionsError(DeltalogError, ValueError):
    """Kafka's ``InvalidPartitionsException``: a partition count a topic cannot take (CreatePartitions asks for no
    more than it has)."""

    errno = 37  # INVALID_PARTITIONS


class InvalidArgumentError(DeltalogError, ValueError):
    """An argument of the wrong type or out of range (a partition given as ``0.0``, a negative clock step)."""

    errno = 42  # INVALID_REQUEST


class InvalidTypeError(InvalidArgumentError, TypeError):
    """A call of the wrong shape or an argument of the wrong kind (``send()`` given a batch and a ``key`` both, a
    key column that is neither binary nor string): Kafka's ``IllegalArgumentException``, and a ``TypeError`` as
    Python (and kafka-python) raise for it, so ``except TypeError`` keeps catching it."""


class InvalidTopicError(DeltalogError, ValueError):
    """A topic name Kafka would reject (legal characters ``[a-zA-Z0-9._-]``, 1..249, not ``.``/``..``)."""

    errno = 17  # INVALID_TOPIC_EXCEPTION


class TopicExistsError(DeltalogError):
    """``create_topic`` on a name that is already taken."""

    errno = 36  # TOPIC_ALREADY_EXISTS


class UnknownTopicOrPartitionError(DeltalogError, LookupError):
    """The topic, or the partition of the topic, does not exist."""

    errno = 3  # UNKNOWN_TOPIC_OR_PARTITION
    retriable = True


class UnknownTopicIdError(UnknownTopicOrPartitionError):
    """Kafka's ``UnknownTopicIdException`` (error ``UNKNOWN_TOPIC_ID``, KIP-516): the topic id a request was made for
    is not the id of any topic now. A consumer that read a topic that was then deleted and created again under the
    same name holds positions in the old topic; committing them onto the new one would make the group skip its
    records, so the commit is refused. ``topic`` is the name, ``topic_id`` the id the request named and
    ``current_topic_id`` the id the name has now."""

    errno = 100  # UNKNOWN_TOPIC_ID

    def __init__(self, message: str, *, topic: str, topic_id: str, current_topic_id: str | None) -> None:
        super().__init__(message)
        self.topic = topic
        self.topic_id = topic_id
        self.current_topic_id = current_topic_id


class InvalidRecordError(DeltalogError, ValueError):
    """A record the log refuses, e.g. a keyless record on a compacted topic.

    ``index`` is the position of the record to blame in the batch given (its message then starts with
    ``record <index>``), so a caller that read the batch from somewhere can name the place instead, as
    ``deltalog produce`` names the input line; None when no single record is to blame.
    """

    errno = 87  # INVALID_RECORD

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class RecordTooLargeError(InvalidRecordError):
    """A record larger than the topic's ``max.message.bytes``."""

    errno = 10  # MESSAGE_TOO_LARGE


class InvalidTimestampError(InvalidRecordError):
    """A record whose timestamp lies outside the topic's ``message.timestamp.before.max.ms`` /
    ``message.timestamp.after.max.ms`` of the appending writer's clock (Kafka's ``InvalidTimestampException``)."""

    errno = 32  # INVALID_TIMESTAMP


class CommitConflictError(DeltalogError):
    """Another writer committed first and this operation cannot be retried safely.

    Raised, for example, when two cleaners race on one partition: the loser's files were never
    committed and are garbage for VACUUM.
    """


class InvalidProducerEpochError(DeltalogError):
    """A batch from a producer epoch older than the one the partition (or the transactional id) has seen: a newer
    producer with the same id took over (Kafka's ``InvalidProducerEpochException``). Do not retry."""

    errno = 47  # INVALID_PRODUCER_EPOCH


class ProducerFencedError(InvalidProducerEpochError):
    """A transactional producer whose epoch was bumped by a newer ``init_transactions()`` of the same
    ``transactional_id`` (Kafka's ``ProducerFencedException``): this producer must be closed."""

    errno = 90  # PRODUCER_FENCED


class InvalidPidMappingError(DeltalogError):
    """The producer's transactional id expired (``transactional.id.expiration.ms``) and no longer maps to its
    producer id (Kafka's ``InvalidPidMappingException``): call ``init_transactions()`` again, or close it."""

    errno = 49  # INVALID_PRODUCER_ID_MAPPING


class OutOfOrderSequenceError(DeltalogError):
    """A batch whose sequence number is neither the next one nor the last batch's (a retry) for its producer in
    that partition (Kafka's ``OutOfOrderSequenceException``): a batch between was lost or never sent."""

    errno = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


class UnknownProducerIdError(OutOfOrderSequenceError):
    """A partition has no state for the producer of a batch that does not start at sequence 0 (Kafka's
    ``UnknownProducerIdException``): the producer never wrote there, or its state expired after
    ``producer.id.expiration.ms``. :class:`~deltalog.producer.kafka_producer.KafkaProducer` handles it by starting
    the partition's sequence again at 0, as Kafka's producer does (KIP-360)."""

    errno = 59  # UNKNOWN_PRODUCER_ID

    def __init__(self, message: str, topic: str | None = None, partition: int | None = None) -> None:
        super().__init__(message)
        self.topic, self.partition = topic, partition


class OffsetOutOfRangeError(DeltalogError, IndexError):
    """A read below the log start offset (Kafka's OFFSET_OUT_OF_RANGE).

    ``log_start_offset`` and ``log_end_offset`` say what range is readable now.
    """

    errno = 1  # OFFSET_OUT_OF_RANGE

    def __init__(self, message: str, *, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class IllegalStateError(DeltalogError):
    """A call that the object's state does not allow (Kafka's ``IllegalStateException``): seeking a partition a
    consumer is not assigned, using a consumer after ``close()``, mixing ``subscribe`` and ``assign``."""


class GroupIdNotFoundError(DeltalogError, LookupError):
    """The consumer group has no committed offsets in the store (Kafka's GROUP_ID_NOT_FOUND: "The group id does
    not exist.")."""

    errno = 69  # GROUP_ID_NOT_FOUND


class InvalidGroupIdError(InvalidArgumentError):
    """A consumer group id Kafka refuses (empty, or not a string): Kafka's ``InvalidGroupIdException``."""

    errno = 24  # INVALID_GROUP_ID


class OffsetMetadataTooLargeError(InvalidArgumentError):
    """An offset commit whose metadata string is longer than ``offset.metadata.max.bytes`` (UTF-8 bytes)."""

    errno = 12  # OFFSET_METADATA_TOO_LARGE


class NoOffsetForPartitionError(DeltalogError):
    """A consumer with ``auto_offset_reset="none"`` found no committed offset (or an out-of-range one) for a
    partition it must read: it will not guess where to start."""


class CorruptLogError(DeltalogError):
    """A data file of a partition cannot be read, or the table is not a deltalog partition."""


class VersionNotAvailableError(DeltalogError, LookupError):
    """Time travel asked for a version (or a timestamp) a partition does not have: not yet, never, or no longer
    (its data files removed by VACUUM after ``file.delete.delay.ms``, alias Delta's
    ``delta.deletedFileRetentionDuration``, or its commits cleaned up after ``delta.logRetentionDuration``).
    Delta's ``VersionNotFoundException`` and ``DELTA_FILE_NOT_FOUND`` on a time-travel read."""


class ForeignCommitError(DeltalogError):
    """Another engine changed a partition's records through Delta (DELETE, UPDATE, MERGE, RESTORE, a plain append
    or overwrite, a schema or table-property change): deltalog neither reads nor writes the partition until the
    change is undone. ``commits`` are the :class:`~deltalog.log.foreign_commits.ForeignCommit` s found (version,
    operation, engine); ``restore_version`` the version a Delta RESTORE brings the table back to."""

    def __init__(self, message: str, *, commits: Sequence[Any] = (), restore_version: int | None = None) -> None:
        super().__init__(message)
        self.commits = tuple(commits)
        self.restore_version = restore_version


class CleaningFailedError(DeltalogError):
    """A cleaning pass failed before it committed (a data file Spark cannot read, a lost executor, ...).

    Nothing of that pass was committed and its own files were removed. The cleaner marks the partition
    uncleanable (Kafka's ``tryCleanFilthiestLog``) and goes on with the others; ``store.clean()`` raises this
    once it has cleaned every other partition: ``results`` holds the passes that did commit and
    ``failures`` each failed partition with its error.
    """

    def __init__(self, message: str, *, results: Sequence[Any] = (), failures: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.results = list(results)
        self.failures = list(failures)


class PartitionUncleanableError(DeltalogError):
    """The partition is marked uncleanable after a failed clean (Kafka's uncleanable set); it is not cleaned
    until ``deltalog cleaner reset-uncleanable`` clears the mark."""


class PartitionBusyError(DeltalogError):
    """Another cleaner, retention or VACUUM run holds the partition's lease (see :mod:`deltalog.log.lease`)."""


class CheckFailedError(DeltalogError):
    """A data-quality check found a broken guarantee (raised by ``clean()`` with
    ``deltalog.check.after.clean=true``, after the clean committed); ``result`` holds the details."""

    def __init__(self, message: str, result: Any, *, results: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.result = result
        self.results = list(results)


class DataLossError(DeltalogError):
    """Offsets a read wanted are gone (retention or DeleteRecords removed them) and ``failOnDataLoss`` is true
    (Spark's Kafka source fails the query the same way)."""


class QueryError(DeltalogError):
    """Spark refused or failed a query (``deltalog sql``); the message is Spark's own (error class, message,
    SQLSTATE, the place in the query), without the Java stack."""


class StorageError(DeltalogError):
    """The storage under a store cannot give what deltalog needs (conditional writes), or a store's own files
    are not as deltalog left them."""


class StorageFullError(StorageError):
    """The storage under a store has no space left (``ENOSPC``), or the user's quota is used up (``EDQUOT``),
    or an object store answered that it is full (HTTP 507 Insufficient Storage). Nothing was half-written: the
    write that failed left no temporary file and no commit refers to a partial file. Not a fault of the log
    (Kafka's ``LogDirFailureChannel`` takes a full log directory offline; the cleaner, unlike for a damaged log,
    does not mark the partition uncleanable): free space at ``location`` and the same call works again.

    ``location`` is where the write was going (a path or URI); ``reason`` what the operating system or the
    store said."""

    errno = 56  # KAFKA_STORAGE_ERROR: Kafka's answer for a log directory that failed
    retriable = True

    def __init__(self, message: str, *, location: str, reason: str = "") -> None:
        super().__init__(message)
        self.location = location
        self.reason = reason


class CommitOutcomeUnknownError(StorageError):
    """A write to the store failed in a way that leaves unknown whether it landed (its answer was lost: a timeout,
    a dropped connection, a 5xx after the store applied it), and the store could not be read back to tell, or the
    log does not show it yet while a request the store did not answer may still be applied: the write may land
    later. Nothing written for it was removed (VACUUM removes files no version references); read the partition to
    see whether the records are there, or retry an idempotent send (its sequence makes the retry safe). A plain
    append sent again can write the records twice."""


class CorruptStateError(StorageError):
    """A document deltalog keeps beside the Delta logs (the producer-id counter, a transactional id's state, a
    lease, a topic marker, an uncleanable mark, ...) is not valid JSON or holds a value of the wrong type or out
    of range. ``location`` names the file; the message says how to recover. The damage is confined to what the
    document belongs to (one transactional id, one partition): everything else goes on, and
    ``deltalog doctor`` reports it."""

    def __init__(self, message: str, *, location: str, fix: str = "") -> None:
        super().__init__(message)
        self.location = location
        #: How to recover (also the end of the message).
        self.fix = fix


class NoStoreError(DeltalogError):
    """A command that only reads was pointed at a location that holds no store."""


class DemoStoreError(DeltalogError):
    """The demo was pointed at a directory that is not a demo store; it refuses to wipe it."""


class UsageError(DeltalogError):
    """A command line that parses but makes no sense (the CLI exits with code 2)."""


class MissingExtraError(DeltalogError, ImportError):
    """Something needs a library that the base install leaves out (pyspark for Spark, great-expectations for
    checks); the message names the extra that brings it (``pip install 'deltalog[spark]'``)."""


class ProtocolError(DeltalogError):
    """A frame that is not a Kafka request deltalog can read (``deltalog serve``): the connection is closed, as
    Kafka's ``SocketServer`` closes it on an ``InvalidRequestException``, and nothing of the request is applied."""

    errno = 42  # INVALID_REQUEST


class SaslAuthenticationError(DeltalogError):
    """Kafka's ``SaslAuthenticationException``: a client's SASL exchange failed (a wrong password, an unknown user, a
    mechanism the listener does not enable). ``deltalog serve`` answers it with ``SASL_AUTHENTICATION_FAILED`` and
    closes the connection; the message is what the client is told, and never says which of user or password was
    wrong beyond what Kafka's own mechanisms say."""

    errno = 58  # SASL_AUTHENTICATION_FAILED


class UnacceptableCredentialError(InvalidArgumentError):
    """Kafka's ``UnacceptableCredentialException``: a SCRAM credential that cannot be stored (an iteration count
    outside 4096..16384, an empty user name or password, a mechanism other than SCRAM-SHA-256/512)."""

    errno = 93  # UNACCEPTABLE_CREDENTIAL


class AuthorizationError(DeltalogError):
    """Kafka's ``AuthorizationException``: the principal may not do this (``deltalog serve`` with
    ``authorizer.class.name``, :mod:`deltalog.acls`). Each subclass carries the code of what was refused."""

    errno = 31  # CLUSTER_AUTHORIZATION_FAILED


class TopicAuthorizationError(AuthorizationError):
    errno = 29  # TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationError(AuthorizationError):
    errno = 30  # GROUP_AUTHORIZATION_FAILED


class TransactionalIdAuthorizationError(AuthorizationError):
    errno = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class InvalidAclError(InvalidArgumentError):
    """An ACL binding or filter Kafka refuses (an UNKNOWN or ANY field in a binding to create, a principal not of the
    form ``Type:name``, a PREFIXED pattern on the cluster)."""

    errno = 42  # INVALID_REQUEST


class ResourceNotFoundError(DeltalogError, LookupError):
    """Kafka's ``ResourceNotFoundException``: e.g. deleting a SCRAM credential the user does not have."""

    errno = 91  # RESOURCE_NOT_FOUND
class DuplicateBrokerRegistrationError(DeltalogError):
    """A ``deltalog serve`` endpoint asked for a node id another live endpoint of the store holds (Kafka's
    ``DuplicateBrokerRegistrationException``: two brokers configured with one ``node.id``)."""

    errno = 101  # DUPLICATE_BROKER_REGISTRATION
class RecordBatchError(DeltalogError):
    """A record batch of a Produce request that ``deltalog serve`` refuses (the checks of Kafka's ``LogValidator``:
    CRC, magic, complete batches, codecs, counts): by default Kafka's ``CorruptRecordException``; the children
    below are the other answers ``LogValidator`` gives. Nothing of the request's record set for that partition is
    appended."""

    errno = 2  # CORRUPT_MESSAGE
    retriable = True


class InvalidRecordBatchError(RecordBatchError):
    """A batch that decodes but breaks a rule of the format (``InvalidRecordException``: no records, a count that
    does not match, a control batch from a producer)."""

    errno = 87  # INVALID_RECORD
    retriable = False


class UnsupportedCompressionTypeError(RecordBatchError):
    """A batch compressed with a codec the endpoint cannot decode (``UnsupportedCompressionTypeException``)."""

    errno = 76  # UNSUPPORTED_COMPRESSION_TYPE
    retriable = False


class UnsupportedForMessageFormatError(RecordBatchError):
    """A batch of a message format before v2 (``UnsupportedForMessageFormatException``)."""

    errno = 43  # UNSUPPORTED_FOR_MESSAGE_FORMAT
    retriable = False


class RecordBatchTooLargeError(RecordBatchError):
    """A batch larger than the topic's ``max.message.bytes`` or than the codec can hold (``RecordTooLargeException``,
    MESSAGE_TOO_LARGE)."""

    errno = 10  # MESSAGE_TOO_LARGE
    retriable = False


def kafka_errno(error: BaseException) -> int:
    """Kafka's error code for any exception (``Errors.forException``): a deltalog error's class says it; anything
    else is ``UNKNOWN_SERVER_ERROR``."""
    return error.errno if isinstance(error, DeltalogError) else DeltalogError.errno
