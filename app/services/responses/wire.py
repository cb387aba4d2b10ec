"""The Responses shapes of one generation: the Response object, or its stream of events.

The engine's output becomes output items in the order the model wrote them: a
`reasoning` item for the chain of thought, a `message` item (one `output_text` part)
for the answer, a `function_call` item per tool call. Streamed, an item opens
(`response.output_item.added`, and for text and reasoning `response.content_part.added`)
when the output turns to a new kind, grows by deltas (`response.output_text.delta`,
`response.reasoning_text.delta`, `response.function_call_arguments.delta`) and closes
(`.done` events, `response.output_item.done`) when the next opens or the response ends;
`response.created` and `response.in_progress` come first, `response.completed` (or
`response.incomplete`) last, every event numbered by `sequence_number`. A whole
response is built by the same steps, without the events, so both list the same items
under the same ids. Counting tokens is the skeleton's (app.services.generation.service).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NoReturn

import msgspec

from app.errors import APIError
from app.schemas.chat import Usage
from app.schemas.responses_output import (
    ArgumentsDelta,
    ArgumentsDone,
    ContentPartAdded,
    ContentPartDone,
    ErrorEvent,
    FunctionCallOutput,
    IncompleteDetails,
    InputTokensDetails,
    ItemStatus,
    OutputItem,
    OutputItemAdded,
    OutputItemDone,
    OutputMessage,
    OutputText,
    OutputTextDelta,
    OutputTextDone,
    OutputTokensDetails,
    ReasoningOutput,
    ReasoningTextDelta,
    ReasoningTextDone,
    ReasoningTextOut,
    Response,
    ResponseCompleted,
    ResponseCreated,
    ResponseErrorBody,
    ResponseFailed,
    ResponseIncomplete,
    ResponseInProgress,
    ResponseUsage,
    Status,
    StreamEvent,
    TextLogprob,
    TopLogprob,
)
from app.services.generation.service import ChoiceState, Generation
from app.services.responses.items import new_item_id
from app.services.responses.request import ResponsesChatRequest
from app.services.responses.sealing import ReasoningSeal
from engine import protocol
from engine.protocol import ChoiceDelta, GenerateOutput

_encoder = msgspec.json.Encoder()


def event_frame(event: StreamEvent) -> bytes:
    """One SSE event as OpenAI sends it: `event: <type>` and the JSON `data`."""
    kind = str(event.__struct_config__.tag)
    return b"event: " + kind.encode() + b"\ndata: " + _encoder.encode(event) + b"\n\n"


def response_usage(usage: Usage) -> ResponseUsage:
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=InputTokensDetails(usage.prompt_tokens_details.cached_tokens),
        output_tokens=usage.completion_tokens,
        output_tokens_details=OutputTokensDetails(usage.completion_tokens_details.reasoning_tokens),
        total_tokens=usage.total_tokens,
    )


def text_logprobs(entries: list[protocol.TokenLogprob]) -> list[TextLogprob]:
    return [
        TextLogprob(
            token=entry.token,
            logprob=entry.logprob,
            bytes=list(entry.token.encode()),
            top_logprobs=[
                TopLogprob(top.token, top.logprob, list(top.token.encode())) for top in entry.top
            ],
        )
        for entry in entries
    ]


@dataclass(slots=True)
class _Open:
    """The item being written: its kind, index in `output`, id, and what it holds."""

    kind: str  # "reasoning" | "message" | "function_call"
    index: int
    id: str
    parts: list[str]
    logprobs: list[protocol.TokenLogprob]
    call_id: str = ""
    name: str = ""
    call_index: int = -1


class ResponsesGeneration(Generation[ChoiceState]):
    def __init__(
        self, request: ResponsesChatRequest, request_id: str, seal: ReasoningSeal | None
    ) -> None:
        super().__init__(request_id, request.model, include_usage=False)
        self._request = request
        self._seal = seal
        self._logprobs = bool(request.logprobs)
        self.created_at = time.time()
        self.items: list[OutputItem] = []  # finished items, in output order
        self._open: _Open | None = None
        self._finish: str | None = None
        self._seq = 0
        self._started = False
        self.final: Response | None = None
        self._tail: list[StreamEvent] = []

    # ------------------------------------------------------------ the Response object

    def response(self, status: Status, output: list[OutputItem], usage: Usage | None) -> Response:
        source = self._request.source
        reasoning = source.reasoning
        return Response(
            id=self.id,
            created_at=self.created_at,
            status=status,
            instructions=source.instructions,
            max_output_tokens=source.max_output_tokens,
            max_tool_calls=source.max_tool_calls,
            model=self.model,
            output=output,
            parallel_tool_calls=source.parallel_tool_calls,
            previous_response_id=source.previous_response_id,
            reasoning={
                "effort": reasoning.effort if reasoning else None,
                "summary": (reasoning.summary or reasoning.generate_summary) if reasoning else None,
            },
            store=source.store,
            temperature=1.0 if source.temperature is None else source.temperature,
            text=_text_config(source),
            tool_choice=source.tool_choice if source.tool_choice is not None else "auto",
            tools=list(source.tools or ()),
            top_logprobs=source.top_logprobs,
            top_p=1.0 if source.top_p is None else source.top_p,
            truncation=source.truncation,
            usage=response_usage(usage) if usage is not None else None,
            user=source.user,
            metadata=dict(source.metadata or {}),
            prompt_cache_key=source.prompt_cache_key,
            background=source.background,
            tools_not_served=self._request.tools_not_served or msgspec.UNSET,
        )

    def finish(self) -> Response:
        """The finished Response (built once: the stream's last event and what is stored
        are the same object)."""
        if self.final is None:
            # The stream's events before the last: the items still open are closed.
            self._tail = self._start_events() + self._close()
            incomplete = self._finish == "length"
            response = self.response(
                "incomplete" if incomplete else "completed", list(self.items), self.usage()
            )
            response.completed_at = None if incomplete else time.time()
            if incomplete:
                response.incomplete_details = IncompleteDetails("max_output_tokens")
            self.final = response
        return self.final

    # ------------------------------------------------------------ whole response

    def choice_states(self) -> dict[int, ChoiceState]:
        return {0: ChoiceState(0)}

    def state_of(
        self, states: dict[int, ChoiceState], position: int, delta: ChoiceDelta
    ) -> ChoiceState:
        return states[0]

    def absorb(self, state: ChoiceState, delta: ChoiceDelta) -> None:
        self._delta(delta)

    def body(self, states: dict[int, ChoiceState], usage: Usage) -> Response:
        return self.finish()

    def delta_chunk(self, position: int, output: GenerateOutput, delta: ChoiceDelta) -> NoReturn:
        raise NotImplementedError("streamed through `frames`")  # pragma: no cover

    def usage_chunk(self, usage: Usage) -> NoReturn:
        raise NotImplementedError("streamed through `closing_frames`")  # pragma: no cover

    # ------------------------------------------------------------ stream

    def frames(self, output: GenerateOutput, position: int = 0) -> list[bytes]:
        self._count_prompt(position, output)
        events = self._start_events()
        for delta in output.choices:
            self._completion_tokens += delta.token_count
            self._reasoning_tokens += delta.reasoning_token_count
            events += self._delta(delta)
        return [event_frame(event) for event in events]

    def closing_frames(self) -> list[bytes]:
        final = self.finish()
        events = self._tail
        kind = ResponseIncomplete if final.status == "incomplete" else ResponseCompleted
        events.append(kind(final, self._next()))
        return [event_frame(event) for event in events]

    def error_frames(self, error: APIError) -> bytes:
        """The end of a stream that broke: an `error` event, then `response.failed`."""
        events: list[StreamEvent] = self._start_events()
        events.append(ErrorEvent(error.code, error.message, error.param, self._next()))
        failed = self.response("failed", list(self.items), self.usage())
        failed.error = ResponseErrorBody(error.code or error.error_type, error.message)
        events.append(ResponseFailed(failed, self._next()))
        return b"".join(event_frame(event) for event in events)

    def _next(self) -> int:
        self._seq += 1
        return self._seq - 1

    def _start_events(self) -> list[StreamEvent]:
        if self._started:
            return []
        self._started = True
        return [
            ResponseCreated(self.response("in_progress", [], None), self._next()),
            ResponseInProgress(self.response("in_progress", [], None), self._next()),
        ]

    # ------------------------------------------------------------ items

    def _delta(self, delta: ChoiceDelta) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if delta.reasoning:
            events += self._grow("reasoning", delta.reasoning, None)
        if delta.text:
            events += self._grow("message", delta.text, delta.logprobs)
        for call in delta.tool_calls or ():
            events += self._call(call)
        if delta.finish_reason is not None:
            self._finish = delta.finish_reason
        return events

    def _grow(
        self, kind: str, text: str, logprobs: list[protocol.TokenLogprob] | None
    ) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        item = self._open
        if item is None or item.kind != kind:
            events += self._close()
            item = self._begin(kind, new_item_id("rs" if kind == "reasoning" else "msg"))
            events += self._added(item)
        item.parts.append(text)
        if kind == "reasoning":
            events.append(ReasoningTextDelta(item.id, item.index, 0, text, self._next()))
        else:
            wire = text_logprobs(logprobs) if logprobs and self._logprobs else []
            if logprobs:
                item.logprobs.extend(logprobs)
            events.append(OutputTextDelta(item.id, item.index, 0, text, wire, self._next()))
        return events

    def _call(self, call: protocol.ToolCallDelta) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        item = self._open
        if item is None or item.kind != "function_call" or item.call_index != call.index:
            events += self._close()
            item = self._begin("function_call", new_item_id("fc"))
            item.call_index = call.index
            item.call_id = call.id or new_item_id("call")
            item.name = call.name or ""
            events += self._added(item)
        if call.arguments:
            item.parts.append(call.arguments)
            events.append(ArgumentsDelta(item.id, item.index, call.arguments, self._next()))
        return events

    def _begin(self, kind: str, item_id: str) -> _Open:
        self._open = _Open(kind, len(self.items), item_id, [], [])
        return self._open

    def _added(self, item: _Open) -> list[StreamEvent]:
        events: list[StreamEvent] = [
            OutputItemAdded(item.index, self._item(item, "in_progress"), self._next())
        ]
        if item.kind == "message":
            events.append(
                ContentPartAdded(item.id, item.index, 0, OutputText(text=""), self._next())
            )
        elif item.kind == "reasoning":
            events.append(
                ContentPartAdded(item.id, item.index, 0, ReasoningTextOut(""), self._next())
            )
        return events

    def _close(self) -> list[StreamEvent]:
        item = self._open
        if item is None:
            return []
        self._open = None
        text = "".join(item.parts)
        status: ItemStatus = (
            "incomplete" if self._finish == "length" and item.kind == "message" else "completed"
        )
        done = self._item(item, status)
        self.items.append(done)
        events: list[StreamEvent] = []
        if item.kind == "message":
            assert isinstance(done, OutputMessage)
            part = done.content[0]
            events.append(
                OutputTextDone(item.id, item.index, 0, text, part.logprobs or [], self._next())
            )
            events.append(ContentPartDone(item.id, item.index, 0, part, self._next()))
        elif item.kind == "reasoning":
            events.append(ReasoningTextDone(item.id, item.index, 0, text, self._next()))
            events.append(
                ContentPartDone(item.id, item.index, 0, ReasoningTextOut(text), self._next())
            )
        else:
            events.append(ArgumentsDone(item.id, item.index, item.name, text, self._next()))
        events.append(OutputItemDone(item.index, done, self._next()))
        return events

    def _item(self, item: _Open, status: ItemStatus) -> OutputItem:
        """The item as output lists it: in progress (empty, as `added` shows it) or done."""
        done = status != "in_progress"
        text = "".join(item.parts) if done else ""
        if item.kind == "message":
            part = OutputText(text=text)
            if self._logprobs and done:
                part.logprobs = text_logprobs(item.logprobs)
            return OutputMessage(id=item.id, status=status, content=[part] if done else [])
        if item.kind == "reasoning":
            reasoning = ReasoningOutput(id=item.id, status=status)
            if done:
                reasoning.content = [ReasoningTextOut(text)]
                if self._request.seal_reasoning and self._seal is not None:
                    reasoning.encrypted_content = self._seal.seal(self._request.owner, text)
            return reasoning
        namespace, name = self._request.namespaces.get(item.name, (None, item.name))
        call = FunctionCallOutput(
            id=item.id, call_id=item.call_id, name=name, arguments=text, status=status
        )
        if namespace is not None:
            call.namespace = namespace
        return call


def _text_config(source: Any) -> dict[str, Any]:
    text = source.text
    if text is None or text.format is None:
        config: dict[str, Any] = {"format": {"type": "text"}}
    else:
        config = {"format": msgspec.to_builtins(text.format)}
    if text is not None and text.verbosity is not None:
        config["verbosity"] = text.verbosity
    return config
