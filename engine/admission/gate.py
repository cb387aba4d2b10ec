"""An Engine wrapped in admission: `generate` waits for admission (or raises
`AdmissionRejected`) before its first output, and ends a stream with `Drained` when
the grace period of a drain runs out. The HTTP side maps both in `app.errors`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from engine.admission.queue import estimate_tokens
from engine.admission.runtime import AdmissionController
from engine.errors import EngineUnavailable
from engine.protocol import Engine, GenerateOutput, GenerateRequest, ModelInfo


class AdmittedEngine:
    """An Engine whose generations pass the admission controller first."""

    def __init__(self, engine: Engine, controller: AdmissionController) -> None:
        self.inner = engine
        self.controller = controller

    @property
    def model(self) -> ModelInfo:
        return self.inner.model

    async def start(self) -> None:
        await self.inner.start()

    async def shutdown(self) -> None:
        await self.inner.shutdown()

    def is_ready(self) -> bool:
        return self.inner.is_ready()

    def unfinished_requests(self) -> int:
        return self.inner.unfinished_requests()

    async def abort(self, request_id: str) -> None:
        await self.inner.abort(request_id)

    def tokenize(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        add_special_tokens: bool = True,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        return self.inner.tokenize(
            prompt=prompt,
            messages=messages,
            add_special_tokens=add_special_tokens,
            add_generation_prompt=add_generation_prompt,
        )

    def detokenize(self, token_ids: list[int]) -> str:
        return self.inner.detokenize(token_ids)

    async def pause(self) -> None:
        await self.inner.pause()

    async def resume(self) -> None:
        await self.inner.resume()

    async def release_memory(self) -> bool:
        return await self.inner.release_memory()

    async def reacquire_memory(self) -> None:
        await self.inner.reacquire_memory()

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateOutput]:
        if not self.inner.is_ready():
            raise EngineUnavailable("The model is still loading.")
        model = self.inner.model
        self.controller.use_model(model)
        sampling = request.sampling
        tokens = estimate_tokens(
            request.messages, request.prompt, sampling.max_tokens, model.max_model_len, sampling.n
        )
        client = request.client or "anonymous"
        lease = await self.controller.acquire(client, request.priority, tokens, request.request_id)
        try:
            async with aclosing(self.inner.generate(request)) as outputs:  # type: ignore[type-var]
                async for output in outputs:
                    if lease.revoked:
                        raise self.controller.drained_error()
                    yield output
            if lease.revoked:  # the engine ended it early because we aborted it
                raise self.controller.drained_error()
        finally:
            self.controller.release(lease)
