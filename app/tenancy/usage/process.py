"""Usage rows into a SQLite file through a child process of the writer's own
(app.tenancy.usage.child): one frame out and one back per group commit, over a socket
pair, with no thread in the HTTP process.

Why a process: with the commit on a thread of the HTTP process
(app.tenancy.usage.sqlite), the SQLite thread and the event loop pass the GIL back and
forth around every commit (each time the thread comes back from SQLite it waits for
the GIL, up to the interpreter's switch interval while the loop is busy), and the two
threads' sleeping and waking cost the worker more than the commit's own work: keys
on, non-streamed, the worker served about 0.64-0.81 of the requests per CPU second it
served keys off (perf/RESULTS.md, "Keys on through the server, counted"). A process
shares no GIL: the event loop writes one frame, reads one reply when the commit is on
disk, and never waits for SQLite's thread; the commit's CPU (SQLite, the fsync) is the
child's, counted beside the worker's by `python -m perf frontend-ceiling`. Measured so
(perf/RESULTS.md, "Keys on: the commit in a process of its own"): keys on,
non-streamed, the worker went from 0.77-0.83 of keys off with the thread to 0.87-0.90,
and 0.82-0.84 with the child's CPU counted beside it (about the same CPU a request in
all: the gain is the worker's own time, which bounds one worker).

Durability is the thread version's: the child opens the same file with the same
pragmas (WAL, `synchronous=FULL`) in autocommit mode, and replies only once the commit
has returned. A failure comes back as the same exception class (sqlite3's, or a
builtin one such as OverflowError) with its message, so the usage writer tells a
refused row from a database that is down exactly as before. If the child dies, the
commit in flight raises sqlite3.OperationalError (the writer spools its rows, as when
the database is down) and the next insert starts a fresh child. Where no child can be
started (an OSError from the spawn, or a child that ends before its first answer), the
thread version does the work instead.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from app.db.sqlite import BUSY_TIMEOUT_MS
from app.tenancy.usage.child import Done, Insert
from app.tenancy.usage.records import UsageRow
from engine.remote.framing import FrameReader, frame

if TYPE_CHECKING:
    from app.tenancy.usage.sqlite import SqliteInserts

log = logging.getLogger("lilac.usage")

CHILD_MODULE = "app.tenancy.usage.child"
# How long `close` waits for the child to end after its socket closed, before a kill.
CLOSE_WAIT_S = 5.0
_POLL_S = 0.005

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Done)


class ProcessInserts:
    """Inserts usage rows (each a record's values in `FIELDS` order) and commits them,
    in a child process started on first use; one insert at a time."""

    def __init__(self, path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._child: _Child | None = None
        self._lock = asyncio.Lock()
        self._fallback: SqliteInserts | None = None  # if no child

    @property
    def pid(self) -> int | None:
        """The child's process id, while one runs."""
        return None if self._child is None else self._child.process.pid

    async def insert(self, rows: list[UsageRow]) -> None:
        if self._fallback is not None:
            await self._fallback.insert(rows)
            return
        payload = frame(_encoder.encode(Insert(rows)))  # TypeError etc. as the driver's
        async with self._lock:
            loop = asyncio.get_running_loop()
            child = self._child
            if child is not None and child.loop is not loop:  # a tool's second asyncio.run
                self._child = None
                child.discard()
                child = None
            if child is None:
                try:
                    child = self._child = await _Child.start(self.path, self._busy_timeout_ms)
                except OSError as exc:
                    await self._fall_back(str(exc)).insert(rows)
                    return
            try:
                reply = await child.exchange(payload)
            except OSError as exc:
                self._child = None
                child.discard()
                code = child.process.poll()
                status = "" if code is None else f", status {code}"
                if not child.answered:
                    # It never answered: it cannot start here (its interpreter or its
                    # imports fail). The rows are the same rows: `request_id` is unique.
                    why = f"it ended before its first answer{status}"
                    await self._fall_back(why).insert(rows)
                    return
                raise sqlite3.OperationalError(
                    f"the usage writer's process ended ({type(exc).__name__}{status})"
                ) from exc
            except BaseException:
                # Cancelled between the frame and its reply: that reply would be read
                # as the next insert's. The child finishes this commit and ends.
                self._child = None
                child.discard()
                raise
        if reply.error is not None:
            raise _error(reply.error, reply.message)

    def _fall_back(self, why: str) -> SqliteInserts:
        from app.tenancy.usage.sqlite import SqliteInserts

        log.warning("usage: cannot start the usage writer's process (%s); writing on a thread", why)
        self._fallback = SqliteInserts(self.path, self._busy_timeout_ms)
        return self._fallback

    async def close(self) -> None:
        """End the child (its socket closes; it exits) and wait until it has."""
        async with self._lock:
            child, self._child = self._child, None
            if child is not None:
                await child.stop()
            fallback, self._fallback = self._fallback, None
            if fallback is not None:
                await fallback.close()


class _Replies(asyncio.Protocol):
    """The parent's end of the socket: each reply frame resolves the insert waiting for
    it. A protocol, not asyncio's streams: one write and one callback per commit, with
    no reader or writer coroutines around them (a commit every few milliseconds under
    load, each on the event loop's thread)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: asyncio.Future[Done] | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self._frames = FrameReader(self._reply)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a socket's: a Transport

    def data_received(self, data: bytes) -> None:
        self._frames.feed(data)

    def _reply(self, payload: memoryview) -> None:
        waiting, self.waiting = self.waiting, None
        if waiting is not None and not waiting.done():
            try:
                waiting.set_result(_decoder.decode(payload))
            except msgspec.DecodeError as exc:
                waiting.set_exception(OSError(f"an unreadable reply ({exc})"))

    def connection_lost(self, exc: Exception | None) -> None:
        waiting, self.waiting = self.waiting, None
        if waiting is not None and not waiting.done():
            waiting.set_exception(exc or ConnectionResetError("the socket closed"))
        if not self.closed.done():
            self.closed.set_result(None)


class _Child:
    """One child process and the parent's end of its socket."""

    def __init__(
        self, process: subprocess.Popen[bytes], sock: socket.socket, replies: _Replies
    ) -> None:
        self.process = process
        self._sock = sock
        self.loop = asyncio.get_running_loop()
        self.answered = False  # whether a reply came: the child did start
        self._replies = replies

    @classmethod
    async def start(cls, path: Path, busy_timeout_ms: int) -> _Child:
        parent_sock, child_sock = socket.socketpair()
        try:
            fd = child_sock.fileno()
            process = subprocess.Popen(
                [sys.executable, "-m", CHILD_MODULE, str(fd), str(path), str(busy_timeout_ms)],
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                env=_child_env(),
            )
        except BaseException:
            parent_sock.close()
            raise
        finally:
            child_sock.close()
        try:
            _, replies = await asyncio.get_running_loop().create_connection(
                _Replies, sock=parent_sock
            )
        except BaseException:
            parent_sock.close()
            process.kill()
            _reap(process)
            raise
        return cls(process, parent_sock, replies)

    async def exchange(self, payload: bytes) -> Done:
        """Send one frame; the reply, once the child has committed (OSError when the
        socket closed first)."""
        replies = self._replies
        transport = replies.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the socket closed")
        reply = replies.waiting = self.loop.create_future()
        transport.write(payload)
        done = await reply
        self.answered = True
        return done

    def discard(self) -> None:
        """Close the socket without waiting; the child is reaped once it has ended."""
        self._close()
        _reap(self.process)

    def _close(self) -> bool:
        """Close the socket: through its transport on its own loop (True), else the
        socket itself (its loop is another, or closed: the transport cannot)."""
        transport = self._replies.transport
        with contextlib.suppress(RuntimeError):
            if (
                transport is not None
                and asyncio.get_running_loop() is self.loop
                and not self.loop.is_closed()
            ):
                transport.close()
                return True
        self._sock.close()
        return False

    async def stop(self) -> None:
        if self._close():
            await self._replies.closed
        waited = 0.0
        while self.process.poll() is None:
            if waited >= CLOSE_WAIT_S:
                log.warning("usage: the usage writer's process did not end; killing it")
                self.process.kill()
                waited = -CLOSE_WAIT_S  # and wait for that as long again
            await asyncio.sleep(_POLL_S)
            waited += _POLL_S


def _child_env() -> dict[str, str]:
    """The parent's environment, with the folder this package was imported from first on
    the child's path: the child runs this same code, however the parent found it."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not path else root + os.pathsep + path}


def _reap(process: subprocess.Popen[bytes], waited: float = 0.0) -> None:
    """Collect the child's exit status without blocking the event loop: polled until it
    has ended (killed after `CLOSE_WAIT_S`)."""
    if process.poll() is not None:
        return
    if waited >= CLOSE_WAIT_S:
        process.kill()
        waited = -CLOSE_WAIT_S
    with contextlib.suppress(RuntimeError):  # no running loop: Popen reaps it later
        asyncio.get_running_loop().call_later(_POLL_S * 10, _reap, process, waited + _POLL_S * 10)


def _error(name: str, message: str) -> Exception:
    """The exception the child's commit raised, as the same class: sqlite3's errors and
    the builtin ones the driver raises for a value (OverflowError, TypeError...)."""
    kind = getattr(sqlite3, name, None)
    if not (isinstance(kind, type) and issubclass(kind, sqlite3.Error)):
        kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        with contextlib.suppress(Exception):
            return kind(message)
    return sqlite3.DatabaseError(f"{name}: {message}")
