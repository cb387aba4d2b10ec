"""A Responses request as the chat request the generation skeleton runs.

`instructions` and the items (a stored chain's first, then `input`) become chat
messages (app.services.responses.items), `tools` and `tool_choice` chat's
(app.services.responses.tools), `text.format` chat's `response_format` (the same
structured-output path and grammar), `reasoning.effort` chat's `reasoning_effort` (the
family's toggles read it), `max_output_tokens` `max_completion_tokens`, `top_logprobs`
chat's logprobs. Templates, tool parsing, images, admission, limits and metering are
then chat's.
"""

from __future__ import annotations

from typing import Any

from msgspec import field

from app.errors import InvalidRequest
from app.schemas.chat import ChatCompletionRequest
from app.schemas.responses import (
    InputItem,
    ResponsesRequest,
    TextFormatJsonObject,
    TextFormatJsonSchema,
)
from app.schemas.tools import (
    JsonObjectFormat,
    JsonSchemaFormat,
    JsonSchemaSpec,
    NamedToolChoice,
    ResponseFormat,
    ToolChoice,
)
from app.services.responses.items import Opener, chat_messages, decode_items, listed_item
from app.services.responses.tools import ServedTools, served_tools, tool_choice

ENCRYPTED_REASONING = "reasoning.encrypted_content"
OUTPUT_LOGPROBS = "message.output_text.logprobs"


class ResponsesChatRequest(ChatCompletionRequest, kw_only=True):
    """The chat request of a Responses request, with what the Responses side needs
    back: the request itself (echoed in the Response), whose data it is, the namespaced
    functions, the tools not served, and the input items as they are stored."""

    source: ResponsesRequest
    owner: str
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)
    tools_not_served: list[str] = field(default_factory=list)
    input_items: list[dict[str, Any]] = field(default_factory=list)
    seal_reasoning: bool = False
    truncate: bool = False
    # Where the finished response is saved (None: nowhere); set by the route.
    response_store: Any = None
    # A background response's id and creation time, fixed when it was queued (None: the
    # response is named when it runs).
    response_id: str | None = None
    created_at: float | None = None


def check_served(request: ResponsesRequest) -> None:
    """The request fields this server refuses rather than ignores."""
    if request.background and not request.store:
        raise InvalidRequest(
            "A background response is stored to be read later: `background: true` "
            "requires `store: true`.",
            param="background",
        )
    for name in ("conversation", "prompt"):
        if getattr(request, name) is not None:
            raise InvalidRequest(
                f"`{name}` is not served here; send the input itself (and "
                "`previous_response_id` to continue a stored response).",
                param=name,
            )


def chat_request(
    request: ResponsesRequest,
    owner: str,
    open_sealed: Opener,
    history: list[InputItem] | None = None,
) -> ResponsesChatRequest:
    """`history`: the items of the stored chain `previous_response_id` names, oldest
    first (inputs and outputs of each response)."""
    check_served(request)
    items = decode_items(request.input)
    located = [(item, "previous_response_id") for item in history or ()]
    located += [(item, f"input[{index}]") for index, item in enumerate(items)]
    if not located and not request.instructions:
        raise InvalidRequest("`input` is empty.", param="input")
    served = served_tools(request.tools)
    choice = tool_choice(request.tool_choice, served)
    include = set(request.include or ())
    wants_logprobs = request.top_logprobs is not None or OUTPUT_LOGPROBS in include
    return ResponsesChatRequest(
        model=request.model,
        messages=chat_messages(request.instructions, located, open_sealed),
        max_completion_tokens=request.max_output_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        seed=request.seed,
        stream=request.stream,
        user=request.user or request.safety_identifier,
        priority=request.priority,
        logprobs=wants_logprobs,
        top_logprobs=(request.top_logprobs or 0) if wants_logprobs else None,
        tools=served.tools or None,
        tool_choice=_offered(choice, served),
        parallel_tool_calls=request.parallel_tool_calls,
        response_format=_response_format(request),
        reasoning_effort=request.reasoning.effort if request.reasoning is not None else None,
        source=request,
        owner=owner,
        namespaces=served.namespaces,
        tools_not_served=served.not_served,
        input_items=[listed_item(item) for item in items],
        seal_reasoning=ENCRYPTED_REASONING in include,
        truncate=request.truncation == "auto",
    )


def _offered(choice: ToolChoice | None, served: ServedTools) -> ToolChoice | None:
    """`tool_choice` over the served tools: with none served (hosted tools only),
    `auto` offers nothing, and `required` would force a tool that is not served."""
    if served.tools or choice in (None, "none", "auto") or isinstance(choice, NamedToolChoice):
        return choice if served.tools or choice != "auto" else None
    names = ", ".join(f"`{kind}`" for kind in served.not_served) or "no tool"
    raise InvalidRequest(
        f"`tool_choice: required` would force one of {names}, and none is served here.",
        param="tool_choice",
        code="tool_not_served",
    )


def _response_format(request: ResponsesRequest) -> ResponseFormat | None:
    text_format = request.text.format if request.text is not None else None
    if isinstance(text_format, TextFormatJsonObject):
        return JsonObjectFormat()
    if isinstance(text_format, TextFormatJsonSchema):
        spec = JsonSchemaSpec(
            name=text_format.name,
            description=text_format.description,
            schema=text_format.schema,
            strict=text_format.strict,
        )
        return JsonSchemaFormat(spec)
    return None


def stored_items(*documents: bytes) -> list[InputItem]:
    """Items of stored JSON arrays (a stored response's input and output items)."""
    items: list[InputItem] = []
    for document in documents:
        items += decode_items(document, "previous_response_id")
    return items
