"""Probes and metrics.

GET /health is readiness: 200 only while the box admits work (what sglang-router and
vLLM's router poll, and a Kubernetes readiness probe); 503 with `Retry-After` while the
model loads, while draining and while yielded to the GPU's owner, so a router sends the
request elsewhere. GET /health/live is liveness: 200 while the process and the engine
are healthy, yielded or not; 503 only once the engine has died (restart the process).
GET /metrics: lilac-serve's `lilac_` series, then this process's default registry (vLLM's
`vllm:` series when its frontend runs here), then the series the engines keep apart (from
the engine's own process, `--engine-frontend-process`)."""

from __future__ import annotations

from litestar import MediaType, Response, get
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from app.errors import ServiceUnavailable
from app.routes.deps import AdmissionDep, HostDep, RegistryDep


@get("/health", media_type=MediaType.JSON)
async def health(host: HostDep, admission: AdmissionDep) -> dict[str, str]:
    failure = host.failure()
    if failure is not None:
        raise ServiceUnavailable(
            f"The engine failed ({failure}); the server is exiting to be restarted.",
            retry_after=5,
            code="engine_dead",
        )
    if not host.is_ready():
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


@get("/health/live", media_type=MediaType.JSON)
async def liveness(host: HostDep, admission: AdmissionDep) -> dict[str, str]:
    if not host.is_alive():
        raise ServiceUnavailable("The engine has failed; restart the server.", retry_after=5)
    loading = "loading" if not host.is_ready() else str(admission.state)
    return {"status": "alive", "state": loading}


@get("/metrics")
async def metrics(registry: RegistryDep, host: HostDep) -> Response[bytes]:
    # The registries hold different names (`lilac_` and `vllm:`, the latter here or in the
    # engine's process, never both), so they concatenate.
    apart = await host.metrics_exposition()
    body = generate_latest(registry) + generate_latest(REGISTRY) + apart.encode()
    return Response(body, media_type=CONTENT_TYPE_LATEST)
