"""Kafka's size-prefixed frames read from a blocking socket: the client's side of the wire (``deltalog ping``, and the
tests that speak to the endpoint byte by byte). The endpoint itself reads its frames in
:mod:`deltalog.server.socket_server`, without blocking.

Kept apart from :mod:`deltalog.server.protocol` (kafka-python's message classes, slow to import) so a command that
only pings starts fast.
"""

from __future__ import annotations

import struct
from typing import Any

from deltalog.errors import ProtocolError


def read_exactly(sock: Any, n: int) -> bytes:
    """``n`` bytes from ``sock``, however the peer's writes were split (Kafka's ``NetworkReceive`` reads a size, then
    that many bytes, across as many reads as it takes). Raises :class:`~deltalog.errors.ProtocolError` when the peer
    closes first (a reset is the socket's own ``ConnectionError``)."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ProtocolError(f"the peer closed the connection after {len(data)} of the {n} bytes expected")
        data += chunk
    return bytes(data)


def read_frame(sock: Any, *, max_bytes: int = 100 * 1024 * 1024) -> bytes:
    """One frame's body: a 4-byte big-endian size, then that many bytes. A size outside ``0..max_bytes`` raises
    :class:`~deltalog.errors.ProtocolError` naming it (Kafka's ``InvalidReceiveException``) before anything is read
    for it."""
    (size,) = struct.unpack(">i", read_exactly(sock, 4))
    if not 0 <= size <= max_bytes:
        raise ProtocolError(f"a frame of {size} bytes: the size must be 0..{max_bytes}")
    return read_exactly(sock, size)
