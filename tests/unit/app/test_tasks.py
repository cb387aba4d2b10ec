"""Background tasks stop when cancelled.

- cancel_and_wait: the task has unwound (its `finally` ran) when the call returns; a task
  that swallows its cancellation is cancelled again until it ends; the task's own
  exception is raised to the caller; no task is nothing to do.
- wait_event: says whether the event came in time, and a loop waiting on it stops when
  cancelled in any step around the event's setting (where `asyncio.wait_for` on Python
  3.11 loses the cancellation and the loop runs on for ever).
"""

from __future__ import annotations

import asyncio

import pytest

from app.tasks import cancel_and_wait, wait_event


async def test_the_task_has_unwound_when_the_call_returns() -> None:
    unwound = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            unwound.set()

    task = asyncio.get_running_loop().create_task(forever())
    await asyncio.sleep(0)  # it is running, parked in its sleep
    await cancel_and_wait(task)
    assert task.cancelled() and unwound.is_set()


async def test_a_task_that_swallows_its_cancellation_is_cancelled_again() -> None:
    cancellations = 0

    async def stubborn() -> None:
        nonlocal cancellations
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancellations += 1  # swallowed: it runs on
        await asyncio.sleep(3600)

    task = asyncio.get_running_loop().create_task(stubborn())
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await cancel_and_wait(task, cancel_again_after_s=0.05)
    assert task.cancelled() and cancellations == 1


async def test_the_tasks_own_failure_is_raised() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            raise RuntimeError("broken cleanup")

    task = asyncio.get_running_loop().create_task(fails_on_cancel())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="broken cleanup"):
        await cancel_and_wait(task)


async def test_no_task_is_nothing_to_do() -> None:
    await cancel_and_wait(None)


async def test_wait_event_says_whether_the_event_came() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 5) is True


@pytest.mark.parametrize("steps_after_set", range(6))
async def test_a_loop_on_wait_event_stops_when_cancelled_as_the_event_is_set(
    steps_after_set: int,
) -> None:
    """The loop of a sync round or a runner, cancelled by its service's close 0-5 loop
    steps after a wake-up: every case ends in one cancellation."""
    wake = asyncio.Event()
    rounds = 0

    async def rounds_forever() -> None:
        nonlocal rounds
        while True:
            await wait_event(wake, 3600)
            wake.clear()
            rounds += 1

    task = asyncio.get_running_loop().create_task(rounds_forever())
    await asyncio.sleep(0)  # parked in its wait
    wake.set()
    for _ in range(steps_after_set):
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=1)
    assert done == {task} and task.cancelled(), rounds
