"""POST /tokenize and /detokenize: count tokens with the named model's own tokenizer
(without `model`, the first served model's).

With keys, each call is the key's as a generation is: a model the key may not use is a
404 `model_not_found` (its template and default system prompt are not shown), and each
call takes one of the key's requests per minute.

Bodies are read and bounded as the generation endpoints' are (app.transport.request_body), and
rendering and tokenizing run off the event loop (engine.offload)."""

from __future__ import annotations

from litestar import Request, post

from app.errors import InvalidRequest
from app.routes.deps import ModelsDep, TenancyDep
from app.schemas.chat import Message
from app.schemas.tokenize import (
    DetokenizeResponse,
    TokenizeResponse,
    detokenize_request_decoder,
    tokenize_request_decoder,
)
from app.services.chat.service import messages_for_template
from app.services.generation.sampling import resolve_model
from app.services.images.decoding import image_refs
from app.tenancy.consumes import Consumes
from app.tenancy.service import Tenancy, request_key
from app.transport.request_body import read_json
from engine.offload import off_loop
from engine.protocol import Engine
from engine.warm.model import WarmModel
from engine.warm.pool import ModelPool


async def _admitted_model(
    request: Request, tenancy: Tenancy, models: ModelPool, name: str | None
) -> WarmModel:
    """The model a call names, once the caller's key may use it and is within its
    requests per minute. A model the key may not use reads as one not served."""
    key = request_key(request)
    tenancy.refuse_if_elsewhere(key, name)  # served by another replica: 429 now
    if key is not None:
        model = name if name is not None else models.first.name
        await tenancy.admit(key, Consumes(request.scope["path"], model))
    return resolve_model(models, name)


@post("/tokenize", status_code=200)
async def tokenize(request: Request, models: ModelsDep, tenancy: TenancyDep) -> TokenizeResponse:
    body = await read_json(request, tokenize_request_decoder)
    model = await _admitted_model(request, tenancy, models, body.model)
    if (body.prompt is None) == (body.messages is None):
        raise InvalidRequest("Give exactly one of `prompt` and `messages`.", param="prompt")
    if body.messages is not None:
        images = image_refs(body.messages)
        if images:
            raise InvalidRequest(
                "`/tokenize` counts text only; image parts are not accepted.",
                param=images[0].param,
            )
        tokens = await off_loop(
            _tokenize_messages, model, body.messages, body.add_generation_prompt
        )
    else:
        tokens = await off_loop(
            model.tokenize, prompt=body.prompt, add_special_tokens=body.add_special_tokens
        )
    return TokenizeResponse(
        count=len(tokens), max_model_len=model.model.max_model_len, tokens=tokens
    )


def _tokenize_messages(
    model: Engine, messages: list[Message], add_generation_prompt: bool
) -> list[int]:
    return model.tokenize(
        messages=messages_for_template(messages), add_generation_prompt=add_generation_prompt
    )


@post("/detokenize", status_code=200)
async def detokenize(
    request: Request, models: ModelsDep, tenancy: TenancyDep
) -> DetokenizeResponse:
    body = await read_json(request, detokenize_request_decoder)
    model = await _admitted_model(request, tenancy, models, body.model)
    return DetokenizeResponse(prompt=await off_loop(model.detokenize, body.tokens))
