"""Responses `input` items: decoded by their `type`, and turned into chat messages.

Items arrive as JSON objects (app.schemas.responses says why) and are decoded one by
one; a message may come without `type`. Then, in their order:

- `message` items of role `user`, `system` or `developer` are those chat messages
  (`input_text` parts as text, `input_image` parts as images, loaded by chat's image
  loader);
- what the assistant did in one turn (`reasoning`, an assistant `message`, its
  `function_call`s) is one assistant message: reasoning as its `reasoning`, text as its
  content, calls as its `tool_calls` (`call_id` the call's id; a namespaced function as
  `namespace.name`, as the model was offered it);
- a `function_call_output` is a tool message answering its `call_id`.

A reasoning item's text is its `encrypted_content` opened (app.services.responses.sealing),
else its `reasoning_text` content, else its summary. The same conversion rebuilds a
stored chain (`previous_response_id`): every stored input and output item, in order.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from app.errors import InvalidRequest
from app.errors.handlers import invalid_request_from_decode_error
from app.schemas.chat import (
    AssistantMessage,
    DeveloperMessage,
    ImagePart,
    ImageURL,
    Message,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)
from app.schemas.json import JsonObject
from app.schemas.responses import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputFile,
    InputImage,
    InputItem,
    InputPart,
    InputText,
    ItemKind,
    MessageItem,
    OutputTextPart,
    ReasoningItem,
    RefusalPart,
)
from app.schemas.tools import FunctionCall, ToolCall

_ITEM_TYPES: dict[str, type[InputItem]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
    "reasoning": ReasoningItem,
}
_decoders = {kind: msgspec.json.Decoder(target) for kind, target in _ITEM_TYPES.items()}
_kind = msgspec.json.Decoder(ItemKind)
_raw_items = msgspec.json.Decoder(list[msgspec.Raw])

# Opens a sealed reasoning blob: (blob, param) -> text, or a 400.
Opener = Callable[[str, str], str]


def decode_items(raw: str | list[msgspec.Raw] | bytes, param: str = "input") -> list[InputItem]:
    """`input` as typed items: a string is one user message; bytes are a JSON array of
    items (as stored)."""
    if isinstance(raw, str):
        return [MessageItem(role="user", content=raw)]
    if isinstance(raw, bytes):
        raw = _raw_items.decode(raw)
    return [decode_item(item, f"{param}[{index}]") for index, item in enumerate(raw)]


def kind_of(raw: msgspec.Raw, param: str) -> tuple[str | None, object]:
    """An item's (or tool's) `type` and `role`; a 400 unless it is a JSON object."""
    try:
        kind = _kind.decode(raw)
    except msgspec.ValidationError as exc:
        raise invalid_at(exc, param) from None
    if kind.type is not None and not isinstance(kind.type, str):
        raise InvalidRequest("`type` must be a string.", param=f"{param}.type")
    return kind.type, kind.role


def decode_item(raw: msgspec.Raw, param: str) -> InputItem:
    kind, role = kind_of(raw, param)
    if kind is None and role is not None:
        kind = "message"
    if kind is None:
        raise InvalidRequest("An input item needs a `type`.", param=f"{param}.type")
    if kind == "item_reference":
        raise InvalidRequest(
            "`item_reference` items are not served; send the item itself, or continue a "
            "stored response with `previous_response_id`.",
            param=f"{param}.type",
        )
    decoder = _decoders.get(kind)
    if decoder is None:
        raise InvalidRequest(
            f"Input items of type `{kind}` are not served here; served: "
            + ", ".join(f"`{name}`" for name in _ITEM_TYPES)
            + ".",
            param=f"{param}.type",
        )
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise invalid_at(exc, param) from None


def invalid_at(exc: msgspec.ValidationError, param: str) -> InvalidRequest:
    """msgspec's error of a part of the request, naming its place under `param`."""
    error = invalid_request_from_decode_error(exc)
    inner = error.param or ""
    error.param = param + (inner if inner.startswith("[") or not inner else f".{inner}")
    return error


# ---------------------------------------------------------------- items -> messages


@dataclass(slots=True)
class _Turn:
    """An assistant turn being gathered: its pieces are joined once, when it closes
    (joining as they come would copy the turn's text once per item)."""

    reasoning: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def message(self) -> AssistantMessage:
        return AssistantMessage(
            content="".join(self.text) if self.text or not self.calls else None,
            tool_calls=self.calls or None,
            reasoning="".join(self.reasoning) if self.reasoning else None,
        )


class _Turns:
    """Builds the chat messages; `turn` is the assistant turn still open."""

    def __init__(self, open_sealed: Opener) -> None:
        self.messages: list[Message] = []
        self.turn: _Turn | None = None
        self._open = open_sealed

    def add(self, item: InputItem, param: str) -> None:
        if isinstance(item, MessageItem):
            self._message(item, param)
        elif isinstance(item, FunctionCallItem):
            name = f"{item.namespace}.{item.name}" if item.namespace else item.name
            call = ToolCall(id=item.call_id, function=FunctionCall(name, item.arguments))
            self._turn(lambda turn: False).calls.append(call)
        elif isinstance(item, FunctionCallOutputItem):
            text = _text_of(item.output, f"{param}.output")
            self._close()
            self.messages.append(ToolMessage(content=text, tool_call_id=item.call_id))
        else:
            assert isinstance(item, ReasoningItem)
            text = self._reasoning(item, param)
            # Reasoning comes first in a turn: after text or calls, it opens the next.
            self._turn(lambda turn: bool(turn.text or turn.calls)).reasoning.append(text)

    def _message(self, item: MessageItem, param: str) -> None:
        param = f"{param}.content"
        if item.role == "assistant":
            text = _text_of(item.content, param)
            # Text after the turn's calls is the next turn's.
            self._turn(lambda turn: bool(turn.calls)).text.append(text)
            return
        self._close()
        if item.role == "user":
            self.messages.append(UserMessage(content=_user_content(item.content, param)))
        elif item.role == "system":
            self.messages.append(SystemMessage(content=_text_of(item.content, param)))
        else:
            self.messages.append(DeveloperMessage(content=_text_of(item.content, param)))

    def _reasoning(self, item: ReasoningItem, param: str) -> str:
        if item.encrypted_content is not None:
            return self._open(item.encrypted_content, f"{param}.encrypted_content")
        if item.content:
            return "".join(part.text for part in item.content)
        return "\n".join(part.text for part in item.summary)

    def _turn(self, ends: Callable[[_Turn], bool]) -> _Turn:
        """The open turn, or a new one when there is none or `ends(open turn)`."""
        if self.turn is None or ends(self.turn):
            self._close()
            self.turn = _Turn()
        return self.turn

    def _close(self) -> None:
        if self.turn is not None:
            self.messages.append(self.turn.message())
            self.turn = None

    def done(self) -> list[Message]:
        self._close()
        return self.messages


def chat_messages(
    instructions: str | None,
    items: Iterable[tuple[InputItem, str]],
    open_sealed: Opener,
) -> list[Message]:
    """The chat messages of `instructions` (a system message first) and `items`, each
    with the param that names it in errors."""
    turns = _Turns(open_sealed)
    if instructions:
        turns.messages.append(SystemMessage(content=instructions))
    for item, param in items:
        turns.add(item, param)
    return turns.done()


def _parts(content: str | list[InputPart]) -> list[InputPart]:
    return [InputText(content)] if isinstance(content, str) else content


def _text_of(content: str | list[InputPart], param: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for index, part in enumerate(content):
        if isinstance(part, InputText | OutputTextPart):
            texts.append(part.text)
        elif isinstance(part, RefusalPart):
            texts.append(part.refusal)
        else:
            _refuse_part(part, f"{param}[{index}]")
    return "\n".join(texts) if len(texts) != 1 else texts[0]


def _refuse_part(part: InputPart, param: str) -> None:
    if isinstance(part, InputFile):
        raise InvalidRequest("`input_file` parts are not served here.", param=f"{param}.type")
    raise InvalidRequest("Images are served in user messages only.", param=f"{param}.type")


def _user_content(content: str | list[InputPart], param: str) -> str | list[TextPart | ImagePart]:
    if isinstance(content, str):
        return content
    parts: list[TextPart | ImagePart] = []
    for index, part in enumerate(content):
        if isinstance(part, InputText | OutputTextPart):
            parts.append(TextPart(part.text))
        elif isinstance(part, RefusalPart):
            parts.append(TextPart(part.refusal))
        elif isinstance(part, InputImage):
            parts.append(
                ImagePart(
                    ImageURL(url=_image_url(part, f"{param}[{index}]"), detail=_detail(part.detail))
                )
            )
        else:
            _refuse_part(part, f"{param}[{index}]")
    if all(isinstance(part, TextPart) for part in parts):
        return "\n".join(part.text for part in parts if isinstance(part, TextPart))
    return parts


def _image_url(part: InputImage, param: str) -> str:
    if part.image_url is None:
        raise InvalidRequest(
            "An `input_image` needs an `image_url` (an http(s) URL or a `data:` URI); "
            "uploaded files (`file_id`) are not served here.",
            param=f"{param}.image_url",
        )
    return part.image_url


def _detail(detail: str) -> Any:
    return "high" if detail == "original" else detail


# ---------------------------------------------------------------- stored form


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def listed_item(item: InputItem) -> JsonObject:
    """An input item as `input_items` lists it: with an `id`, a message's content as
    parts, `status` completed."""
    out: JsonObject = {k: v for k, v in msgspec.to_builtins(item).items() if v is not None}
    if isinstance(item, MessageItem):
        out["type"] = "message"
        out["content"] = msgspec.to_builtins(_parts(item.content))
        prefix = "msg"
    elif isinstance(item, FunctionCallItem):
        prefix = "fc"
    elif isinstance(item, FunctionCallOutputItem):
        prefix = "fco"
    else:
        prefix = "rs"
    out.setdefault("id", new_item_id(prefix))
    out["status"] = "completed"
    return out
