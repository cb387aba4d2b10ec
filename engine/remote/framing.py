"""Length-prefixed frames over a local socket: each frame is its payload's length
(4 bytes, little-endian) and the payload. The engine's own process (engine.remote) and
the usage writer's (app.tenancy.usage.child) both speak it; nothing here imports more
than the standard library, so a small child starts quickly.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

HEADER = struct.Struct("<I")  # each frame's length, before it


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


class FrameReader:
    """Splits a byte stream into frames: `feed` calls `on_frame` once per whole frame."""

    __slots__ = ("_buffer", "_on_frame")

    def __init__(self, on_frame: Callable[[memoryview], None]) -> None:
        self._buffer = bytearray()
        self._on_frame = on_frame

    def feed(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        end = len(buffer)
        size = HEADER.size
        while end - start >= size:
            (length,) = HEADER.unpack_from(buffer, start)
            if end - start - size < length:
                break
            begin = start + size
            with memoryview(buffer) as view:
                self._on_frame(view[begin : begin + length])
            start = begin + length
        if start:
            del buffer[:start]


def recv_frame(sock: socket.socket) -> bytes | None:
    """One frame from a blocking socket; None when it closed."""
    header = _recv_exactly(sock, HEADER.size)
    if header is None:
        return None
    return _recv_exactly(sock, HEADER.unpack(header)[0])


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)
