"""The Anthropic shapes of one generation: a `message` body, or its stream of events.

Content comes as blocks: the chain of thought as `thinking`, the answer as `text`,
each tool call as `tool_use`. Streamed, a block opens (`content_block_start`) when the
engine's output turns to a new kind, grows by deltas (`thinking_delta`, `text_delta`,
`input_json_delta`) and closes (`content_block_stop`) when the next opens or the
message ends; `message_delta` then carries `stop_reason` and usage, `message_stop`
ends it. Counting tokens is the skeleton's (app.services.generation.service).

Stop sequences stay in the engine's output (`include_stop_str_in_output`) so that
`stop_reason: stop_sequence` and `stop_sequence` can say which one ended it; they are
cut from the text here, and a streamed text holds back as many characters as the
longest stop sequence until it is known not to be one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import NoReturn

import msgspec

from app.errors.anthropic import AnthropicErrorEnvelope
from app.schemas.chat import Usage
from app.schemas.json import JsonObject
from app.schemas.messages import (
    ContentBlock,
    ContentBlockDelta,
    ContentBlockStart,
    ContentBlockStop,
    InputJsonDelta,
    MessageDelta,
    MessageDeltaBody,
    MessageDeltaUsage,
    MessageResponse,
    MessageStart,
    MessageStop,
    MessagesUsage,
    Ping,
    StopReason,
    StreamEvent,
    TextContent,
    TextDelta,
    ThinkingContent,
    ThinkingDelta,
    ToolUseContent,
)
from app.services.generation.service import ChoiceState, Generation
from app.services.generation.tools import ToolCallCollector
from app.services.messages.request import MessagesChatRequest
from engine.protocol import ChoiceDelta, GenerateOutput, ToolCallDelta

_encoder = msgspec.json.Encoder()


def event_frame(event: StreamEvent | AnthropicErrorEnvelope) -> bytes:
    """One SSE event as Anthropic sends it: `event: <type>` and the JSON `data`."""
    kind = str(event.__struct_config__.tag)
    return b"event: " + kind.encode() + b"\ndata: " + _encoder.encode(event) + b"\n\n"


def messages_usage(usage: Usage) -> MessagesUsage:
    cached = usage.prompt_tokens_details.cached_tokens
    return MessagesUsage(
        input_tokens=usage.prompt_tokens - cached,
        output_tokens=usage.completion_tokens,
        cache_read_input_tokens=cached,
    )


def tool_input(arguments: str) -> JsonObject:
    """A call's arguments as the object `tool_use.input` is; text that is not a JSON
    object (a model that wrote past its grammar) is kept under `_arguments`."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"_arguments": arguments}
    return value if isinstance(value, dict) else {"_arguments": arguments}


def cut_stop(text: str, finish: str | None, stops: list[str]) -> tuple[str, str | None]:
    """The text without the stop sequence that ended it, and that sequence."""
    if finish == "stop":
        for stop in stops:
            if text.endswith(stop):
                return text[: len(text) - len(stop)], stop
    return text, None


def stop_reason(finish: str | None, called: bool, stop_sequence: str | None) -> StopReason:
    if finish == "length":
        return "max_tokens"
    if called or finish == "tool_calls":
        return "tool_use"
    return "stop_sequence" if stop_sequence is not None else "end_turn"


@dataclass(slots=True)
class MessageState(ChoiceState):
    reasoning: list[str] = field(default_factory=list)
    calls: ToolCallCollector = field(default_factory=ToolCallCollector)


class MessagesGeneration(Generation[MessageState]):
    def __init__(self, request: MessagesChatRequest, request_id: str) -> None:
        super().__init__(request_id, request.model, include_usage=False)
        self._stops = request.stop_sequences
        self._hold = max((len(s) for s in self._stops), default=0)
        # The stream's state: the open block (kind, index), the text held back.
        self._started = False
        self._kind: str | None = None
        self._index = -1
        self._held = ""
        self._called = False
        self._finish: str | None = None

    # ------------------------------------------------------------ whole message

    def choice_states(self) -> dict[int, MessageState]:
        return {0: MessageState(0)}

    def state_of(
        self, states: dict[int, MessageState], position: int, delta: ChoiceDelta
    ) -> MessageState:
        return states[0]

    def absorb(self, state: MessageState, delta: ChoiceDelta) -> None:
        if delta.tool_calls:
            state.calls.add(delta.tool_calls)
        if delta.reasoning:
            state.reasoning.append(delta.reasoning)

    def body(self, states: dict[int, MessageState], usage: Usage) -> MessageResponse:
        state = states[0]
        text, stop_sequence = cut_stop("".join(state.text), state.finish_reason, self._stops)
        calls = state.calls.calls()
        content: list[ContentBlock] = []
        if state.reasoning:
            content.append(ThinkingContent("".join(state.reasoning)))
        if text:
            content.append(TextContent(text))
        for call in calls:
            content.append(
                ToolUseContent(call.id, call.function.name, tool_input(call.function.arguments))
            )
        return MessageResponse(
            id=self.id,
            model=self.model,
            content=content,
            stop_reason=stop_reason(state.finish_reason, bool(calls), stop_sequence),
            stop_sequence=stop_sequence,
            usage=messages_usage(usage),
        )

    # ------------------------------------------------------------ stream

    def delta_chunk(self, position: int, output: GenerateOutput, delta: ChoiceDelta) -> NoReturn:
        raise NotImplementedError("streamed through `frames`")  # pragma: no cover

    def usage_chunk(self, usage: Usage) -> NoReturn:
        raise NotImplementedError("streamed through `closing_frames`")  # pragma: no cover

    def frames(self, output: GenerateOutput, position: int = 0) -> list[bytes]:
        self._count_prompt(position, output)
        events: list[StreamEvent] = self._start_events()
        for delta in output.choices:
            self._completion_tokens += delta.token_count
            self._reasoning_tokens += delta.reasoning_token_count
            if delta.reasoning:
                events += self._open("thinking")
                events.append(ContentBlockDelta(self._index, ThinkingDelta(delta.reasoning)))
            if delta.text:
                events += self._text(delta.text)
            for call in delta.tool_calls or ():
                events += self._tool(call)
            if delta.finish_reason is not None:
                self._finish = delta.finish_reason
        return [event_frame(event) for event in events]

    def closing_frames(self) -> list[bytes]:
        events: list[StreamEvent] = self._start_events()
        text, stop_sequence = cut_stop(self._held, self._finish, self._stops)
        self._held = ""
        if text:
            events += self._open("text")
            events.append(ContentBlockDelta(self._index, TextDelta(text)))
        events += self._close()
        usage = messages_usage(self.usage())
        events.append(
            MessageDelta(
                MessageDeltaBody(
                    stop_reason(self._finish, self._called, stop_sequence), stop_sequence
                ),
                MessageDeltaUsage(
                    output_tokens=usage.output_tokens,
                    input_tokens=usage.input_tokens,
                    cache_read_input_tokens=usage.cache_read_input_tokens,
                    cache_creation_input_tokens=usage.cache_creation_input_tokens,
                ),
            )
        )
        events.append(MessageStop())
        return [event_frame(event) for event in events]

    def _start_events(self) -> list[StreamEvent]:
        if self._started:
            return []
        self._started = True
        usage = messages_usage(self.usage())
        usage.output_tokens = 0
        message = MessageResponse(
            id=self.id, model=self.model, content=[], stop_reason=None, usage=usage
        )
        return [MessageStart(message), Ping()]

    def _close(self) -> list[StreamEvent]:
        if self._kind is None:
            return []
        self._kind = None
        return [ContentBlockStop(self._index)]

    def _open(self, kind: str, block: ContentBlock | None = None) -> list[StreamEvent]:
        """Events that make `kind` the open block (a tool_use block always opens anew)."""
        if self._kind == kind and block is None:
            return []
        events = self._close()
        self._kind = kind
        self._index += 1
        if block is None:
            block = ThinkingContent("") if kind == "thinking" else TextContent("")
        events.append(ContentBlockStart(self._index, block))
        return events

    def _text(self, text: str) -> list[StreamEvent]:
        if self._hold:
            text = self._held + text
            text, self._held = text[: -self._hold], text[-self._hold :]
        if not text:
            return []
        return [*self._open("text"), ContentBlockDelta(self._index, TextDelta(text))]

    def _tool(self, call: ToolCallDelta) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if call.id is not None or call.name is not None:
            self._called = True
            if self._held:  # text held back for stop sequences ends before the call
                events += [
                    *self._open("text"),
                    ContentBlockDelta(self._index, TextDelta(self._held)),
                ]
                self._held = ""
            block = ToolUseContent(call.id or "", call.name or "", {})
            events += self._open("tool_use", block)
        if call.arguments:
            events.append(ContentBlockDelta(self._index, InputJsonDelta(call.arguments)))
        return events
