"""The usage writer's child process (`python -m app.tenancy.usage.child FD PATH
BUSY_TIMEOUT_MS`), and the frames it exchanges with app.tenancy.usage.process.

The parent sends one `Insert` frame per group commit; the child inserts the rows on its
own SQLite connection (app.db.sqlite: autocommit, WAL, `synchronous=FULL`)
and, once the commit has returned, sends one `Done`: no error, or the exception's class
name and message, which the parent raises again as the same class. Each frame is
msgpack (msgspec) prefixed with its length, as between the HTTP and engine processes
(engine.remote.frames).

The child ends when the socket does (the parent closed it, or died). It ignores SIGINT
and SIGTERM: the HTTP process decides when to stop, and drains its usage records
through this process first; a signal sent to the whole process group must not stop
the writer under it. It imports nothing heavier than sqlite3 and msgspec.
"""

from __future__ import annotations

import signal

# First: a Ctrl-C or a SIGTERM to the group while this process starts must not end it.
for _signal in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_signal, signal.SIG_IGN)

import socket  # noqa: E402
import sqlite3  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

import msgspec  # noqa: E402

from app.db.sqlite import connect  # noqa: E402
from app.tenancy.usage.statements import insert_rows  # noqa: E402
from engine.remote.framing import frame, recv_frame  # noqa: E402


class Insert(msgspec.Struct, array_like=True):
    """One group commit: the rows, each a record's values in `FIELDS` order."""

    rows: list[Any]


class Done(msgspec.Struct, array_like=True):
    """The commit returned (`error` None), or the class name and message of what it
    raised."""

    error: str | None = None
    message: str = ""


def serve(sock: socket.socket, path: str, busy_timeout_ms: int) -> None:
    """Commit each frame's rows and answer, until the socket ends. The connection is
    opened on the first frame (and again after it failed to open), as the thread
    version does."""
    decoder = msgspec.msgpack.Decoder(Insert)
    encoder = msgspec.msgpack.Encoder()
    ok = frame(encoder.encode(Done()))
    conn: sqlite3.Connection | None = None
    try:
        while (payload := recv_frame(sock)) is not None:
            try:
                rows = decoder.decode(payload).rows
                if conn is None:
                    conn = connect(path, busy_timeout_ms)
                insert_rows(conn, rows)
            except Exception as exc:
                reply = frame(encoder.encode(Done(type(exc).__name__, str(exc))))
            else:
                reply = ok
            sock.sendall(reply)
    except OSError:  # the parent went while this one answered
        return
    finally:
        if conn is not None:
            conn.close()


def main(argv: list[str]) -> int:
    fd, path, busy_timeout_ms = int(argv[0]), argv[1], int(argv[2])
    with socket.socket(fileno=fd) as sock:
        serve(sock, path, busy_timeout_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
