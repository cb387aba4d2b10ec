"""The Batch API: POST /v1/batches, GET /v1/batches(/{id}), POST /v1/batches/{id}/cancel.

A batch belongs to the key that created it: another key's batch is a 404, as one that
does not exist. The service (`app.services.batches.service`) is injected as `batches`."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import MediaType, Request, Response, get, post
from litestar.params import Dependency

from app.errors import InvalidRequest
from app.schemas.batches import batch_create_decoder
from app.services.batches.service import BatchService
from app.tenancy.consumes import Consumes
from app.tenancy.service import request_key, request_tenancy
from app.transport.request_body import read_json

BatchesDep = Annotated[BatchService, Dependency(skip_validation=True)]
MAX_LIMIT = 100
_encoder = msgspec.json.Encoder()


def _json(value: Any, status: int = 200) -> Response[bytes]:
    return Response(_encoder.encode(value), status_code=status, media_type=MediaType.JSON)


@post("/v1/batches", status_code=200)
async def create_batch(request: Request[Any, Any, Any], batches: BatchesDep) -> Response[bytes]:
    """With keys, a creation takes one of the key's requests per minute, and a key has
    at most `--max-live-batches` batches not yet ended (429 past either)."""
    body = await read_json(request, batch_create_decoder)
    key = request_key(request)
    if key is not None:
        await request_tenancy(request).admit(key, Consumes("/v1/batches"))
    return _json(await batches.create(body, key))


@get("/v1/batches/{batch_id:str}")
async def retrieve_batch(
    request: Request[Any, Any, Any], batches: BatchesDep, batch_id: str
) -> Response[bytes]:
    return _json(await batches.get(batch_id, request_key(request)))


@get("/v1/batches")
async def list_batches(
    request: Request[Any, Any, Any],
    batches: BatchesDep,
    after: str | None = None,
    limit: str = "20",
) -> Response[bytes]:
    try:
        count = int(limit)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_LIMIT:
        raise InvalidRequest(f"`limit` must be an integer from 1 to {MAX_LIMIT}.", param="limit")
    return _json(await batches.list_batches(request_key(request), after, count))


@post("/v1/batches/{batch_id:str}/cancel", status_code=200)
async def cancel_batch(
    request: Request[Any, Any, Any], batches: BatchesDep, batch_id: str
) -> Response[bytes]:
    return _json(await batches.cancel(batch_id, request_key(request)))


batch_routes = [create_batch, retrieve_batch, list_batches, cancel_batch]
