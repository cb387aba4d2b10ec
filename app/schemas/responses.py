"""Wire types of OpenAI's Responses API: the request of POST /v1/responses and its items.

`input` items and `tools` are decoded in two steps: the body with each item (or tool)
left as its raw JSON, then each item by its `type` (app.services.responses.items). A
message item may come without `type` (OpenAI's "easy" input message), and a tool may
be one of OpenAI's hosted tools that are not served here: both rule out decoding them
as one tagged union. Raw items are slices of the body, not objects the garbage
collector walks, so each step is linear in the bytes; a wrong type or an unknown item
type is a 400 naming the item (`input[2].type`).

The response side (the Response object, output items, stream events) is
app.schemas.responses_output.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from app.schemas.chat import ReasoningEffort
from app.schemas.sampling import Temperature, TopP, check_model_name
from app.schemas.tools import FunctionName

MetadataKey = Annotated[str, Meta(max_length=64)]
MetadataValue = Annotated[str, Meta(max_length=512)]
Include = Literal[
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    # Outputs of hosted tools, which are not served here: accepted, nothing to include.
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
]

# ---------------------------------------------------------------- content parts


class InputText(Struct, tag_field="type", tag="input_text"):
    text: str


class InputImage(Struct, tag_field="type", tag="input_image"):
    # An http(s) URL or a base64 `data:` URI; uploaded files (`file_id`) are not served.
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high", "original"] = "auto"


class InputFile(Struct, tag_field="type", tag="input_file"):
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None


class OutputTextPart(Struct, tag_field="type", tag="output_text"):
    """An assistant message's text, as a client sends a past turn back."""

    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: Any = None


class RefusalPart(Struct, tag_field="type", tag="refusal"):
    refusal: str


InputPart = InputText | InputImage | InputFile | OutputTextPart | RefusalPart

# ---------------------------------------------------------------- input items


class MessageItem(Struct, tag_field="type", tag="message", kw_only=True):
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[InputPart]
    id: str | None = None
    status: str | None = None
    phase: str | None = None


class FunctionCallItem(Struct, tag_field="type", tag="function_call", kw_only=True):
    call_id: Annotated[str, Meta(min_length=1)]
    name: str
    arguments: str
    namespace: str | None = None
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(Struct, tag_field="type", tag="function_call_output", kw_only=True):
    call_id: Annotated[str, Meta(min_length=1)]
    output: str | list[InputPart]
    id: str | None = None
    status: str | None = None


class ReasoningText(Struct, tag_field="type", tag="reasoning_text"):
    text: str


class SummaryText(Struct, tag_field="type", tag="summary_text"):
    text: str


class ReasoningItem(Struct, tag_field="type", tag="reasoning", kw_only=True):
    summary: list[SummaryText] = msgspec.field(default_factory=list)
    content: list[ReasoningText] | None = None
    # What this server sealed (app.services.responses.sealing), sent back as it was.
    encrypted_content: str | None = None
    id: str | None = None
    status: str | None = None


class ItemReference(Struct, tag_field="type", tag="item_reference", kw_only=True):
    id: str


InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem


class ItemKind(Struct):
    """What decides how an item (or tool) decodes: its `type`, or a message's `role`."""

    type: Any = None
    role: Any = None


# ---------------------------------------------------------------- tools and controls


class FunctionTool(Struct, tag_field="type", tag="function", kw_only=True):
    name: FunctionName
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class NamespaceTool(Struct, tag_field="type", tag="namespace", kw_only=True):
    """A named group of function tools; the model sees each as `namespace.name`."""

    name: FunctionName
    tools: Annotated[list[FunctionTool], Meta(max_length=128)]
    description: str | None = None


class ToolChoiceFunction(Struct, tag_field="type", tag="function", kw_only=True):
    name: str
    namespace: str | None = None


class ToolChoiceAllowed(Struct, tag_field="type", tag="allowed_tools", kw_only=True):
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]]


class TextFormatText(Struct, tag_field="type", tag="text"):
    pass


class TextFormatJsonObject(Struct, tag_field="type", tag="json_object"):
    pass


class TextFormatJsonSchema(Struct, tag_field="type", tag="json_schema", kw_only=True):
    schema: dict[str, Any]
    name: Annotated[str, Meta(min_length=1, max_length=64)] = "response"
    description: str | None = None
    strict: bool | None = None


TextFormat = TextFormatText | TextFormatJsonObject | TextFormatJsonSchema


class TextConfig(Struct, kw_only=True):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(Struct, kw_only=True):
    effort: ReasoningEffort | None = None
    # Accepted; no summarizer runs here: a reasoning item carries the chain of thought
    # itself (`content`), its `summary` is empty.
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesRequest(Struct, kw_only=True):
    model: str
    input: str | Annotated[list[msgspec.Raw], Meta(max_length=100_000)] = ""
    instructions: str | None = None
    tools: Annotated[list[msgspec.Raw], Meta(max_length=256)] | None = None
    # "none" | "auto" | "required" | an object naming a function, allowed tools or a
    # hosted tool (decoded in app.services.responses.tools).
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: Annotated[int, Meta(ge=1)] | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    metadata: Annotated[dict[MetadataKey, MetadataValue], Meta(max_length=16)] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    prompt_cache_key: str | None = None
    store: bool = True
    previous_response_id: str | None = None
    include: Annotated[list[Include], Meta(max_length=16)] | None = None
    stream: bool = False
    background: bool = False
    service_tier: str | None = None
    max_tool_calls: Annotated[int, Meta(ge=1)] | None = None
    # Refused when set: a conversation object or a stored prompt are not served here.
    conversation: Any = None
    prompt: Any = None
    # vLLM's sampling extras, as `vllm serve` takes them on this route.
    top_k: Annotated[int, Meta(ge=-1)] | None = None
    seed: int | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        check_model_name(self.model)


responses_request_decoder = msgspec.json.Decoder(ResponsesRequest)
