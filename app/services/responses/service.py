"""OpenAI's Responses API on the generation skeleton: chat's engine requests (the
request arrives converted, app.services.responses.request), the Responses shapes
(app.services.responses.wire), and what is its own:

- A finished response is stored (`store`, true by default) before its client has the
  last byte: the Response object exactly as it was returned, the request's input items
  and the output items, under the owner of the request's key; a stored chain is what
  `previous_response_id` continues. `store: false` keeps nothing. A response that
  failed is not stored.
- `truncation: "auto"`: a prompt over the context drops its oldest items (a system
  message and the last item stay) and runs again, before any output.
- Streams are OpenAI's Responses events; an error after the stream began is an `error`
  event and `response.failed`. There is no `[DONE]`, as OpenAI sends none.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

import msgspec

from app.errors import APIError
from app.schemas.chat import ChatCompletionRequest, Message, SystemMessage
from app.schemas.responses_output import Response
from app.services.chat.service import ChatService, messages_for_template
from app.services.generation.service import GenerationService
from app.services.generation.streaming import RequestEnd, open_sse
from app.services.images.service import ImageLoader
from app.services.responses.request import ResponsesChatRequest
from app.services.responses.sealing import ReasoningSeal
from app.services.responses.wire import ResponsesGeneration
from app.storage.responses import StoredResponse
from engine.admission.lease import admitted
from engine.admission.runtime import AdmissionController
from engine.errors import ContextLengthExceeded, EngineRequestError
from engine.protocol import Engine, GenerateOutput, GenerateRequest
from engine.warm.pool import ModelPool

log = logging.getLogger("lilac.responses")
_encoder = msgspec.json.Encoder()
_END: Any = object()
MAX_TRUNCATIONS = 8  # tries of `truncation: auto` before the request is refused
# The chat request's fields that errors of the chat path name, as this API names them
# (by prefix; the first that matches).
_PARAMS = (
    ("messages", "input"),
    ("max_completion_tokens", "max_output_tokens"),
    ("max_tokens", "max_output_tokens"),
    ("reasoning_effort", "reasoning.effort"),
    ("response_format.json_schema", "text.format"),
    ("response_format", "text.format"),
)


def responses_param(param: str | None) -> str | None:
    """`param` of an error of the chat path, as this API names the field."""
    if param is None:
        return None
    for chat, ours in _PARAMS:
        if param == chat or param.startswith((chat + ".", chat + "[")):
            rest = param[len(chat) :]
            return ours if chat == "messages" else ours + rest
    return param.replace(".function.", ".", 1) if param.startswith("tools[") else param


class ResponsesService(GenerationService[ChatCompletionRequest]):
    id_prefix = "resp"

    def __init__(
        self,
        models: ModelPool,
        admission: AdmissionController,
        images: ImageLoader | None = None,
        seal: ReasoningSeal | None = None,
    ) -> None:
        super().__init__(models, admission)
        self._chat = ChatService(models, admission, images)
        self.seal = seal or ReasoningSeal()

    async def engine_requests(
        self, request: ChatCompletionRequest, request_id: str, client: str | None
    ) -> list[GenerateRequest]:
        try:
            return await self._chat.engine_requests(request, request_id, client)
        except (APIError, EngineRequestError) as exc:
            exc.param = responses_param(exc.param)
            raise

    def generation(self, request: ChatCompletionRequest, request_id: str) -> ResponsesGeneration:
        # Response ids are `resp_<hex>`, as OpenAI's (the engine request id is `resp-...`).
        chat = _responses(request)
        generation = ResponsesGeneration(chat, request_id, self.seal)
        generation.id = "resp_" + request_id.removeprefix("resp-").replace("-", "")
        if chat.response_id is not None:  # a background response keeps its queued name
            generation.id = chat.response_id
        if chat.created_at is not None:
            generation.created_at = chat.created_at
        return generation

    async def complete(
        self,
        request: ChatCompletionRequest,
        client: str | None = None,
        meter: RequestEnd | None = None,
    ) -> Response:
        generation, generates, engine = await self._start(request, client, meter)
        assert isinstance(generation, ResponsesGeneration)
        if meter is not None:
            meter.usage_source = generation
        states = generation.choice_states()
        async with aclosing(self._truncated(engine, generates[0], _responses(request))) as outputs:
            async for output in outputs:
                generation.accumulate(states, 0, output)
        body = generation.finish()
        if meter is not None:
            await meter.finish()
        await self._store(_responses(request), generation)
        return body

    async def open_stream(
        self,
        request: ChatCompletionRequest,
        client: str | None = None,
        meter: RequestEnd | None = None,
    ) -> AsyncIterator[bytes]:
        generation, generates, engine = await self._start(request, client, meter)
        assert isinstance(generation, ResponsesGeneration)
        if meter is not None:
            meter.usage_source = generation
        chat = _responses(request)
        outputs = self._stored_after(self._truncated(engine, generates[0], chat), chat, generation)
        return await open_sse(
            outputs,
            generation.frames,
            generation.closing_frames,
            meter,
            error_tail=generation.error_frames,
            done=b"",
        )

    async def _stored_after(
        self,
        outputs: AsyncGenerator[GenerateOutput, None],
        request: ResponsesChatRequest,
        generation: ResponsesGeneration,
    ) -> AsyncGenerator[GenerateOutput, None]:
        """The outputs, then the finished response stored: a store that refuses it
        (too large) ends the stream in an error event instead of `response.completed`."""
        async with aclosing(outputs):
            async for output in outputs:
                yield output
        generation.finish()
        await self._store(request, generation)

    async def _store(self, request: ResponsesChatRequest, generation: ResponsesGeneration) -> None:
        if not request.source.store or request.response_store is None:
            return
        final = generation.finish()
        await request.response_store.save(
            StoredResponse(
                id=final.id,
                owner=request.owner,
                model=final.model,
                created_at=final.created_at,
                previous_response_id=final.previous_response_id,
                status=final.status,
                response=_encoder.encode(final),
                input_items=_encoder.encode(request.input_items),
                output_items=_encoder.encode(final.output),
            )
        )

    async def _truncated(
        self, engine: Engine, generate: GenerateRequest, request: ResponsesChatRequest
    ) -> AsyncGenerator[GenerateOutput, None]:
        """The engine's outputs; with `truncation: auto`, a prompt over the context
        drops its oldest items and runs again (before any output was sent)."""
        outputs = admitted(self._admission, engine, generate)
        tries = 0
        while True:
            try:
                first = await anext(outputs, _END)
                break
            except ContextLengthExceeded as exc:
                tries += 1
                kept = None
                if request.truncate and tries <= MAX_TRUNCATIONS and not generate.images:
                    room = engine.model.max_model_len - (exc.requested_output or 1)
                    kept = _drop_oldest(request.messages, exc.prompt_tokens, room)
                if kept is None:
                    exc.param = responses_param(exc.param)
                    raise
                request.messages = kept
                generate.messages = messages_for_template(kept)
                outputs = admitted(self._admission, engine, generate)
            except EngineRequestError as exc:  # the family's checks of reasoning controls
                exc.param = responses_param(exc.param)
                raise
        if first is _END:
            return
        async with aclosing(outputs):
            yield first
            async for output in outputs:
                yield output


def _drop_oldest(messages: list[Message], prompt_tokens: int, room: int) -> list[Message] | None:
    """`messages` less enough of the oldest that the prompt should fit in `room` tokens,
    by the share of the prompt it is over (a leading system message and the last message
    stay); None when nothing is left to drop."""
    keep_first = [m for m in messages[:1] if isinstance(m, SystemMessage)]
    droppable = messages[len(keep_first) : -1]
    if not droppable or room < 1:
        return None
    over = (prompt_tokens - room) / max(prompt_tokens, 1)
    count = min(len(droppable), max(1, math.ceil(len(droppable) * over)))
    return [*keep_first, *droppable[count:], messages[-1]]


def _responses(request: ChatCompletionRequest) -> ResponsesChatRequest:
    assert isinstance(request, ResponsesChatRequest)  # the route converts every request
    return request
