"""Chat completions: a decoded request -> an engine request -> a response or an SSE stream."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from app.errors import InvalidRequest, ModelNotFound, to_api_error
from app.schemas.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    Content,
    Delta,
    Message,
    ResponseMessage,
    Usage,
)
from app.sse import DONE, error_frame, frame
from engine.protocol import Engine, GenerateOutput, GenerateRequest, SamplingOptions

log = logging.getLogger("lilac.chat")


def _text(content: Content | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content)


def messages_for_template(messages: list[Message]) -> list[dict[str, Any]]:
    """Wire messages -> the plain dicts chat templates expect (`developer` reads as `system`)."""
    rendered = []
    for message in messages:
        role = message.__struct_config__.tag  # the `role` tag msgspec decoded it by
        if role == "developer":
            role = "system"
        item: dict[str, Any] = {"role": role, "content": _text(message.content)}
        tool_call_id = getattr(message, "tool_call_id", None)
        if tool_call_id is not None:
            item["tool_call_id"] = tool_call_id
        reasoning = getattr(message, "reasoning", None)
        if reasoning is not None:
            item["reasoning"] = reasoning
        rendered.append(item)
    return rendered


def sampling_options(request: ChatCompletionRequest) -> SamplingOptions:
    stop = request.stop
    if stop is None:
        stop_list: list[str] = []
    elif isinstance(stop, str):
        stop_list = [stop]
    else:
        stop_list = list(stop)
    max_tokens = request.max_completion_tokens or request.max_tokens
    return SamplingOptions(
        max_tokens=max_tokens,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        seed=request.seed,
        stop=stop_list,
        n=request.n,
        ignore_eos=request.ignore_eos,
    )


def reasoning_controls(request: ChatCompletionRequest) -> dict[str, Any]:
    """The top-level reasoning fields the client set; the engine's family reads them."""
    fields = {
        "thinking": request.thinking,
        "enable_thinking": request.enable_thinking,
        "reasoning_effort": request.reasoning_effort,
    }
    return {key: value for key, value in fields.items() if value is not None}


class ChatService:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def _engine_request(self, request: ChatCompletionRequest) -> GenerateRequest:
        if request.model not in self._engine.model.served_names:
            raise ModelNotFound(request.model)
        if request.stream_options is not None and not request.stream:
            raise InvalidRequest(
                "`stream_options` is only allowed when `stream` is true.", param="stream_options"
            )
        return GenerateRequest(
            request_id=f"chatcmpl-{uuid.uuid4().hex}",
            sampling=sampling_options(request),
            messages=messages_for_template(request.messages),
            template_kwargs=dict(request.chat_template_kwargs or {}),
            reasoning_controls=reasoning_controls(request),
        )

    async def complete(self, request: ChatCompletionRequest) -> ChatCompletion:
        engine_request = self._engine_request(request)
        texts: dict[int, list[str]] = {}
        reasoning: dict[int, list[str]] = {}
        finish: dict[int, str | None] = {}
        completion_tokens = 0
        prompt_tokens = 0
        async for output in self._engine.generate(engine_request):
            prompt_tokens = output.prompt_tokens
            for delta in output.choices:
                texts.setdefault(delta.index, []).append(delta.text)
                if delta.reasoning:
                    reasoning.setdefault(delta.index, []).append(delta.reasoning)
                completion_tokens += delta.token_count
                if delta.finish_reason is not None:
                    finish[delta.index] = delta.finish_reason
        choices = [
            Choice(
                index=index,
                message=_message("".join(parts), reasoning.get(index)),
                finish_reason=finish.get(index),
            )
            for index, parts in sorted(texts.items())
        ]
        return ChatCompletion(
            id=engine_request.request_id,
            created=int(time.time()),
            model=request.model,
            choices=choices,
            usage=Usage(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens),
        )

    async def open_stream(self, request: ChatCompletionRequest) -> AsyncIterator[bytes]:
        """Start generating and wait for the first output, so that any error of the request
        is raised here (a 400 before the stream) rather than inside the stream."""
        engine_request = self._engine_request(request)
        outputs = self._engine.generate(engine_request)
        try:
            first = await anext(outputs)
        except StopAsyncIteration:
            first = None
        except BaseException:
            await outputs.aclose()
            raise
        return _StreamWriter(request, engine_request.request_id).frames(first, outputs)


def _message(content: str, reasoning: list[str] | None) -> ResponseMessage:
    message = ResponseMessage(content=content)
    if reasoning:
        message.reasoning = "".join(reasoning)
    return message


class _StreamWriter:
    """Turns engine outputs into `chat.completion.chunk` SSE frames for one request."""

    def __init__(self, request: ChatCompletionRequest, request_id: str) -> None:
        self._id = request_id
        self._model = request.model
        self._created = int(time.time())
        self._include_usage = bool(request.stream_options and request.stream_options.include_usage)
        self._started: set[int] = set()
        self._prompt_tokens = 0
        self._completion_tokens = 0

    async def frames(
        self, first: GenerateOutput | None, outputs: AsyncIterator[GenerateOutput]
    ) -> AsyncIterator[bytes]:
        try:
            if first is not None:
                for chunk in self._chunks(first):
                    yield chunk
                async for output in outputs:
                    for chunk in self._chunks(output):
                        yield chunk
            if self._include_usage:
                yield self._usage_frame()
        except Exception as exc:  # after the stream started: an error event, then [DONE]
            yield error_frame(to_api_error(exc).body())
        finally:
            await outputs.aclose()  # type: ignore[attr-defined]
        yield DONE

    def _chunks(self, output: GenerateOutput) -> list[bytes]:
        self._prompt_tokens = output.prompt_tokens
        frames = []
        for delta in output.choices:
            self._completion_tokens += delta.token_count
            role = None
            if delta.index not in self._started:
                self._started.add(delta.index)
                role = "assistant"
            if not (delta.text or delta.reasoning or role or delta.finish_reason):
                continue
            # The first chunk carries content "" with the role, unless it carries reasoning.
            first_content = role is not None and not delta.reasoning
            choice = ChunkChoice(
                index=delta.index,
                delta=Delta(
                    role=role,
                    content=delta.text if delta.text or first_content else None,
                    reasoning=delta.reasoning or None,
                ),
                finish_reason=delta.finish_reason,
            )
            chunk = ChatCompletionChunk(
                id=self._id, created=self._created, model=self._model, choices=[choice]
            )
            if self._include_usage:
                chunk.usage = None
            frames.append(frame(chunk))
        return frames

    def _usage_frame(self) -> bytes:
        usage = Usage(
            self._prompt_tokens,
            self._completion_tokens,
            self._prompt_tokens + self._completion_tokens,
        )
        chunk = ChatCompletionChunk(
            id=self._id, created=self._created, model=self._model, choices=[], usage=usage
        )
        return frame(chunk)
