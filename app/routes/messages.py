"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API.

Requests are converted to chat requests and run as chat runs (app.services.messages.service);
`anthropic-version`, `anthropic-beta` and `?beta=true` are accepted and change nothing.
Errors on these routes are in Anthropic's shape (app.errors.anthropic).
"""

from __future__ import annotations

import json
from typing import Any

from litestar import Request, Response, post
from litestar.response import Stream

from app.errors import InvalidRequest
from app.routes.deps import MessagesDep, ModelsDep
from app.routes.respond import respond
from app.schemas.chat import Message
from app.schemas.messages import (
    CountTokensResponse,
    count_tokens_request_decoder,
    messages_request_decoder,
)
from app.services.chat.service import messages_for_template
from app.services.generation.sampling import resolve_model
from app.services.images.decoding import image_refs
from app.services.messages.request import chat_messages, chat_request, check_tools
from app.tenancy.consumes import Consumes
from app.tenancy.service import request_key, request_tenancy
from app.transport.request_body import read_json
from engine.offload import off_loop
from engine.protocol import Engine

# Set when `max_tokens` was over the room the prompt left: the `max_tokens` it ran with.
CLAMP_HEADER = "X-Max-Tokens-Clamped"


@post("/v1/messages", status_code=200)
async def create_message(request: Request, messages: MessagesDep) -> Response[bytes] | Stream:
    # One dependency: the tenancy comes from the scope (see request_tenancy).
    body = await read_json(request, messages_request_decoder)
    chat = chat_request(body)
    tenancy = request_tenancy(request)
    response = await respond(request, messages, tenancy, chat, len(await request.body()))
    if chat.clamped_max_tokens is not None:
        response.headers[CLAMP_HEADER] = str(chat.clamped_max_tokens)
    return response


@post("/v1/messages/count_tokens", status_code=200)
async def count_message_tokens(request: Request, models: ModelsDep) -> CountTokensResponse:
    """The prompt's tokens as the model's template renders the messages; tools count as
    the tokens of their JSON definitions (templates render them in their own words).
    With keys, each call takes one of the key's requests per minute, as /tokenize does."""
    body = await read_json(request, count_tokens_request_decoder)
    key = request_key(request)
    tenancy = request_tenancy(request)
    tenancy.refuse_if_elsewhere(key, body.model)  # served by another replica: 429 now
    if key is not None:
        # One of the key's requests per minute (429 past it), and no usage row: Anthropic
        # does not charge for counting.
        await tenancy.admit(key, Consumes("/v1/messages/count_tokens", body.model))
    model = resolve_model(models, body.model)
    check_tools(body)
    converted = chat_messages(body)
    images = image_refs(converted)
    if images:
        raise InvalidRequest(
            "`count_tokens` counts text only; image blocks are not accepted.",
            param="messages",
        )
    tools = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in body.tools or ()
    ]
    count = await off_loop(_count, model, converted, tools)
    return CountTokensResponse(input_tokens=count)


def _count(model: Engine, messages: list[Message], tools: list[dict[str, Any]]) -> int:
    count = len(model.tokenize(messages=messages_for_template(messages)))
    if tools:
        count += len(model.tokenize(prompt=json.dumps(tools), add_special_tokens=False))
    return count
