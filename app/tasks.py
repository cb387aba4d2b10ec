"""Stopping the long-lived background tasks services own (heartbeats, sync rounds,
runners): each is cancelled and awaited, so nothing it holds outlives its service."""

from __future__ import annotations

import asyncio
import contextlib


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel `task` (if any) and wait until it has unwound."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
