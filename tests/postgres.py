"""A throwaway PostgreSQL server for tests: Debian's postgresql package (initdb and
pg_ctl), a cluster in a temporary folder, listening on a unix socket only.

As root it runs the server as the `postgres` system user (PostgreSQL refuses root).
The folder is under /dev/shm (tmpfs: initdb is faster) with a short name: a socket
path may not exceed 107 bytes.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_databases = itertools.count()


def find_bindir() -> str | None:
    env = os.environ.get("LILAC_PG_BINDIR")
    if env:
        return env
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    return found[-1] if found else None


@dataclass
class TempPostgres:
    base: str
    bindir: str
    user: str | None

    @property
    def datadir(self) -> str:
        return os.path.join(self.base, "data")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={self.base}"

    def run(self, *args: str) -> None:
        result = subprocess.run(
            args, user=self.user, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        if result.returncode:
            log = os.path.join(self.base, "log")
            tail = Path(log).read_text()[-2000:] if os.path.exists(log) else ""
            raise RuntimeError(f"{args[0]} failed ({result.returncode}): {result.stderr}\n{tail}")

    def halt(self) -> None:
        """Stop the server (an outage): every session is cut, committed data is kept
        (a clean stop: this cluster runs with synchronous_commit off); `resume` starts it
        again on the same data."""
        self.run(f"{self.bindir}/pg_ctl", "-D", self.datadir, "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        self.run(
            f"{self.bindir}/pg_ctl", "-D", self.datadir, "-w", "-t", "60", "-o",
            _options(self.base), "-l", os.path.join(self.base, "log"), "start",
        )  # fmt: skip

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The server stopped for the block, started again however the block ends: the
        session's one server stays up for the tests after it."""
        self.halt()
        try:
            yield
        finally:
            self.resume()

    async def new_database(self, prefix: str = "t") -> str:
        """The URL of a database of its own on this server (a name never used before in
        this process), so tests sharing the server share no rows."""
        from sqlalchemy.ext.asyncio import create_async_engine

        from app.db.engine import async_url

        name = f"{prefix}{next(_databases)}"
        admin = create_async_engine(async_url(self.url()), isolation_level="AUTOCOMMIT")
        try:
            async with admin.connect() as conn:
                await conn.exec_driver_sql(f"CREATE DATABASE {name}")
        finally:
            await admin.dispose()
        return self.url(name)

    def stop(self) -> None:
        if not os.path.isdir(self.base):
            return
        try:
            if os.path.exists(os.path.join(self.datadir, "postmaster.pid")):
                self.run(f"{self.bindir}/pg_ctl", "-D", self.datadir, "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def start_postgres() -> TempPostgres:
    bindir = find_bindir()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server: apt-get install postgresql-15")
    parent = "/dev/shm" if os.access("/dev/shm", os.W_OK) else "/tmp"
    base = tempfile.mkdtemp(prefix="lilac-pg-", dir=parent)
    user = None
    if os.geteuid() == 0:
        user = "postgres"
        entry = pwd.getpwnam(user)
        os.chown(base, entry.pw_uid, entry.pw_gid)
    pg = TempPostgres(base, bindir, user)
    try:
        pg.run(
            f"{bindir}/initdb", "-D", pg.datadir, "-U", "postgres", "-A", "trust",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        pg.resume()
    except BaseException:
        pg.stop()
        raise
    return pg


def _options(base: str) -> str:
    return (
        f"-c listen_addresses='' -k {base} -c fsync=off -c synchronous_commit=off "
        "-c full_page_writes=off -c max_connections=100"
    )
