"""POST /tokenize and /detokenize: count tokens with the served model's own tokenizer."""

from __future__ import annotations

from litestar import Request, post

from app.errors import InvalidRequest
from app.schemas.tokenize import (
    DetokenizeResponse,
    TokenizeResponse,
    detokenize_request_decoder,
    tokenize_request_decoder,
)
from app.services.chat import messages_for_template
from app.services.images import image_refs
from app.services.sampling import check_model
from engine.protocol import ModelHost


@post("/tokenize", status_code=200)
async def tokenize(request: Request) -> TokenizeResponse:
    engine: ModelHost = request.app.state.engine
    body = tokenize_request_decoder.decode(await request.body())
    if body.model is not None:
        check_model(engine, body.model)
    if (body.prompt is None) == (body.messages is None):
        raise InvalidRequest("Give exactly one of `prompt` and `messages`.", param="prompt")
    if body.messages is not None:
        images = image_refs(body.messages)
        if images:
            raise InvalidRequest(
                "`/tokenize` counts text only; image parts are not accepted.",
                param=images[0].param,
            )
        tokens = engine.tokenize(
            messages=messages_for_template(body.messages),
            add_generation_prompt=body.add_generation_prompt,
        )
    else:
        tokens = engine.tokenize(prompt=body.prompt, add_special_tokens=body.add_special_tokens)
    return TokenizeResponse(
        count=len(tokens), max_model_len=engine.model.max_model_len, tokens=tokens
    )


@post("/detokenize", status_code=200)
async def detokenize(request: Request) -> DetokenizeResponse:
    engine: ModelHost = request.app.state.engine
    body = detokenize_request_decoder.decode(await request.body())
    if body.model is not None:
        check_model(engine, body.model)
    return DetokenizeResponse(prompt=engine.detokenize(body.tokens))
