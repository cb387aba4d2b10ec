"""Waiting and stopping in the long-lived background tasks services own (heartbeats,
sync rounds, runners), so that each stops when it is cancelled and nothing it holds
outlives its service.

`asyncio.wait_for` is not used in this project (ruff bans it): before Python 3.12 it
loses a cancellation that arrives in the step where what it waits for finishes, and a
loop around it then runs on after its service closed, with the close waiting on it for
ever. `asyncio.timeout` and `wait_event` keep every cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

log = logging.getLogger("lilac.app")

# How long a cancelled task gets to unwind before it is cancelled again: a task that
# swallowed its cancellation (library code can) would otherwise hold its close for ever.
CANCEL_AGAIN_AFTER_S = 5.0


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Whether `event` was set within `timeout_s` (a cancellation always propagates)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
        return True
    return False


async def cancel_and_wait(
    task: asyncio.Task[None] | None, cancel_again_after_s: float = CANCEL_AGAIN_AFTER_S
) -> None:
    """Cancel `task` (if any) and wait until it has ended, cancelling it again while it
    runs on; an exception it ended with is raised here."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=cancel_again_after_s)
        if not task.done():
            log.warning("task %s ran on after it was cancelled; cancelling it again", task)
    if not task.cancelled():
        task.result()
