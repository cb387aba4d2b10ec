"""How a model sleeps and wakes: one small interface, two implementations.

`VLLMSleeper` is the GPU's: pause the engine, then vLLM's `sleep(level=1)` (weights
offloaded to host memory, KV cache freed) through `ModelHost.release_memory`; waking
is `wake_up` (`reacquire_memory`) then resume. It needs the engine built with
`enable_sleep_mode`. `PauseSleeper` is the stand-in where vLLM has no sleep mode (its
CPU build): the engine pauses and keeps its memory, so a wake is a resume.
"""

from __future__ import annotations

from typing import Protocol

from engine.protocol import ModelHost


class Sleeper(Protocol):
    async def sleep(self, host: ModelHost) -> None:
        """Stop the model serving and free what the platform can of its memory."""

    async def wake(self, host: ModelHost) -> None:
        """Undo `sleep`: the model serves again when this returns."""


class PauseSleeper:
    """Sleep is a pause (memory kept), wake a resume."""

    async def sleep(self, host: ModelHost) -> None:
        await host.pause()

    async def wake(self, host: ModelHost) -> None:
        await host.resume()


class VLLMSleeper:
    """Sleep is a pause then vLLM sleep level 1; wake is vLLM wake-up then resume. An
    engine built without sleep mode only pauses (`release_memory` says so), and its
    wake then skips the wake-up."""

    def __init__(self) -> None:
        self._released: set[int] = set()  # id() of the hosts whose memory is released

    async def sleep(self, host: ModelHost) -> None:
        await host.pause()
        if await host.release_memory():
            self._released.add(id(host))

    async def wake(self, host: ModelHost) -> None:
        if id(host) in self._released:
            await host.reacquire_memory()
            self._released.discard(id(host))
        await host.resume()
