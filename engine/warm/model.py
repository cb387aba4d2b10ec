"""One model of the pool (`engine.warm.pool`): its state, how it shares the box, and
the `Engine` that stands in for the model's own engine.

A `WarmModel` delegates to the model's engine, except that a generation, once the
engine has checked it, waits for the model to be awake (the pool wakes it; concurrent
requests share one wake; each client may start only so many wakes a minute), is
counted while in flight (a model in flight never sleeps) and stamps the model's last
use.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Protocol

from engine.protocol import Engine, GenerateOutput, GenerateRequest, ModelInfo


class ModelState(StrEnum):
    LOADING = "loading"
    AWAKE = "awake"
    WAKING = "waking"
    ASLEEP = "asleep"


@dataclass(frozen=True, slots=True)
class WarmConfig:
    """How one model shares the box."""

    keep_alive_s: float = -1.0  # idle seconds before it sleeps; 0: at once; -1: never
    memory_gib: float = 0.0  # counted against the pool's budget while awake
    pinned: bool = False  # never sleeps (neither idle nor to make room)


class Keeper(Protocol):
    """What a model needs of whoever keeps it awake (the pool, `engine.warm.pool`): the
    time, a wake before a generation runs, and word when one ends."""

    clock: Callable[[], float]

    async def ensure_awake(self, model: WarmModel, *, client: str | None = None) -> None: ...

    def request_ended(self, model: WarmModel) -> None: ...


class WarmModel:
    """One model of the pool, usable wherever an `Engine` is."""

    def __init__(self, engine: Engine, config: WarmConfig, keeper: Keeper) -> None:
        self.engine = engine
        self.config = config
        self._keeper = keeper
        self.state = ModelState.AWAKE if engine.is_ready() else ModelState.LOADING
        self.in_flight = 0
        self.last_used = keeper.clock()
        self.wakes = 0  # wakes completed
        self.waiters = 0  # requests that waited for a wake
        self.wake_task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.engine.model.name

    @property
    def model(self) -> ModelInfo:
        return self.engine.model

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        """The model's own stream; a sleeping model wakes only once the engine has
        checked the request (its `before_run`), so a request that fails its checks wakes
        nothing."""
        self.in_flight += 1  # from now on the model cannot be put to sleep
        try:
            request = replace(request, before_run=self._wake_before(request))
            async with aclosing(self.engine.generate(request)) as outputs:
                async for output in outputs:
                    yield output
        finally:
            self.in_flight -= 1
            self.last_used = self._keeper.clock()
            self._keeper.request_ended(self)

    def _wake_before(self, request: GenerateRequest) -> Callable[[], Awaitable[None]]:
        outer = request.before_run

        async def wake() -> None:
            if outer is not None:
                await outer()
            await self._keeper.ensure_awake(self, client=request.client)

        return wake

    # Everything else is the model's own engine.

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)

    async def start(self) -> None:
        await self.engine.start()

    async def shutdown(self) -> None:
        await self.engine.shutdown()

    def is_alive(self) -> bool:
        return self.engine.is_alive()

    def is_ready(self) -> bool:
        return self.engine.is_ready()

    def unfinished_requests(self) -> int:
        return self.engine.unfinished_requests()

    def failure(self) -> str | None:
        return self.engine.failure()

    def tokenize(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        add_special_tokens: bool = True,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        return self.engine.tokenize(
            prompt=prompt,
            messages=messages,
            add_special_tokens=add_special_tokens,
            add_generation_prompt=add_generation_prompt,
        )

    def detokenize(self, token_ids: list[int]) -> str:
        return self.engine.detokenize(token_ids)

    async def pause(self) -> None:
        await self.engine.pause()

    async def resume(self) -> None:
        await self.engine.resume()

    async def release_memory(self) -> bool:
        return await self.engine.release_memory()

    async def reacquire_memory(self) -> None:
        await self.engine.reacquire_memory()

    async def metrics_exposition(self) -> str:
        return await self.engine.metrics_exposition()
