"""Wire types of POST /v1/chat/completions (request, response, stream chunks).

Requests are decoded once, strictly typed but tolerant of unknown fields: the
official SDKs send extras. Bounds live in `Meta` so that a violation becomes a
400 naming the field, before anything reaches the engine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from app.schemas.extensions import PromptLogprobs
from app.schemas.sampling import PositiveInt, SamplingFields
from app.schemas.tools import ResponseFormat, Tool, ToolCall, ToolCallDelta, ToolChoice

# ---------------------------------------------------------------- request


class TextPart(Struct, tag_field="type", tag="text"):
    text: str


class ImageURL(Struct):
    url: str  # http(s) URL, or a base64 `data:image/...;base64,` URI
    detail: Literal["auto", "low", "high"] = "auto"


class ImagePart(Struct, tag_field="type", tag="image_url"):
    image_url: ImageURL


ContentPart = TextPart
Content = str | list[ContentPart]
# Only user messages may carry images (as OpenAI has it); loading: app.services.images.service.
UserContent = str | list[TextPart | ImagePart]


class SystemMessage(Struct, tag_field="role", tag="system"):
    content: Content
    name: str | None = None


class DeveloperMessage(Struct, tag_field="role", tag="developer"):
    content: Content
    name: str | None = None


class UserMessage(Struct, tag_field="role", tag="user"):
    content: UserContent
    name: str | None = None


class AssistantMessage(Struct, tag_field="role", tag="assistant"):
    content: Content | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning: str | None = None  # a past turn's chain of thought, for templates that keep it


class ToolMessage(Struct, tag_field="role", tag="tool"):
    content: Content
    tool_call_id: str


Message = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage

# OpenAI's values (the openai package's ReasoningEffort); `max` is also GLM's own.
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class ChatCompletionRequest(SamplingFields, kw_only=True):
    messages: Annotated[list[Message], Meta(min_length=1)]
    max_tokens: PositiveInt | None = None
    # Wins over max_tokens when both are given (it bounds reasoning tokens too).
    max_completion_tokens: PositiveInt | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    tools: Annotated[list[Tool], Meta(max_length=128)] | None = None  # OpenAI's limit
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    # Reasoning controls. Their meaning (and allowed values) depends on the model's
    # family (engine.families): the engine validates them, and a bad value is a 400.
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: ReasoningEffort | None = None
    thinking: bool | None = None
    enable_thinking: bool | None = None
    # vLLM's chat extensions: the prompt's shape, and what the template sees.
    echo: bool = False  # prepend the last message's content when it is the answer's role
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    documents: list[dict[str, str]] | None = None
    # Refused unless left at vLLM's default (app.services.generation.extensions.REFUSED).
    chat_template: Any = UNSET
    media_io_kwargs: Any = UNSET
    mm_processor_kwargs: Any = UNSET
    include_reasoning: Any = UNSET
    return_prompt_text: Any = UNSET


# ---------------------------------------------------------------- response


class PromptTokensDetails(Struct):
    cached_tokens: int = 0  # served from the prefix cache


class CompletionTokensDetails(Struct):
    reasoning_tokens: int = 0  # chain of thought, counted in completion_tokens too


class Usage(Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = msgspec.field(default_factory=PromptTokensDetails)
    completion_tokens_details: CompletionTokensDetails = msgspec.field(
        default_factory=CompletionTokensDetails
    )


class TopLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Struct):
    content: list[TokenLogprob] | None
    refusal: None = None


class ResponseMessage(Struct, kw_only=True):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None
    tool_calls: list[ToolCall] | UnsetType = UNSET
    # Chain of thought, apart from `content`; omitted for models that did not reason.
    reasoning: str | UnsetType = UNSET


class Choice(Struct, kw_only=True):
    index: int
    message: ResponseMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None


class ChatCompletion(Struct, kw_only=True):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None
    # vLLM's, when the request asked for `prompt_logprobs` (never encoded otherwise): the
    # tokens of the prompt the chat template rendered.
    prompt_logprobs: PromptLogprobs | UnsetType | None = UNSET


# ---------------------------------------------------------------- stream


class Delta(Struct, omit_defaults=True):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None
    reasoning: str | None = None


class ChunkChoice(Struct, kw_only=True):
    index: int
    delta: Delta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(Struct, kw_only=True):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    # Present (null on all but the last chunk) only when usage was asked for; UNSET is
    # never encoded.
    usage: Usage | UnsetType | None = UNSET


chat_request_decoder = msgspec.json.Decoder(ChatCompletionRequest)
