"""POST /v1/completions (legacy text completions)."""

from __future__ import annotations

from litestar import Request, Response, post
from litestar.response import Stream

from app.routes.deps import CompletionsDep
from app.routes.respond import respond
from app.schemas.completions import completion_request_decoder
from app.tenancy.service import request_tenancy
from app.transport.request_body import read_json


@post("/v1/completions", status_code=200)
async def create_completion(
    request: Request, completions: CompletionsDep
) -> Response[bytes] | Stream:
    # One dependency: the tenancy comes from the scope (see request_tenancy).
    body = await read_json(request, completion_request_decoder)
    tenancy = request_tenancy(request)
    return await respond(request, completions, tenancy, body, len(await request.body()))
