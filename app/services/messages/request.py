"""An Anthropic Messages request as the chat request the generation skeleton runs.

Messages and chat differ in shape, not in what the engine does: system blocks become a
system message, `tool_result` blocks tool messages, `tool_use` blocks an assistant's
tool calls, `thinking` blocks its past reasoning, `image` blocks image parts; tools and
`tool_choice` become their OpenAI forms; `thinking` and `output_config.effort` become
the reasoning toggles chat has (`thinking`, `reasoning_effort`), which the model's
family reads. Everything after that (templates, tool parsing, images, admission,
limits, metering) is chat's.
"""

from __future__ import annotations

import json
from typing import Any

from msgspec import field

from app.errors import InvalidRequest
from app.schemas.chat import (
    AssistantMessage,
    ChatCompletionRequest,
    ImagePart,
    ImageURL,
    Message,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)
from app.schemas.messages import (
    Base64Source,
    Block,
    CountTokensRequest,
    ImageBlock,
    MessageParam,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingAdaptive,
    ThinkingBlock,
    ThinkingDisabled,
    ThinkingEnabled,
    ToolChoiceAny,
    ToolChoiceAuto,
    ToolChoiceNone,
    ToolChoiceParam,
    ToolChoiceTool,
    ToolResultBlock,
    ToolUseBlock,
)
from app.schemas.tools import (
    FunctionCall,
    FunctionDefinition,
    JsonSchemaFormat,
    JsonSchemaSpec,
    NamedFunction,
    NamedToolChoice,
    Tool,
    ToolCall,
    ToolChoice,
)


class MessagesChatRequest(ChatCompletionRequest, kw_only=True):
    """The chat request of a Messages request, with what the Anthropic side needs back:
    the stop sequences (to tell `stop_sequence` from `end_turn`), and the `max_tokens`
    it ran with when that was clamped to the room left in the context."""

    stop_sequences: list[str] = field(default_factory=list)
    requested_max_tokens: int = 0
    clamped_max_tokens: int | None = None


def chat_request(request: MessagesRequest) -> MessagesChatRequest:
    check_tools(request)
    _check_thinking_budget(request)
    stops = list(request.stop_sequences or ())
    user = request.metadata.user_id if request.metadata is not None else None
    tool_choice, parallel = _tool_choice(request.tool_choice)
    return MessagesChatRequest(
        model=request.model,
        messages=chat_messages(request),
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        # The stop string stays in the output, so that which one ended it can be told;
        # the Anthropic side cuts it off again (app.services.messages.service).
        stop=stops or None,
        include_stop_str_in_output=bool(stops),
        stream=request.stream,
        user=user,
        tools=_tools(request),
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        response_format=_response_format(request),
        **_reasoning(request),
        stop_sequences=stops,
        requested_max_tokens=request.max_tokens,
    )


def chat_messages(request: CountTokensRequest) -> list[Message]:
    messages: list[Message] = []
    system = _system_text(request.system)
    if system is not None:
        messages.append(SystemMessage(content=system))
    for position, message in enumerate(request.messages):
        param = f"messages[{position}].content"
        if message.role == "user":
            messages.extend(_user_messages(message, param))
        else:
            messages.append(_assistant_message(message, param))
    return messages


def _system_text(system: str | list[TextBlock] | None) -> str | None:
    if system is None or isinstance(system, str):
        return system
    return "\n\n".join(block.text for block in system) if system else None


def _blocks(message: MessageParam) -> list[Block]:
    if isinstance(message.content, str):
        return [TextBlock(text=message.content)]
    return list(message.content)


def _user_messages(message: MessageParam, param: str) -> list[Message]:
    """A user turn: runs of text and images are user messages, each `tool_result` a
    tool message, in the order the blocks come."""
    out: list[Message] = []
    parts: list[TextPart | ImagePart] = []

    def flush() -> None:
        if parts:
            texts = [p.text for p in parts if isinstance(p, TextPart)]
            content: Any = "\n".join(texts) if len(texts) == len(parts) else list(parts)
            out.append(UserMessage(content=content))
            parts.clear()

    for index, block in enumerate(_blocks(message)):
        if isinstance(block, TextBlock):
            parts.append(TextPart(block.text))
        elif isinstance(block, ImageBlock):
            parts.append(ImagePart(ImageURL(url=_image_url(block))))
        elif isinstance(block, ToolResultBlock):
            flush()
            out.append(_tool_message(block, f"{param}[{index}]"))
        elif isinstance(block, RedactedThinkingBlock | ThinkingBlock | ToolUseBlock):
            raise InvalidRequest(
                f"A `{block.__struct_config__.tag}` block belongs in an assistant message.",
                param=f"{param}[{index}].type",
            )
    flush()
    if not out:  # a turn of nothing but empty text
        out.append(UserMessage(content=""))
    return out


def _image_url(block: ImageBlock) -> str:
    source = block.source
    if isinstance(source, Base64Source):
        return f"data:{source.media_type};base64,{source.data}"
    return source.url


def _tool_message(block: ToolResultBlock, param: str) -> ToolMessage:
    if isinstance(block.content, str):
        text = block.content
    else:
        for index, part in enumerate(block.content):
            if isinstance(part, ImageBlock):
                raise InvalidRequest(
                    "Images inside a `tool_result` are not supported; send them in a "
                    "user message's `image` block.",
                    param=f"{param}.content[{index}]",
                )
        text = "\n".join(part.text for part in block.content if isinstance(part, TextBlock))
    if block.is_error:
        text = f"Error: {text}"
    return ToolMessage(content=text, tool_call_id=block.tool_use_id)


def _assistant_message(message: MessageParam, param: str) -> AssistantMessage:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for index, block in enumerate(_blocks(message)):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlock):
            reasoning.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            arguments = json.dumps(block.input)
            calls.append(ToolCall(id=block.id, function=FunctionCall(block.name, arguments)))
        elif isinstance(block, ImageBlock | ToolResultBlock):
            raise InvalidRequest(
                f"A `{block.__struct_config__.tag}` block belongs in a user message.",
                param=f"{param}[{index}].type",
            )
        # redacted_thinking: another server's opaque reasoning; nothing to render here
    return AssistantMessage(
        content="".join(texts) if texts or not calls else None,
        tool_calls=calls or None,
        reasoning="".join(reasoning) if reasoning else None,
    )


def _tools(request: CountTokensRequest) -> list[Tool] | None:
    if request.tools is None:
        return None
    return [
        Tool(
            type="function",
            function=FunctionDefinition(
                name=tool.name, description=tool.description, parameters=tool.input_schema
            ),
        )
        for tool in request.tools
    ]


def _tool_choice(choice: ToolChoiceParam | None) -> tuple[ToolChoice | None, bool]:
    """OpenAI's `tool_choice` and `parallel_tool_calls` of Anthropic's `tool_choice`."""
    if choice is None:
        return None, True
    if isinstance(choice, ToolChoiceNone):
        return "none", True
    parallel = not choice.disable_parallel_tool_use
    if isinstance(choice, ToolChoiceAuto):
        return "auto", parallel
    if isinstance(choice, ToolChoiceAny):
        return "required", parallel
    assert isinstance(choice, ToolChoiceTool)
    return NamedToolChoice(type="function", function=NamedFunction(choice.name)), parallel


def check_tools(request: CountTokensRequest) -> None:
    """Anthropic's wording for the tool mistakes chat would also refuse (chat checks
    the schemas), and the same checks for count_tokens."""
    names: set[str] = set()
    for position, tool in enumerate(request.tools or ()):
        if tool.name in names:
            raise InvalidRequest(
                f"Duplicate tool name `{tool.name}` in `tools`.", param=f"tools[{position}].name"
            )
        names.add(tool.name)
    choice = request.tool_choice
    if isinstance(choice, ToolChoiceNone) or choice is None:
        return
    if not names:
        raise InvalidRequest(
            f"`tool_choice` of type `{choice.__struct_config__.tag}` needs at least one tool "
            "in `tools`.",
            param="tool_choice",
        )
    if isinstance(choice, ToolChoiceTool) and choice.name not in names:
        raise InvalidRequest(
            f"`tool_choice` names the tool `{choice.name}`, which is not in `tools`.",
            param="tool_choice.name",
        )


def _check_thinking_budget(request: MessagesRequest) -> None:
    """Anthropic refuses a thinking budget that leaves `max_tokens` no room for the
    answer; the requested `max_tokens` counts, before any clamp to the context."""
    thinking = request.thinking
    if isinstance(thinking, ThinkingEnabled) and thinking.budget_tokens >= request.max_tokens:
        raise InvalidRequest(
            f"`thinking.budget_tokens` ({thinking.budget_tokens}) must be less than "
            f"`max_tokens` ({request.max_tokens}).",
            param="thinking.budget_tokens",
        )


def _response_format(request: CountTokensRequest) -> JsonSchemaFormat | None:
    config = request.output_config
    if config is None or config.format is None:
        return None
    return JsonSchemaFormat(JsonSchemaSpec(schema=config.format.schema))


def _reasoning(request: CountTokensRequest) -> dict[str, Any]:
    """`thinking` enabled or disabled is the family's boolean switch; `adaptive` leaves
    the family's default; `output_config.effort` is chat's `reasoning_effort`."""
    controls: dict[str, Any] = {}
    thinking = request.thinking
    if isinstance(thinking, ThinkingEnabled):
        controls["thinking"] = True
    elif isinstance(thinking, ThinkingDisabled):
        controls["thinking"] = False
    elif isinstance(thinking, ThinkingAdaptive):
        pass
    config = request.output_config
    if config is not None and config.effort is not None:
        controls["reasoning_effort"] = config.effort
    return controls
