"""The prices table and the book of it each process keeps in memory.

`PriceStore.set_price` writes a price from a time on (now by default); `price_at` and
`current` answer from the book, which every process reads again every `RELOAD_S`, so
replicas sharing a database charge the same within a few seconds of a change (set a
change a little ahead, `effective_from` in the future, and every replica has it before
it applies). A usage row's cost is taken from the book when the row is written, at the
time its request started; batch lines and background responses, billed in their own
transaction, read the price in force there (`price_in`)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections.abc import Iterable

from sqlalchemy import Row, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.schema import MODEL_CHARS, prices
from app.tenancy.prices.money import DEFAULT_BATCH_DISCOUNT, Price, cost_micros
from app.tenancy.usage.records import UsageRecord

log = logging.getLogger("lilac.prices")

RELOAD_S = 5.0


def _price(row: Row[tuple[str, float, int, int, int, int]]) -> Price:
    model, effective_from, input_micros, cached, output, discount = row
    return Price(model, input_micros, cached, output, discount, effective_from)


_COLUMNS = (
    prices.c.model,
    prices.c.effective_from,
    prices.c.input_micros,
    prices.c.cached_input_micros,
    prices.c.output_micros,
    prices.c.batch_discount,
)


class PriceBook:
    """Every price row, per model in order of `effective_from`: what `price_at` reads."""

    def __init__(self, rows: Iterable[Price] = ()) -> None:
        self._starts: dict[str, list[float]] = {}
        self._prices: dict[str, list[Price]] = {}
        for price in sorted(rows, key=lambda p: (p.model, p.effective_from)):
            self._starts.setdefault(price.model, []).append(price.effective_from)
            self._prices.setdefault(price.model, []).append(price)

    def price_at(self, model: str, at: float) -> Price | None:
        """The model's price in force at `at` (None: it had none yet)."""
        starts = self._starts.get(model)
        if not starts:
            return None
        index = bisect.bisect_right(starts, at) - 1
        return self._prices[model][index] if index >= 0 else None

    def current(self, now: float) -> dict[str, Price]:
        """Each model's price in force at `now` (models whose price starts later are left out)."""
        found = {model: self.price_at(model, now) for model in self._prices}
        return {model: price for model, price in found.items() if price is not None}

    def all(self) -> list[Price]:
        return [price for rows in self._prices.values() for price in rows]


def check_model(model: str) -> str:
    if not 0 < len(model) <= MODEL_CHARS:
        raise ValueError(f"a model name is 1 to {MODEL_CHARS} characters")
    return model


class PriceStore:
    """The prices on `engine`, with the book of them this process reads from."""

    def __init__(self, engine: AsyncEngine, reload_s: float = RELOAD_S) -> None:
        self.engine = engine
        self.reload_s = reload_s
        self.book = PriceBook()
        self.loaded = False  # the book was read at least once: costs can be told
        self._task: asyncio.Task[None] | None = None
        self._tried_at = -float("inf")  # when `ensure_loaded` last read the book

    async def set_price(
        self,
        model: str,
        input_micros: int,
        cached_input_micros: int,
        output_micros: int,
        batch_discount: int = DEFAULT_BATCH_DISCOUNT,
        effective_from: float | None = None,
    ) -> Price:
        """The model's price from `effective_from` (now by default) until its next
        change; one set again for the same time replaces it."""
        at = time.time() if effective_from is None else effective_from
        price = Price(
            check_model(model), input_micros, cached_input_micros, output_micros, batch_discount, at
        )
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(prices).where(prices.c.model == model, prices.c.effective_from == at)
            )
            await conn.execute(insert(prices).values(**_values(price)))
        await self.reload()
        return price

    async def seed(self, seeds: Iterable[Price]) -> list[Price]:
        """Write each seed whose model has no price yet (a price set since is kept);
        the seeds written."""
        written = []
        async with self.engine.begin() as conn:
            for price in seeds:
                found = await conn.execute(
                    select(prices.c.model).where(prices.c.model == price.model).limit(1)
                )
                if found.first() is None:
                    await conn.execute(insert(prices).values(**_values(price)))
                    written.append(price)
        await self.reload()
        return written

    async def reload(self) -> PriceBook:
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(*_COLUMNS))).all()
        self.book = PriceBook(_price(row) for row in rows)
        self.loaded = True
        return self.book

    async def ensure_loaded(self) -> None:
        """Read the book if it never was (the server's start reads it; a writer used
        without one reads it at its first commit), at most once per `reload_s`."""
        now = time.monotonic()
        if self.loaded or now - self._tried_at < self.reload_s:
            return
        self._tried_at = now
        await self._reload_quietly()

    def price_at(self, model: str, at: float) -> Price | None:
        return self.book.price_at(model, at)

    def current(self) -> dict[str, Price]:
        return self.book.current(time.time())

    def cost_of(self, record: UsageRecord) -> int | None:
        """The record's cost at the price in force when its request started; None
        while the prices have never been read (the row's cost is then unknown)."""
        if not self.loaded:
            return None
        return record_cost(self.book.price_at(record.model, record.created_at), record)

    async def start(self, seeds: Iterable[Price] = ()) -> None:
        """Write the `seeds` of models without a price, read the book (a database down
        now is tried again each round), and keep reading it every `reload_s`."""
        seeds = list(seeds)
        if seeds:
            try:
                await self.seed(seeds)
            except Exception as exc:  # serving goes on; the seeds are written next start
                log.warning("writing the --price seeds failed: %s", exc)
        await self._reload_quietly()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._reload_forever())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _reload_forever(self) -> None:
        while True:
            await asyncio.sleep(self.reload_s)
            await self._reload_quietly()

    async def _reload_quietly(self) -> None:
        try:
            await self.reload()
        except Exception as exc:  # the last book stays; the next round tries again
            log.warning("reading the prices failed: %s", exc)


def record_cost(price: Price | None, record: UsageRecord) -> int:
    """A usage record's cost at `price`: batch work (`batch_id` set) gets its discount."""
    return cost_micros(
        price,
        record.prompt_tokens,
        record.cached_tokens,
        record.completion_tokens,
        batch=record.batch_id is not None,
    )


async def price_in(conn: AsyncConnection, model: str, at: float) -> Price | None:
    """The model's price in force at `at`, read on `conn` (inside its transaction)."""
    statement = (
        select(*_COLUMNS)
        .where(prices.c.model == model, prices.c.effective_from <= at)
        .order_by(prices.c.effective_from.desc())
        .limit(1)
    )
    row = (await conn.execute(statement)).first()
    return _price(row) if row is not None else None


def _values(price: Price) -> dict[str, object]:
    return {
        "model": price.model,
        "effective_from": price.effective_from,
        "input_micros": price.input_micros,
        "cached_input_micros": price.cached_input_micros,
        "output_micros": price.output_micros,
        "batch_discount": price.batch_discount,
        "created_at": time.time(),
    }
