"""The writer that makes usage records durable.

Each request becomes one `UsageRecord`. `UsageWriter.write` gives a future done once
the record is durable: the generation routes await it before the client gets the last
byte of the response, so a completed request is never billed from memory alone. Records that
arrive together are committed together (one transaction: a group commit); while other
metered requests run, a commit waits a little for them to join it
(app.tenancy.usage.commit_window), so that many concurrent requests share one commit.

No record can take the others down with it. When a group commit fails, its records are
committed one by one; one the database still refuses while it answers (a value it will
not store) is a dead letter: kept whole in `usage_dead_letter` (or, when even that
fails, in `usage-dead-letter.jsonl` beside the spool), counted in
`lilac_usage_dead_letter_total` and logged once; the records behind it are committed.

When the database is down, the records go to an append-only spool file (JSON lines,
fsynced) next to the database and the future of `write` is still done: the record is
durable on local disk. The writer retries the spool every second once the database is
back, as a group and, when that fails, row by row (a spooled dead letter is set aside as above, a
line that does not parse too); only rows still unwritten stay in the spool.
`request_id` is unique, so a record spooled twice is written once.

On a SQLite file, the commits run in a child process of the writer's own
(app.tenancy.usage.process): one frame of rows out and one reply back per group
commit, with the same durability (WAL, `synchronous=FULL`, the reply once the commit
has returned). Why a process and not a thread: a thread shares the GIL with the event
loop, and handing each commit to it and back cost the worker more CPU than the commit
itself (keys on, non-streamed, 0.77-0.83 of the requests per CPU second of keys off
through the server, against 0.87-0.90 with the process; perf/RESULTS.md, "Keys on: the
commit in a process of its own"). Where no child can be started, the thread does the work
(app.tenancy.usage.sqlite). How rows reach each kind of database is
app.tenancy.usage.inserts; each key's `last_used_at`, written after a batch's requests
have their answer, app.tenancy.usage.last_use.

Each record's cost (`cost_micros`) is set as it is committed, from the prices in force
when its request started (app.tenancy.prices.store).

Refused requests (nothing generated) are not rows: `refuse` counts them
(app.tenancy.usage.refusals) and the writer adds the counts to `usage_refusals` each
second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import usage_dead_letter
from app.tenancy.keys.store import KeyStore
from app.tenancy.prices.store import PriceStore
from app.tenancy.usage.commit_window import CommitWindow
from app.tenancy.usage.faults import fault, reason
from app.tenancy.usage.inserts import UsageInserts
from app.tenancy.usage.last_use import LastUse
from app.tenancy.usage.records import UsageRecord, parse_record, record_line
from app.tenancy.usage.refusals import RefusalCounts
from app.tenancy.usage.spool import UsageSpool
from engine.ticks import tick_delay

log = logging.getLogger("lilac.usage")

RETRY_S = 1.0


class UsageWriter:
    """Group-committing, spooling writer of usage records (one task per process)."""

    def __init__(
        self,
        database: AsyncEngine,
        spool: Path,
        keys: KeyStore | None = None,
        prices: PriceStore | None = None,
    ) -> None:
        self.database = database
        self.prices = prices  # what each record costs, set as it is committed
        self.spool = spool
        self._spool = UsageSpool(spool)
        self.dead_letter_file = self._spool.dead_letter_file
        self._last_use = LastUse(keys)  # each key's `last_used_at`
        # The records queued for the next commit, and the futures of those a caller
        # awaits (`submit`ted ones have none): two lists, each a plain pass at commit.
        self._pending: list[UsageRecord] = []
        self._waiting: list[asyncio.Future[None]] = []
        self._refusals = RefusalCounts()
        # Which metered requests run and when rows came: when a group commit starts.
        self.window = CommitWindow()
        # The writer task sleeps on `_wakeup` (a future, cheaper than an Event under
        # `wait_for`, which makes a task each time), with `_retry` a timer on it only
        # while the spool or the refusal counts wait; `_woken` notes a wake that came
        # while it was busy.
        self._wakeup: asyncio.Future[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._woken = False
        self._task: asyncio.Task[None] | None = None
        # The loop the writer task runs on (`asyncio.get_running_loop` makes a system
        # call, getpid, each time: once per metered request would show).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self.db_ok = True
        self.written = 0
        self.commits = 0  # group commits of new records (`written` / `commits`: rows each)
        self.spooled = 0
        self.dead_lettered = 0
        self._inserts = UsageInserts()  # the rows into `database`, per backend

    def start(self) -> asyncio.AbstractEventLoop:
        """Start the writer task (once); the loop it runs on."""
        loop = self._loop
        if self._task is None or loop is None:
            self._closing = False
            self._loop = loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._run())
        return loop

    def write(self, record: UsageRecord) -> asyncio.Future[None]:
        """Queue the record; the future is done when the record is committed (or
        spooled, or set aside, on disk). A plain function returning the future, not a
        coroutine: it runs once per metered request. Cancelling the future (its caller
        was cancelled) cancels only the wait: the record stays queued and is written
        with the others (the flush skips a future that is done)."""
        loop = self._loop
        if self._task is None or loop is None:  # started by the app's lifespan; else here
            loop = self.start()
        future = loop.create_future()
        self._pending.append(record)
        self._waiting.append(future)
        self.window.arrived()
        if not self._woken:  # else a wake is noted already: the writer will not sleep
            self._wake()
        return future

    def submit(self, record: UsageRecord) -> None:
        """Queue a record without waiting (a cancelled request: nobody waits for it)."""
        self._pending.append(record)
        self.window.arrived()
        self._wake()
        self.start()

    def refuse(self, key_id: str, reason: str, at: float) -> None:
        """Count a request refused before generating (written within a second)."""
        self._refusals.count(key_id, reason, at)
        self.start()
        if self._wakeup is not None and self._retry is None:  # asleep without a timer
            self._retry = _retry_timer(self._wakeup)

    async def close(self) -> None:
        """Write everything queued (SIGTERM, shutdown); then stop."""
        self._closing = True
        self._wake()
        self.window.release()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._flush()
        await self._inserts.close()

    def _wake(self) -> None:
        self._woken = True
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _sleep(self) -> None:
        """Until a record comes (or `close`). While the spool holds records or refusals
        are counted, at most until the next tick of `RETRY_S` (once a second, on the
        loop clock's grid of the periodic work: engine.ticks); with neither, no timer
        wakes the process."""
        if not self._woken:
            wakeup = self._wakeup = asyncio.get_running_loop().create_future()
            if self._refusals or self._spool.has_records():
                self._retry = _retry_timer(wakeup)
            try:
                await wakeup
            finally:
                if self._retry is not None:
                    self._retry.cancel()
                    self._retry = None
                self._wakeup = None
        self._woken = False

    async def _run(self) -> None:
        while not self._closing:
            await self._sleep()
            if self._pending and not self._closing:
                await self.window.hold()  # others running may join this commit
            try:
                await self._flush()
            except Exception:  # the local disk failed too: say so loudly, keep the writer
                log.exception("usage: cannot write usage records to the database or disk")

    async def _flush(self) -> None:
        if self._spool.has_records():
            await self._replay_spool()
        if self._refusals:
            await self._flush_refusals()
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        waiting, self._waiting = self._waiting, []
        self.window.taken()
        try:
            unwritten = await self._commit(batch)
            self.commits += 1
            if unwritten:
                self._spool.append(unwritten)
                self.spooled += len(unwritten)
        finally:
            self.window.committed()
            for future in waiting:
                if not future.done():
                    future.set_result(None)
        # After the requests have their answer: the keys' last use is bookkeeping, and
        # a batch of many tenants' rows must not wait for it.
        await self._last_use.record(_handled(batch, unwritten))

    async def _commit(self, records: list[UsageRecord]) -> list[UsageRecord]:
        """Commit `records`: together, else one by one (a row the database refuses is a
        dead letter). The records left unwritten because the database is down."""
        await self._price(records)
        try:
            await self._inserts.insert(self.database, records)
        except Exception as exc:
            if not await self._answers_despite(exc):
                self._mark(False, exc)
                return records
            return await self._row_by_row(records)
        self.written += len(records)
        self._mark(True)
        return []

    async def _price(self, records: list[UsageRecord]) -> None:
        """Each record's cost, from the prices in force when its request started; one
        spooled with its cost keeps it, one spooled before the prices could be read
        gets it when it is replayed."""
        prices = self.prices
        if prices is None:
            return
        await prices.ensure_loaded()
        for record in records:
            if record.cost_micros is None:
                record.cost_micros = prices.cost_of(record)

    async def _row_by_row(self, records: list[UsageRecord]) -> list[UsageRecord]:
        for position, record in enumerate(records):
            if not await self._write_alone(record):
                return records[position:]
        self._mark(True)
        return []

    async def _write_alone(self, record: UsageRecord) -> bool:
        """Written or set aside (True), or the database is down (False). A failure of
        unknown cause is tried once more before the record is set aside: a transient
        error (a lock, a timeout) must not make a billable row a dead letter."""
        for attempt in (1, 2):
            try:
                await self._inserts.insert(self.database, [record])
            except Exception as exc:
                if not await self._answers_despite(exc):
                    self._mark(False, exc)
                    return False
                if attempt == 2 or fault(exc) == "row":
                    await self._set_aside(record, exc)
                    return True
                continue
            self.written += 1
            return True
        return True  # not reached: the second attempt returns

    async def _answers_despite(self, exc: BaseException) -> bool:
        """Whether the database answers after `exc`: a failure of the rows, not of the
        database. Known causes are taken at their word; otherwise the database is
        asked (`SELECT 1`)."""
        whose = fault(exc)
        if whose is not None:
            return whose == "row"
        try:
            async with self.database.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception:
            return False
        return True

    async def _set_aside(self, record: UsageRecord, exc: BaseException) -> None:
        """A dead letter: the database answers but will not take this record."""
        self.dead_lettered += 1
        why = reason(exc)
        log.error(
            "usage: the database refused the record %.80r of key %s (%s); set aside in "
            "usage_dead_letter",
            record.request_id,
            record.key_id,
            why,
        )
        values = {
            "request_id": str(record.request_id),
            "record": record_line(record).rstrip("\n"),
            "error": why,
            "created_at": time.time(),
        }
        try:
            async with self.database.begin() as conn:
                await conn.execute(insert(usage_dead_letter).values(**values))
        except Exception as again:
            log.error("usage: dead letter kept in %s (%s)", self.dead_letter_file, again)
            self._spool.keep_dead_letter(values)

    async def _replay_spool(self) -> None:
        try:
            lines = self._spool.lines()
        except OSError as exc:
            self._mark(False, exc)
            return
        records: list[UsageRecord] = []
        for line in lines:
            record = parse_record(line)
            if record is not None:
                records.append(record)
            elif line.strip():  # a torn or foreign line: kept for a person, never dropped
                await self._set_aside_line(line)
        unwritten = await self._commit(records) if records else []
        await self._last_use.record(_handled(records, unwritten))
        # Only this task appends to the spool: what is left is exactly `unwritten`.
        if unwritten:
            if len(unwritten) < len(lines):  # else the file already holds just these
                self._spool.rewrite(unwritten)
            return
        self._spool.remove()
        if records:
            log.info("usage: wrote %d spooled records to the database", len(records))

    async def _set_aside_line(self, line: str) -> None:
        self.dead_lettered += 1
        log.error("usage: a spooled line does not parse; kept in %s", self.dead_letter_file)
        entry = {"record": line, "error": "unparsable spool line", "created_at": time.time()}
        self._spool.keep_dead_letter(entry)

    async def _flush_refusals(self) -> None:
        try:
            await self._refusals.flush(self.database)
        except Exception as exc:  # kept in memory for the next flush
            self._mark(False, exc)

    def _mark(self, ok: bool, exc: BaseException | None = None) -> None:
        if ok and not self.db_ok:
            log.warning("usage: the database is back")
        elif not ok and self.db_ok:
            log.error("usage: database write failed (%s); spooling to %s", exc, self.spool)
        self.db_ok = ok


def _handled(records: list[UsageRecord], unwritten: list[UsageRecord]) -> list[UsageRecord]:
    """The records a commit wrote or set aside: all but `unwritten`, which is always the
    last of them (the database went down from that one on)."""
    return records[: len(records) - len(unwritten)]


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _retry_timer(wakeup: asyncio.Future[None]) -> asyncio.TimerHandle:
    """A timer that ends the writer's sleep at the next tick of `RETRY_S`."""
    return asyncio.get_running_loop().call_later(tick_delay(RETRY_S), _resolve, wakeup)
