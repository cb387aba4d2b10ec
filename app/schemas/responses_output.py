"""Wire types of what POST /v1/responses returns: the Response object, its output items
and usage, and the events of a streamed response, as OpenAI sends them (the `openai`
package's `Response` and `ResponseStreamEvent` parse them; `output_text` works on it).

Stream events are `event: <type>` plus the JSON `data`, each with a `sequence_number`
counting from 0 (app.services.responses.wire)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType

Status = Literal["completed", "incomplete", "in_progress", "failed", "queued", "cancelled"]
ItemStatus = Literal["in_progress", "completed", "incomplete"]

# ---------------------------------------------------------------- output items


class TopLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int]


class TextLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class OutputText(Struct, tag_field="type", tag="output_text", kw_only=True):
    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: list[TextLogprob] | UnsetType = UNSET


class OutputMessage(Struct, tag_field="type", tag="message", kw_only=True):
    id: str
    status: ItemStatus
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class FunctionCallOutput(Struct, tag_field="type", tag="function_call", kw_only=True):
    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus
    namespace: str | UnsetType = UNSET


class ReasoningTextOut(Struct, tag_field="type", tag="reasoning_text"):
    text: str


class SummaryTextOut(Struct, tag_field="type", tag="summary_text"):
    text: str


class ReasoningOutput(Struct, tag_field="type", tag="reasoning", kw_only=True):
    id: str
    summary: list[SummaryTextOut] = msgspec.field(default_factory=list)
    content: list[ReasoningTextOut] | UnsetType = UNSET
    encrypted_content: str | UnsetType = UNSET
    status: ItemStatus = "completed"


OutputItem = OutputMessage | FunctionCallOutput | ReasoningOutput

# ---------------------------------------------------------------- the Response


class InputTokensDetails(Struct):
    cached_tokens: int = 0


class OutputTokensDetails(Struct):
    reasoning_tokens: int = 0


class ResponseUsage(Struct, kw_only=True):
    input_tokens: int  # every prompt token, those served from the prefix cache included
    input_tokens_details: InputTokensDetails
    output_tokens: int  # every generated token, reasoning included
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(Struct):
    reason: Literal["max_output_tokens", "content_filter"]


class ResponseErrorBody(Struct):
    code: str
    message: str


class Response(Struct, kw_only=True):
    id: str
    object: Literal["response"] = "response"
    created_at: float
    completed_at: float | None = None
    status: Status
    error: ResponseErrorBody | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None = None
    reasoning: dict[str, Any] = msgspec.field(default_factory=dict)
    service_tier: str = "default"
    store: bool
    temperature: float | None = None
    text: dict[str, Any] = msgspec.field(default_factory=dict)
    tool_choice: Any = "auto"
    tools: list[Any] = msgspec.field(default_factory=list)  # the request's, as sent
    top_logprobs: int | None = None
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    prompt_cache_key: str | None = None
    background: bool = False
    # This server's: the request's tools that were not offered to the model (hosted
    # tools it cannot run), by type; absent when every tool was served.
    tools_not_served: list[str] | UnsetType = UNSET


# ---------------------------------------------------------------- stream events


class ResponseCreated(Struct, tag_field="type", tag="response.created"):
    response: Response
    sequence_number: int


class ResponseInProgress(Struct, tag_field="type", tag="response.in_progress"):
    response: Response
    sequence_number: int


class ResponseCompleted(Struct, tag_field="type", tag="response.completed"):
    response: Response
    sequence_number: int


class ResponseIncomplete(Struct, tag_field="type", tag="response.incomplete"):
    response: Response
    sequence_number: int


class ResponseFailed(Struct, tag_field="type", tag="response.failed"):
    response: Response
    sequence_number: int


class OutputItemAdded(Struct, tag_field="type", tag="response.output_item.added"):
    output_index: int
    item: OutputItem
    sequence_number: int


class OutputItemDone(Struct, tag_field="type", tag="response.output_item.done"):
    output_index: int
    item: OutputItem
    sequence_number: int


class ContentPartAdded(Struct, tag_field="type", tag="response.content_part.added"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | ReasoningTextOut
    sequence_number: int


class ContentPartDone(Struct, tag_field="type", tag="response.content_part.done"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | ReasoningTextOut
    sequence_number: int


class OutputTextDelta(Struct, tag_field="type", tag="response.output_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[TextLogprob]
    sequence_number: int


class OutputTextDone(Struct, tag_field="type", tag="response.output_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[TextLogprob]
    sequence_number: int


class ReasoningTextDelta(Struct, tag_field="type", tag="response.reasoning_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    sequence_number: int


class ReasoningTextDone(Struct, tag_field="type", tag="response.reasoning_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str
    sequence_number: int


class ArgumentsDelta(Struct, tag_field="type", tag="response.function_call_arguments.delta"):
    item_id: str
    output_index: int
    delta: str
    sequence_number: int


class ArgumentsDone(Struct, tag_field="type", tag="response.function_call_arguments.done"):
    item_id: str
    output_index: int
    name: str
    arguments: str
    sequence_number: int


class ErrorEvent(Struct, tag_field="type", tag="error"):
    code: str | None
    message: str
    param: str | None
    sequence_number: int


StreamEvent = (
    ResponseCreated
    | ResponseInProgress
    | ResponseCompleted
    | ResponseIncomplete
    | ResponseFailed
    | OutputItemAdded
    | OutputItemDone
    | ContentPartAdded
    | ContentPartDone
    | OutputTextDelta
    | OutputTextDone
    | ReasoningTextDelta
    | ReasoningTextDone
    | ArgumentsDelta
    | ArgumentsDone
    | ErrorEvent
)
