"""The pool seen as one host: what the admission controller, health checks and metrics
ask of "the engine", answered for every model at once.

Yielding to the owner pauses every awake model; the return brings back those that were
awake (sleeping ones stay asleep). Ready means every model has loaded. Facts about
"the model" (the admission queue's context length and KV budget) are the first
model's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from engine.protocol import ModelInfo
from engine.warm.pool import ModelPool


class PoolHost:
    def __init__(self, pool: ModelPool) -> None:
        self.pool = pool

    @property
    def model(self) -> ModelInfo:
        return self.pool.first.model

    async def start(self) -> None:
        await self.pool.start()

    async def shutdown(self) -> None:
        await self.pool.shutdown()

    def is_alive(self) -> bool:
        return all(m.engine.is_alive() for m in self.pool.models)

    def is_ready(self) -> bool:
        return all(m.engine.is_ready() for m in self.pool.models)

    def unfinished_requests(self) -> int:
        return sum(m.engine.unfinished_requests() for m in self.pool.models)

    def failure(self) -> str | None:
        for model in self.pool.models:
            failure = model.engine.failure()
            if failure is not None:
                return failure if len(self.pool.models) == 1 else f"{model.name}: {failure}"
        return None

    def tokenize(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        add_special_tokens: bool = True,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        return self.pool.first.tokenize(
            prompt=prompt,
            messages=messages,
            add_special_tokens=add_special_tokens,
            add_generation_prompt=add_generation_prompt,
        )

    def detokenize(self, token_ids: list[int]) -> str:
        return self.pool.first.detokenize(token_ids)

    async def abort(self, request_id: str) -> None:
        # Request ids are unique across models: the one holding it ends it.
        await asyncio.gather(*(m.engine.abort(request_id) for m in self.pool.models))

    async def pause(self) -> None:
        await self.pool.pause_all()

    async def resume(self) -> None:
        await self.pool.resume_all()

    async def release_memory(self) -> bool:
        return await self.pool.release_all()

    async def reacquire_memory(self) -> None:
        await self.pool.reacquire_all()

    async def metrics_exposition(self) -> str:
        # Asleep or awake: a model's engine keeps its series either way.
        texts = await asyncio.gather(*(m.engine.metrics_exposition() for m in self.pool.models))
        return "".join(texts)
