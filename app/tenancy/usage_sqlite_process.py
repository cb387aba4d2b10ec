"""The usage writer's SQLite commits in a process of their own.

Committed on a thread of the server's process, each commit took the interpreter's lock
from the event loop several times (to pick up the batch, around SQLite's prepare and
step, to hand the result back), and every time the event loop was busy the thread
waited out the switch interval and then forced it off: about seventeen context
switches a commit, and a quarter more of the event loop's CPU a request for short
non-streamed requests. Here the rows cross a pipe instead: the event loop writes one
frame a commit and reads one reply, through its ordinary I/O, and never shares its
interpreter lock with the commit.

The child holds one SQLite connection (the same file, WAL and `synchronous=FULL` as
every other connection, app.tenancy.db) and answers each frame (a pickled list of row
tuples) once its rows are committed, with a pickled `None`, or with the exception
SQLite raised (a row it refuses stays `sqlite3.IntegrityError`, so the writer's dead
letters and spool see what they saw on the thread). A child that ends mid-commit makes
that commit fail as the database being down (`sqlite3.OperationalError`): its rows go
to the spool, and `request_id` being unique makes a row that was committed after all
count once. The next commit starts a new child.

The child ignores SIGINT and SIGTERM (a signal to the server's process group must not
end it before the server's last commits) and exits when its input closes: when the
writer closes, or the server's process ends however it ends.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import sqlite3
import struct
import sys
from pathlib import Path
from typing import Any, BinaryIO

from app.tenancy.usage_sqlite_rows import THREAD_NAME, SqliteRows, name_native_thread

HEADER = struct.Struct(">I")  # the length of the pickle that follows
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds `app`


class SqliteProcess:
    """Inserts usage rows and commits in a child process (started on first use); the
    same interface as the thread it replaced: `insert(rows)`, `close()`."""

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._child: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()  # one frame in flight: replies come in order

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    async def start(self) -> None:
        async with self._lock:
            await self._started()

    async def insert(self, rows: list[tuple[Any, ...]]) -> None:
        """Returns once the rows are committed; raises what SQLite raised. Shielded:
        a cancelled caller leaves the frame to finish, so the pipe stays in step."""
        frame = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
        error = await asyncio.shield(self._round_trip(frame))
        if error is not None:
            raise error

    async def _round_trip(self, frame: bytes) -> BaseException | None:
        async with self._lock:
            child = await self._started()
            assert child.stdin is not None and child.stdout is not None
            try:
                child.stdin.write(HEADER.pack(len(frame)) + frame)
                await child.stdin.drain()
                size = HEADER.unpack(await child.stdout.readexactly(HEADER.size))[0]
                reply = pickle.loads(await child.stdout.readexactly(size))
            except (OSError, EOFError, asyncio.IncompleteReadError, pickle.UnpicklingError):
                await self._discard()
                return sqlite3.OperationalError("the usage writer's SQLite process ended")
            return reply if isinstance(reply, BaseException) else None

    async def _started(self) -> asyncio.subprocess.Process:
        if self._child is None or self._child.returncode is not None:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                [str(PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])]
            )
            self._child = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", __name__, str(self.path), str(self._busy_timeout_ms)),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=env,
            )
        return self._child

    async def _discard(self) -> None:
        child, self._child = self._child, None
        if child is not None and child.returncode is None:
            child.kill()
            await child.wait()

    async def close(self) -> None:
        """Close the child's input (it commits nothing more and exits) and wait for it."""
        async with self._lock:
            child, self._child = self._child, None
            if child is None:
                return
            if child.stdin is not None:
                child.stdin.close()
            try:
                await asyncio.wait_for(child.wait(), 10)
            except TimeoutError:
                child.kill()
                await child.wait()


def serve(path: Path, busy_timeout_ms: int, source: BinaryIO, sink: BinaryIO) -> None:
    """The child's loop: a frame in, its rows committed, a reply out; until EOF."""
    rows = SqliteRows(path, busy_timeout_ms)
    try:
        while header := source.read(HEADER.size):
            if len(header) < HEADER.size:
                return
            frame = source.read(HEADER.unpack(header)[0])
            try:
                rows.insert(pickle.loads(frame))
                reply: BaseException | None = None
            except Exception as exc:  # returned to the writer, which decides
                reply = exc
            try:
                data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # an exception that does not pickle: its class and text
                data = pickle.dumps(sqlite3.OperationalError(f"{type(reply).__name__}: {reply}"))
            sink.write(HEADER.pack(len(data)) + data)
            sink.flush()
    finally:
        rows.close()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    name_native_thread(THREAD_NAME)
    serve(Path(sys.argv[1]), int(sys.argv[2]), sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
