"""cancel_and_wait: a service's background task is cancelled and has unwound (its
`finally` ran) by the time the call returns; no task is nothing to do."""

from __future__ import annotations

import asyncio

from app.tasks import cancel_and_wait


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


async def test_no_task_is_nothing_to_do() -> None:
    await cancel_and_wait(None)
