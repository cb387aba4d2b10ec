"""What the generation endpoints share: identify the client, check its key's limits,
then answer with a JSON body or an SSE stream, metered. The service and the tenancy
come by dependency injection (app.main)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, TypeVar

import msgspec
from litestar import MediaType, Request, Response

from app.routes.disconnect import until_disconnected
from app.routes.event_stream import EventStream
from app.schemas.sampling import SamplingFields
from app.services.generation.admission import clamp_priority, client_key
from app.tenancy.consumes import Consumes
from app.tenancy.keys.isolation import cache_salt
from app.tenancy.scope import SCOPE_LIMIT_HEADERS
from app.tenancy.service import RequestMeter, Tenancy, request_key
from engine.warm.elsewhere import REQUEST_BODY

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_encoder = msgspec.json.Encoder()

BodyT = TypeVar("BodyT", bound=SamplingFields)
BodyT_contra = TypeVar("BodyT_contra", bound=SamplingFields, contravariant=True)


class MeteredService(Protocol[BodyT_contra]):
    """What `respond` needs of an endpoint's service (app.services.generation.service's
    `GenerationService` is one): a body or a stream, and what a key's limits reserve."""

    async def complete(
        self, request: BodyT_contra, client: str | None = None, meter: RequestMeter | None = None
    ) -> object: ...

    async def open_stream(
        self, request: BodyT_contra, client: str | None = None, meter: RequestMeter | None = None
    ) -> AsyncIterator[bytes]: ...

    def reserved_tokens(self, request: BodyT_contra, body_bytes: int) -> int: ...

    def slots(self, request: BodyT_contra) -> int: ...


async def respond(
    request: Request,
    service: MeteredService[BodyT],
    tenancy: Tenancy,
    body: BodyT,
    body_bytes: int = 0,
) -> Response[bytes] | EventStream:
    """`body` is the decoded request; errors raised here map in app.errors."""
    # Read only for a model asleep here, to know a router's retry (engine.warm.elsewhere).
    REQUEST_BODY.set(await request.body())
    key = request_key(request)
    tenancy.refuse_if_elsewhere(key, body.model)  # served by another replica: 429 now
    client = client_key(request, body.user, key.id if key is not None else None)
    body.priority = clamp_priority(body.priority, key.limits.priority if key is not None else 0)
    # Metered keys each get their own part of the prefix cache (app.tenancy.keys.isolation).
    body.cache_salt = cache_salt(key if tenancy.mode == "keys" else None, body.cache_salt)
    meter: RequestMeter | None = None
    if key is not None:
        reserve = service.reserved_tokens(body, body_bytes)
        slots = service.slots(body)
        # The path from the scope: `request.url` would parse a whole URL per request.
        scope = request.scope
        path = scope.get("root_path", "") + scope["path"]
        consumes = Consumes(path, body.model, reserve, slots, body.n)
        # Without waiting, unless the key's limits need a round with the other replicas.
        meter = tenancy.admit_now(key, consumes) or await tenancy.admit(key, consumes)
        # The key's limits as this admission left them go on the response's headers.
        if meter is not None and meter.reservation is not None:
            scope[SCOPE_LIMIT_HEADERS] = meter.reservation.headers  # type: ignore[literal-required]  # ASGI scope is a TypedDict
    try:
        if body.stream:
            # Admission, the queue and the first token: a client gone meanwhile ends them.
            frames = await until_disconnected(request, service.open_stream(body, client, meter))
            return EventStream(frames, media_type="text/event-stream", headers=SSE_HEADERS)
        result = await until_disconnected(request, service.complete(body, client, meter))
    except BaseException as exc:
        if meter is not None:
            meter.abandon(exc)
        raise
    return Response(_encoder.encode(result), media_type=MediaType.JSON)
