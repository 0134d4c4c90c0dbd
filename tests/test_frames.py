"""Kafka's size-prefixed frames read from a blocking socket (deltalog/server/frames.py): the client's side that
``deltalog ping`` and the endpoint tests share."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from deltalog.errors import ProtocolError
from deltalog.server.frames import read_exactly, read_frame


def test_a_frame_split_across_many_writes_is_read_whole_and_the_next_one_after_it():
    a, b = socket.socketpair()
    with a, b:
        body = bytes(range(256)) * 40
        wire = struct.pack(">i", len(body)) + body + struct.pack(">i", 3) + b"end"

        def trickle() -> None:
            for i in range(0, len(wire), 7):  # the size itself arrives in pieces too
                a.sendall(wire[i:i + 7])

        writer = threading.Thread(target=trickle)
        writer.start()
        assert read_frame(b) == body
        assert read_frame(b) == b"end"
        writer.join()


def test_a_peer_that_closes_early_and_a_size_out_of_range_are_named():
    a, b = socket.socketpair()
    with b:
        a.sendall(struct.pack(">i", 10) + b"four")
        a.close()
        with pytest.raises(ProtocolError, match="after 4 of the 10 bytes"):
            read_frame(b)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">i", -1))
        with pytest.raises(ProtocolError, match="-1 bytes: the size must be 0..100"):
            read_frame(b, max_bytes=100)
        a.sendall(b"xy")
        assert read_exactly(b, 2) == b"xy"
