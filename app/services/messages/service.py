"""Anthropic's Messages API on the generation skeleton: chat's engine requests (the
request arrives converted, app.services.messages.request), Anthropic's wire shapes
(app.services.messages.wire), and two things of its own:

- `max_tokens` over the room left in the context is clamped to that room rather than
  refused: clients built for hosted models send 32,000 and more to any model. A request
  is first bounded by the context length; if the engine then finds the prompt leaves
  less room, the request runs again (before any output) with exactly that room. The
  `max_tokens` used is `clamped_max_tokens` of the request, for the response header.
- Streams are Anthropic's events, and an error after the stream began is an `error`
  event in Anthropic's shape; the stream opens only after the first engine output, so
  every error before it is still a plain HTTP error.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from app.errors import APIError
from app.errors.anthropic import anthropic_body
from app.schemas.chat import ChatCompletionRequest
from app.schemas.messages import MessageResponse
from app.services.chat.service import ChatService
from app.services.generation.service import GenerationService
from app.services.generation.streaming import RequestEnd, open_sse
from app.services.images.service import ImageLoader
from app.services.messages.request import MessagesChatRequest
from app.services.messages.wire import MessagesGeneration, event_frame
from engine.admission.lease import admitted
from engine.admission.runtime import AdmissionController
from engine.checks import estimate_prompt_tokens
from engine.errors import ContextLengthExceeded
from engine.protocol import Engine, GenerateOutput, GenerateRequest
from engine.warm.pool import ModelPool

_END: Any = object()


class MessagesService(GenerationService[ChatCompletionRequest]):
    id_prefix = "msg"

    def __init__(
        self, models: ModelPool, admission: AdmissionController, images: ImageLoader | None = None
    ) -> None:
        super().__init__(models, admission)
        self._chat = ChatService(models, admission, images)

    async def engine_requests(
        self, request: ChatCompletionRequest, request_id: str, client: str | None
    ) -> list[GenerateRequest]:
        generates = await self._chat.engine_requests(request, request_id, client)
        limit = self.engine_for(request).model.max_model_len - 1  # a prompt has a token
        sampling = generates[0].sampling
        if sampling.max_tokens is not None and sampling.max_tokens > limit:
            sampling.max_tokens = limit
            _messages(request).clamped_max_tokens = limit
        return generates

    def generation(self, request: ChatCompletionRequest, request_id: str) -> MessagesGeneration:
        return MessagesGeneration(_messages(request), request_id)

    def reserved_tokens(self, request: ChatCompletionRequest, body_bytes: int) -> int:
        """As chat's, with `max_tokens` bounded by the context (as it will be clamped)."""
        model = self._models.get(request.model) or self._models.first
        limit = min(request.max_tokens or 0, model.model.max_model_len)
        return estimate_prompt_tokens(body_bytes) + limit

    async def complete(
        self,
        request: ChatCompletionRequest,
        client: str | None = None,
        meter: RequestEnd | None = None,
    ) -> MessageResponse:
        generation, generates, engine = await self._start(request, client, meter)
        assert isinstance(generation, MessagesGeneration)
        if meter is not None:
            meter.usage_source = generation
        states = generation.choice_states()
        async with aclosing(self._clamped(engine, generates[0], _messages(request))) as outputs:
            async for output in outputs:
                generation.accumulate(states, 0, output)
        body = generation.body(states, generation.usage())
        if meter is not None:
            await meter.finish()
        return body

    async def open_stream(
        self,
        request: ChatCompletionRequest,
        client: str | None = None,
        meter: RequestEnd | None = None,
    ) -> AsyncIterator[bytes]:
        generation, generates, engine = await self._start(request, client, meter)
        if meter is not None:
            meter.usage_source = generation
        assert isinstance(generation, MessagesGeneration)
        outputs = self._clamped(engine, generates[0], _messages(request))
        return await open_sse(
            outputs,
            generation.frames,
            generation.closing_frames,
            meter,
            error_tail=_error_event,
            done=b"",
        )

    async def _clamped(
        self, engine: Engine, generate: GenerateRequest, request: MessagesChatRequest
    ) -> AsyncGenerator[GenerateOutput, None]:
        """The engine's outputs; a `max_tokens` the prompt leaves no room for is clamped
        to the room there is, and the request runs once more."""
        outputs = admitted(self._admission, engine, generate)
        try:
            first = await anext(outputs, _END)
        except ContextLengthExceeded as exc:
            room = engine.model.max_model_len - exc.prompt_tokens
            if exc.requested_output is None or room < 1:
                raise
            generate.sampling.max_tokens = request.clamped_max_tokens = room
            outputs = admitted(self._admission, engine, generate)
            first = await anext(outputs, _END)
        if first is _END:
            return
        async with aclosing(outputs):
            yield first
            async for output in outputs:
                yield output


def _messages(request: ChatCompletionRequest) -> MessagesChatRequest:
    assert isinstance(request, MessagesChatRequest)  # the route converts every request
    return request


def _error_event(error: APIError) -> bytes:
    return event_frame(anthropic_body(error.status_code, error.message, error.param))
