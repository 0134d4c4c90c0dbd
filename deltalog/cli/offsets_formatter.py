"""Kafka's ``OffsetsMessageFormatter`` for ``deltalog consume __consumer_offsets --formatter offsets``: each
committed offset as one JSON line in Kafka's shape (``org.apache.kafka.tools.consumer.ApiMessageFormatter``)::

    {"key":{"version":1,"data":{"group":"billing","topic":"orders","partition":0}},
     "value":{"version":3,"data":{"offset":42,"leaderEpoch":-1,"metadata":"","commitTimestamp":1700000000000}}}

(one line per record). A tombstone (a deleted offset) has ``"value":null``; records of another type (group metadata)
are skipped, as Kafka's formatter skips them; bytes that are no offset record print ``"unknown"``, as Kafka's do.
Kafka's formatter writes no line separator after a record; deltalog writes one, so the output is JSON lines.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from deltalog.coordinator.group.offsets_topic import decode_key, decode_value

#: The names ``--formatter`` takes for it: deltalog's short one and Kafka's class names (old and new).
NAMES = ("offsets", "org.apache.kafka.tools.consumer.OffsetsMessageFormatter",
         "kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter")
UNKNOWN = "unknown"


def _version(data: bytes) -> int:
    return struct.unpack_from(">h", data)[0] if len(data) >= 2 else -1


def format_offset_record(key: bytes | None, value: bytes | None) -> str | None:
    """The JSON line of one ``__consumer_offsets`` record; None for a record Kafka's formatter skips."""
    out: dict[str, Any] = {}
    if key is None:
        out["key"] = None
    else:
        try:
            k = decode_key(key)
        except (ValueError, struct.error):
            k, data = None, UNKNOWN
        else:
            if k is None and _version(key) == 2:  # a GroupMetadataKey: skipped, as Kafka's formatter does
                return None
            data = UNKNOWN if k is None else {"group": k.group, "topic": k.topic, "partition": k.partition}
        out["key"] = {"version": _version(key), "data": data}
    if value is None:
        out["value"] = None
    else:
        version = _version(value)
        try:
            v = decode_value(value)
        except (ValueError, struct.error):
            vdata: Any = UNKNOWN
        else:
            vdata = {"offset": v.offset}
            if version >= 3:
                vdata["leaderEpoch"] = v.leader_epoch
            vdata["metadata"] = v.metadata
            vdata["commitTimestamp"] = v.commit_timestamp_ms
            if version == 1:
                vdata["expireTimestamp"] = v.expire_timestamp_ms
        out["value"] = {"version": version, "data": vdata}
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


__all__ = ["NAMES", "format_offset_record"]
