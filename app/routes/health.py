"""GET /health for load balancers (200 only while admitting), GET /metrics for Prometheus."""

from __future__ import annotations

from litestar import MediaType, Request, Response, get
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.errors import ServiceUnavailable
from engine.protocol import ModelHost


@get("/health", media_type=MediaType.JSON)
async def health(request: Request) -> dict[str, str]:
    engine: ModelHost = request.app.state.engine
    if not engine.is_ready():  # the engine's own decision (engine.checks enforces it)
        raise ServiceUnavailable("The model is still loading.", retry_after=5)
    admission = request.app.state.admission
    if not admission.admitting():
        # Not admitting (GPU handed back to its owner): a load balancer should go elsewhere.
        state = admission.state
        raise ServiceUnavailable(
            f"Not admitting requests: {state} ({admission.machine.reason}).",
            retry_after=admission.retry_after_s(),
            code=str(state),
        )
    return {"status": "ok"}


@get("/metrics")
async def metrics(request: Request) -> Response[bytes]:
    return Response(generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST)
