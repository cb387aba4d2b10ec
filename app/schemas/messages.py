"""Wire types of Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens.

Decoded strictly (a block of an unknown `type`, a wrong type, a missing `max_tokens` are
400s naming the field) but tolerant of unknown fields, as the other endpoints are: the
Anthropic SDKs and agents send fields of newer API versions. Fields that change nothing
here (`cache_control`, `context_management`, `citations`, `service_tier`) are accepted
and have no effect; `thinking` and `output_config.effort` map onto the model family's
reasoning toggles (app.services.messages.service).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

# Anthropic's own rule for tool names (wider than OpenAI's 64).
ToolName = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")]
StopSequence = Annotated[str, Meta(min_length=1)]

# ---------------------------------------------------------------- content blocks


class TextBlock(Struct, tag_field="type", tag="text"):
    text: str
    cache_control: Any = None
    citations: Any = None


class Base64Source(Struct, tag_field="type", tag="base64"):
    media_type: str
    data: str


class URLSource(Struct, tag_field="type", tag="url"):
    url: str


class ImageBlock(Struct, tag_field="type", tag="image"):
    source: Base64Source | URLSource
    cache_control: Any = None


class ToolUseBlock(Struct, tag_field="type", tag="tool_use"):
    id: Annotated[str, Meta(min_length=1)]
    name: str
    input: dict[str, Any]
    cache_control: Any = None


class ToolResultBlock(Struct, tag_field="type", tag="tool_result"):
    tool_use_id: Annotated[str, Meta(min_length=1)]
    content: str | list[TextBlock | ImageBlock] = ""
    is_error: bool = False
    cache_control: Any = None


class ThinkingBlock(Struct, tag_field="type", tag="thinking"):
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(Struct, tag_field="type", tag="redacted_thinking"):
    data: str


Block = (
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock
)


class MessageParam(Struct):
    role: Literal["user", "assistant"]
    content: str | list[Block]


# ---------------------------------------------------------------- tools and controls


class ToolParam(Struct, kw_only=True):
    name: ToolName
    input_schema: dict[str, Any]
    description: str | None = None
    # Custom (client-run) tools only: Anthropic's server tools cannot run here.
    type: Literal["custom"] | None = None
    cache_control: Any = None


class ToolChoiceAuto(Struct, tag_field="type", tag="auto"):
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(Struct, tag_field="type", tag="any"):
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(Struct, tag_field="type", tag="tool"):
    name: str
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(Struct, tag_field="type", tag="none"):
    pass


ToolChoiceParam = ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone


class ThinkingEnabled(Struct, tag_field="type", tag="enabled"):
    # Anthropic's bounds: at least 1024, and less than `max_tokens` (checked where the
    # request is converted). The engine bounds reasoning by `max_tokens` only.
    budget_tokens: Annotated[int, Meta(ge=1024)]


class ThinkingDisabled(Struct, tag_field="type", tag="disabled"):
    pass


class ThinkingAdaptive(Struct, tag_field="type", tag="adaptive"):
    pass


ThinkingParam = ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive


class JsonSchemaOutput(Struct, tag_field="type", tag="json_schema"):
    schema: dict[str, Any]


class OutputConfig(Struct):
    effort: Literal["low", "medium", "high", "max"] | None = None
    format: JsonSchemaOutput | None = None


class Metadata(Struct):
    user_id: str | None = None


class CountTokensRequest(Struct, kw_only=True):
    model: str
    messages: Annotated[list[MessageParam], Meta(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: Annotated[list[ToolParam], Meta(max_length=128)] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None
    output_config: OutputConfig | None = None


class MessagesRequest(CountTokensRequest, kw_only=True):
    # Required, as Anthropic requires it; over the room left in the context it is
    # clamped to that room (the response says so in `X-Max-Tokens-Clamped`).
    max_tokens: Annotated[int, Meta(ge=1)]
    stop_sequences: Annotated[list[StopSequence], Meta(max_length=64)] | None = None
    stream: bool = False
    temperature: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    top_p: Annotated[float, Meta(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    metadata: Metadata | None = None
    # Newer API versions' fields, accepted and without effect here.
    context_management: Any = None
    service_tier: Any = None


# ---------------------------------------------------------------- response


class TextContent(Struct, tag_field="type", tag="text"):
    text: str


class ThinkingContent(Struct, tag_field="type", tag="thinking"):
    thinking: str
    signature: str = ""


class ToolUseContent(Struct, tag_field="type", tag="tool_use"):
    id: str
    name: str
    input: dict[str, Any]


ContentBlock = TextContent | ThinkingContent | ToolUseContent

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class MessagesUsage(Struct):
    input_tokens: int  # prompt tokens not served from the prefix cache
    output_tokens: int  # every generated token, thinking included
    cache_read_input_tokens: int = 0  # prompt tokens served from the prefix cache
    cache_creation_input_tokens: int = 0


class MessageResponse(Struct, kw_only=True):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: MessagesUsage


class CountTokensResponse(Struct):
    input_tokens: int


# ---------------------------------------------------------------- stream events


class MessageStart(Struct, tag_field="type", tag="message_start"):
    message: MessageResponse


class ContentBlockStart(Struct, tag_field="type", tag="content_block_start"):
    index: int
    content_block: ContentBlock


class TextDelta(Struct, tag_field="type", tag="text_delta"):
    text: str


class ThinkingDelta(Struct, tag_field="type", tag="thinking_delta"):
    thinking: str


class InputJsonDelta(Struct, tag_field="type", tag="input_json_delta"):
    partial_json: str


class ContentBlockDelta(Struct, tag_field="type", tag="content_block_delta"):
    index: int
    delta: TextDelta | ThinkingDelta | InputJsonDelta


class ContentBlockStop(Struct, tag_field="type", tag="content_block_stop"):
    index: int


class MessageDeltaBody(Struct):
    stop_reason: StopReason | None
    stop_sequence: str | None = None


class MessageDeltaUsage(Struct):
    """The final usage, with the same fields as the message's (Anthropic's cumulative
    `message_delta` usage)."""

    output_tokens: int
    input_tokens: int | UnsetType = UNSET
    cache_read_input_tokens: int | UnsetType = UNSET
    cache_creation_input_tokens: int | UnsetType = UNSET


class MessageDelta(Struct, tag_field="type", tag="message_delta"):
    delta: MessageDeltaBody
    usage: MessageDeltaUsage


class MessageStop(Struct, tag_field="type", tag="message_stop"):
    pass


class Ping(Struct, tag_field="type", tag="ping"):
    pass


StreamEvent = (
    MessageStart
    | ContentBlockStart
    | ContentBlockDelta
    | ContentBlockStop
    | MessageDelta
    | MessageStop
    | Ping
)


# ---------------------------------------------------------------- errors


class AnthropicErrorBody(Struct):
    type: str
    message: str


class AnthropicErrorEnvelope(Struct, tag_field="type", tag="error"):
    """Every non-2xx body of these routes, and the `error` event of a broken stream."""

    error: AnthropicErrorBody


messages_request_decoder = msgspec.json.Decoder(MessagesRequest)
count_tokens_request_decoder = msgspec.json.Decoder(CountTokensRequest)
