"""Chat completions: a decoded request -> an engine request -> a response or an SSE stream."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from app.errors import InvalidRequest
from app.schemas.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    Delta,
    Message,
    ResponseMessage,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from app.services.images import ImageLoader, template_content
from app.services.sampling import check_common, check_model, sampling_options
from app.services.streaming import open_sse
from app.services.tools import (
    ToolCallCollector,
    template_tool_calls,
    tool_fields,
    wire_deltas,
)
from app.sse import frame
from engine import protocol
from engine.admission.lease import admitted
from engine.admission.runtime import AdmissionController
from engine.protocol import Engine, GenerateOutput, GenerateRequest, ModelHost


def messages_for_template(messages: list[Message]) -> list[dict[str, Any]]:
    """Wire messages -> the plain dicts chat templates expect (`developer` reads as `system`)."""
    rendered = []
    for message in messages:
        role = message.__struct_config__.tag  # the `role` tag msgspec decoded it by
        if role == "developer":
            role = "system"
        item: dict[str, Any] = {"role": role, "content": template_content(message.content)}
        tool_call_id = getattr(message, "tool_call_id", None)
        if tool_call_id is not None:
            item["tool_call_id"] = tool_call_id
        tool_calls = getattr(message, "tool_calls", None)
        if tool_calls:
            item["tool_calls"] = template_tool_calls(tool_calls)
        reasoning = getattr(message, "reasoning", None)
        if reasoning is not None:
            item["reasoning"] = reasoning
        rendered.append(item)
    return rendered


def to_wire_logprobs(entries: list[protocol.TokenLogprob] | None) -> ChoiceLogprobs | None:
    if entries is None:
        return None
    return ChoiceLogprobs(
        content=[
            TokenLogprob(
                token=entry.token,
                logprob=entry.logprob,
                bytes=list(entry.token.encode()),
                top_logprobs=[
                    TopLogprob(token=top.token, logprob=top.logprob, bytes=list(top.token.encode()))
                    for top in entry.top
                ],
            )
            for entry in entries
        ]
    )


def reasoning_controls(request: ChatCompletionRequest) -> dict[str, Any]:
    """The top-level reasoning fields the client set; the engine's family reads them."""
    fields = {
        "thinking": request.thinking,
        "enable_thinking": request.enable_thinking,
        "reasoning_effort": request.reasoning_effort,
    }
    return {key: value for key, value in fields.items() if value is not None}


def engine_request(
    engine: ModelHost, request: ChatCompletionRequest, client: str | None = None
) -> GenerateRequest:
    """`client` is whom admission's fairness counts the request against."""
    check_model(engine, request.model)
    max_tokens = request.max_completion_tokens or request.max_tokens
    check_common(request, max_tokens)
    if request.top_logprobs is not None and not request.logprobs:
        raise InvalidRequest("`top_logprobs` requires `logprobs: true`.", param="top_logprobs")
    logprobs = (request.top_logprobs or 0) if request.logprobs else None
    return GenerateRequest(
        request_id=f"chatcmpl-{uuid.uuid4().hex}",
        sampling=sampling_options(request, max_tokens=max_tokens, logprobs=logprobs),
        messages=messages_for_template(request.messages),
        template_kwargs=dict(request.chat_template_kwargs or {}),
        reasoning_controls=reasoning_controls(request),
        **tool_fields(request),
        client=client,
        priority=request.priority,
    )


def _message(text: str, reasoning: list[str], collector: ToolCallCollector) -> ResponseMessage:
    tool_calls = collector.calls()
    message = ResponseMessage(content=text or None if tool_calls else text)
    if tool_calls:
        message.tool_calls = tool_calls
    if reasoning:
        message.reasoning = "".join(reasoning)
    return message


class ChatService:
    def __init__(
        self, engine: Engine, admission: AdmissionController, images: ImageLoader | None = None
    ) -> None:
        self._engine = engine
        self._admission = admission
        self._images = images or ImageLoader()

    async def _engine_request(
        self, request: ChatCompletionRequest, client: str | None
    ) -> GenerateRequest:
        """Checks first; images are fetched and decoded only for an otherwise valid request."""
        generate = engine_request(self._engine, request, client)
        generate.images = await self._images.load(request.messages, self._engine)
        return generate

    async def complete(
        self, request: ChatCompletionRequest, client: str | None = None
    ) -> ChatCompletion:
        generate = await self._engine_request(request, client)
        texts: dict[int, list[str]] = {i: [] for i in range(request.n)}
        logprobs: dict[int, list[protocol.TokenLogprob]] = {i: [] for i in range(request.n)}
        calls = {i: ToolCallCollector() for i in range(request.n)}
        reasoning: dict[int, list[str]] = {i: [] for i in range(request.n)}
        finish: dict[int, str | None] = {}
        completion_tokens = prompt_tokens = 0
        async for output in admitted(self._admission, self._engine, generate):
            prompt_tokens = output.prompt_tokens
            for delta in output.choices:
                texts[delta.index].append(delta.text)
                completion_tokens += delta.token_count
                if delta.logprobs:
                    logprobs[delta.index].extend(delta.logprobs)
                if delta.tool_calls:
                    calls[delta.index].add(delta.tool_calls)
                if delta.reasoning:
                    reasoning[delta.index].append(delta.reasoning)
                if delta.finish_reason is not None:
                    finish[delta.index] = delta.finish_reason
        wants_logprobs = generate.sampling.logprobs is not None
        choices = [
            Choice(
                index=index,
                message=_message("".join(parts), reasoning[index], calls[index]),
                logprobs=to_wire_logprobs(logprobs[index]) if wants_logprobs else None,
                finish_reason=finish.get(index),
            )
            for index, parts in texts.items()
        ]
        return ChatCompletion(
            id=generate.request_id,
            created=int(time.time()),
            model=request.model,
            choices=choices,
            usage=Usage(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens),
        )

    async def open_stream(
        self, request: ChatCompletionRequest, client: str | None = None
    ) -> AsyncIterator[bytes]:
        """Errors of the request are raised here, before any byte of the stream."""
        generate = await self._engine_request(request, client)
        writer = ChunkWriter(request, generate.request_id)
        return await open_sse(admitted(self._admission, self._engine, generate), writer)


class ChunkWriter:
    """Turns engine outputs into `chat.completion.chunk` SSE frames for one request."""

    def __init__(self, request: ChatCompletionRequest, request_id: str) -> None:
        self._id = request_id
        self._model = request.model
        self._created = int(time.time())
        self._include_usage = bool(request.stream_options and request.stream_options.include_usage)
        self._started: set[int] = set()
        self._prompt_tokens = 0
        self._completion_tokens = 0

    def frames(self, output: GenerateOutput) -> list[bytes]:
        self._prompt_tokens = output.prompt_tokens
        frames = []
        for delta in output.choices:
            self._completion_tokens += delta.token_count
            role = None
            if delta.index not in self._started:
                self._started.add(delta.index)
                role = "assistant"
            if not (
                delta.text or delta.reasoning or role or delta.finish_reason or delta.tool_calls
            ):
                continue
            tool_calls = wire_deltas(delta.tool_calls) if delta.tool_calls else None
            # The first chunk carries content "" with the role, unless it carries
            # reasoning or a tool call instead.
            first_content = role is not None and not (delta.reasoning or tool_calls)
            choice = ChunkChoice(
                index=delta.index,
                delta=Delta(
                    role=role,
                    content=delta.text if delta.text or first_content else None,
                    reasoning=delta.reasoning or None,
                    tool_calls=tool_calls,
                ),
                logprobs=to_wire_logprobs(delta.logprobs),
                finish_reason=delta.finish_reason,
            )
            chunk = ChatCompletionChunk(
                id=self._id, created=self._created, model=self._model, choices=[choice]
            )
            if self._include_usage:
                chunk.usage = None
            frames.append(frame(chunk))
        return frames

    def closing_frames(self) -> list[bytes]:
        if not self._include_usage:
            return []
        usage = Usage(
            self._prompt_tokens,
            self._completion_tokens,
            self._prompt_tokens + self._completion_tokens,
        )
        chunk = ChatCompletionChunk(
            id=self._id, created=self._created, model=self._model, choices=[], usage=usage
        )
        return [frame(chunk)]
