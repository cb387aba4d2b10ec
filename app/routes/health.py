"""GET /health for load balancers (200 only while admitting), GET /metrics for Prometheus."""

from __future__ import annotations

from litestar import MediaType, Response, get
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.errors import ServiceUnavailable
from app.routes.deps import AdmissionDep, EngineDep, RegistryDep


@get("/health", media_type=MediaType.JSON)
async def health(engine: EngineDep, admission: AdmissionDep) -> dict[str, str]:
    failure = engine.failure()
    if failure is not None:
        raise ServiceUnavailable(
            f"The engine failed ({failure}); the server is exiting to be restarted.",
            retry_after=5,
            code="engine_dead",
        )
    if not engine.is_ready():
        raise ServiceUnavailable("The model is still loading.", retry_after=5)
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
async def metrics(registry: RegistryDep) -> Response[bytes]:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
