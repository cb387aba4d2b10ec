"""The deferred-work store on both databases: claims split work and honour leases, an
answer and its usage row are one transaction, and a replay can neither answer a line
twice nor bill it twice."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import usage
from app.deferred.store import ANSWERED, EXPIRED, PENDING, DeferredStore, Job
from app.storage.database import TenantDatabase
from app.tenancy.usage.records import UsageRecord


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def store_of(database: AsyncEngine, clock: Clock) -> DeferredStore:
    url = database.url.render_as_string(hide_password=False)
    return DeferredStore(TenantDatabase(url, database), clock)


def job(job_id: str = "batch_a", owner: str = "k1", created: float = 1_000_000.0) -> Job:
    return Job(
        job_id,
        "batch",
        owner,
        owner,
        "in_progress",
        {"endpoint": "/v1/completions"},
        None,
        {},
        created,
        created + 86400,
    )


def record(request_id: str, tokens: int = 3) -> UsageRecord:
    return UsageRecord(
        request_id,
        "k1",
        "m",
        "/v1/completions",
        tokens,
        0,
        tokens,
        0,
        1,
        "completed",
        None,
        None,
        1.0,
        1_000_000.0,
        batch_id="batch_a",
    )


async def usage_count(database: AsyncEngine) -> int:
    async with database.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(usage))).scalar_one())


async def test_two_replicas_claim_disjoint_lines_in_order(database: AsyncEngine) -> None:
    store = store_of(database, Clock())
    await store.create(job(), [f'{{"n": {i}}}' for i in range(10)])
    first = await store.claim("batch_a", "r1", 4, 60)
    second = await store.claim("batch_a", "r2", 4, 60)
    third = await store.claim("batch_a", "r3", 4, 60)
    assert [line.seq for line in first] == [0, 1, 2, 3]
    assert [line.seq for line in second] == [4, 5, 6, 7]
    assert [line.seq for line in third] == [8, 9]
    assert await store.claim("batch_a", "r1", 4, 60) == []
    counts = (await store.counts(["batch_a"]))["batch_a"]
    assert counts.by_state == {"running": 10} and counts.unfinished == 10


async def test_a_dead_replicas_lines_are_claimed_after_its_lease(database: AsyncEngine) -> None:
    clock = Clock()
    store = store_of(database, clock)
    await store.create(job(), ['{"n": 0}', '{"n": 1}'])
    held = await store.claim("batch_a", "dead", 2, 60)
    assert len(held) == 2
    clock.now += 30
    assert await store.claim("batch_a", "alive", 2, 60) == []  # the lease holds
    clock.now += 31
    taken = await store.claim("batch_a", "alive", 2, 60)
    assert [line.seq for line in taken] == [0, 1]
    # The dead replica's run is no fault of the line: counted as cut, not failed.
    assert (taken[0].cut_runs, taken[0].failed_runs) == (1, 0)
    # The dead replica comes back with its old answer: refused, and nothing billed.
    assert not await store.answer("batch_a", 0, "dead", "{}", True, record("batch_req_a_0"))
    assert await usage_count(database) == 0
    assert await store.answer("batch_a", 0, "alive", '{"x": 1}', True, record("batch_req_a_0"))
    assert await usage_count(database) == 1


async def test_an_answer_is_written_once_and_billed_once(database: AsyncEngine) -> None:
    store = store_of(database, Clock())
    await store.create(job(), ['{"n": 0}'])
    await store.claim("batch_a", "r1", 1, 60)
    assert await store.answer("batch_a", 0, "r1", '{"a": 1}', True, record("batch_req_a_0", 5))
    # A replay of the same answer (a retry after a lost reply) changes nothing.
    assert not await store.answer("batch_a", 0, "r1", '{"a": 2}', True, record("batch_req_a_0"))
    assert await usage_count(database) == 1
    lines = [item async for item in store.finished_lines("batch_a")]
    assert lines == [(0, ANSWERED, '{"n": 0}', '{"a": 1}', True)]
    counts = (await store.counts(["batch_a"]))["batch_a"]
    assert (counts.ok, counts.prompt_tokens, counts.completion_tokens) == (1, 5, 5)
    async with database.connect() as conn:
        batch_id = (await conn.execute(select(usage.c.batch_id))).scalar_one()
    assert batch_id == "batch_a"


async def test_a_cut_line_is_pending_again_its_run_counted_as_cut(
    database: AsyncEngine,
) -> None:
    store = store_of(database, Clock())
    await store.create(job(), ['{"n": 0}'])
    [line] = await store.claim("batch_a", "r1", 1, 60)
    assert (line.cut_runs, line.failed_runs) == (0, 0)
    assert not await store.release("batch_a", 0, "r2")  # not r2's to release
    assert await store.release("batch_a", 0, "r1")
    [again] = await store.claim("batch_a", "r2", 1, 60)
    assert (again.cut_runs, again.failed_runs) == (1, 0)


async def test_a_line_refused_before_any_work_is_not_counted_as_cut(
    database: AsyncEngine,
) -> None:
    """A restarting engine refuses every line while it loads: those refusals never use
    up the line's cuts."""
    store = store_of(database, Clock())
    await store.create(job(), ['{"n": 0}'])
    for _ in range(100):
        [_claimed] = await store.claim("batch_a", "r1", 1, 60)
        assert await store.release_many([("batch_a", 0)], "r1", counted=False) == 1
    [again] = await store.claim("batch_a", "r1", 1, 60)
    assert (again.cut_runs, again.failed_runs) == (0, 0)


async def test_a_failed_run_counts_as_failed_not_cut(database: AsyncEngine) -> None:
    store = store_of(database, Clock())
    await store.create(job(), ['{"n": 0}'])
    await store.claim("batch_a", "r1", 1, 60)
    assert not await store.failed("batch_a", 0, "r2")  # not r2's
    assert await store.failed("batch_a", 0, "r1")
    [again] = await store.claim("batch_a", "r1", 1, 60)
    assert (again.cut_runs, again.failed_runs) == (0, 1)
    assert await store.release("batch_a", 0, "r1")  # then cut: both counted
    [third] = await store.claim("batch_a", "r1", 1, 60)
    assert (third.cut_runs, third.failed_runs) == (1, 1)


async def test_lines_cut_together_are_released_in_one_go(database: AsyncEngine) -> None:
    store = store_of(database, Clock())
    await store.create(job(), [f'{{"n": {i}}}' for i in range(4)])
    await store.create(job("batch_b"), ['{"n": 0}'])
    await store.claim("batch_a", "r1", 3, 60)  # lines 0-2 run on r1
    await store.claim("batch_a", "r2", 1, 60)  # line 3 on r2
    await store.claim("batch_b", "r1", 1, 60)
    held = [("batch_a", 0), ("batch_a", 2), ("batch_a", 3), ("batch_b", 0)]
    assert await store.release_many(held, "r1") == 3  # line 3 is r2's: left alone
    assert await store.release_many([], "r1") == 0
    counts = await store.counts(["batch_a", "batch_b"])
    assert counts["batch_a"].by_state == {PENDING: 2, "running": 2}
    assert counts["batch_b"].by_state == {PENDING: 1}
    again = await store.claim("batch_a", "r3", 5, 60)
    assert sorted(line.seq for line in again) == [0, 2]
    assert {(line.cut_runs, line.failed_runs) for line in again} == {(1, 0)}


async def test_expiry_ends_pending_lines_and_leaves_running_ones(database: AsyncEngine) -> None:
    store = store_of(database, Clock())
    await store.create(job(), ['{"n": 0}', '{"n": 1}', '{"n": 2}'])
    await store.claim("batch_a", "r1", 1, 60)
    assert await store.close_pending("batch_a", EXPIRED) == 2
    counts = (await store.counts(["batch_a"]))["batch_a"]
    assert counts.by_state == {"running": 1, EXPIRED: 2}
    assert await store.claim("batch_a", "r1", 5, 60) == []


async def test_jobs_are_listed_newest_first_by_page_and_owner(database: AsyncEngine) -> None:
    store = store_of(database, Clock())
    for i in range(5):
        await store.create(job(f"batch_{i}", created=1000.0 + i), [])
    await store.create(job("batch_other", owner="k2", created=2000.0), [])
    page = await store.list_jobs("batch", "k1", limit=2)
    assert [j.id for j in page] == ["batch_4", "batch_3"]
    page = await store.list_jobs("batch", "k1", after="batch_3", limit=10)
    assert [j.id for j in page] == ["batch_2", "batch_1", "batch_0"]
    assert await store.get("batch_other", "k1") is None
    assert (await store.get("batch_other", "k2")) is not None
    moved = await store.move("batch_0", ("in_progress",), "cancelling")
    assert moved and not await store.move("batch_0", ("in_progress",), "cancelling")
    cancelled = await store.get("batch_0")
    assert cancelled is not None and cancelled.state == "cancelling"
    assert "cancelling" in cancelled.stamps and cancelled.state != PENDING
