"""The Litestar app: routes, the services they are handed (dependency injection),
error handlers, and the engine's lifespan.

The one place that wires the engines to admission: one engine per served model, held
by a pool (`engine.warm`) that sleeps idle models and wakes the one a request names;
the generation services hold the pool and the controller and lease admission around
each generation; admission, health and metrics see the pool as one host (`PoolHost`);
the other routes get what they need by dependency injection."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import fields
from typing import Any

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.datastructures import State
from litestar.di import Provide

from app.config.settings import Settings
from app.errors.handlers import exception_handlers
from app.launch import collector
from app.launch.served_models import build_pool
from app.observability import context
from app.observability.batch_metrics import BatchCollector
from app.observability.fairness_metrics import FairnessCollector
from app.observability.loop_lag import LoopLagMonitor
from app.observability.metrics import ServerMetrics, UsageWriterCollector
from app.observability.middleware import RequestObserver
from app.observability.stop_stacks import dump_stacks_if_stop_stalls
from app.observability.warm_metrics import WarmMetrics
from app.openapi import openapi_json
from app.routes.admin.admission import admin_router
from app.routes.admin.batches import admin_batches_router
from app.routes.admin.fairness import admin_fairness_router
from app.routes.admin.keys import admin_keys_router
from app.routes.admin.models import admin_models_router
from app.routes.admin.prices import admin_prices_router
from app.routes.batches import batch_routes
from app.routes.chat import create_chat_completion
from app.routes.completions import create_completion
from app.routes.deps import Services
from app.routes.files import file_routes
from app.routes.health import health, liveness, metrics
from app.routes.messages import count_message_tokens, create_message
from app.routes.models import list_models, retrieve_model
from app.routes.responses import create_response
from app.routes.stored_responses import (
    cancel_response,
    delete_response,
    list_input_items,
    retrieve_response,
)
from app.routes.tokenize import detokenize, tokenize
from app.services.background.setup import build_background
from app.services.batches.lines import LineService
from app.services.batches.retention import DAY_S, RetentionPurge
from app.services.batches.setup import build_batches
from app.services.chat.service import ChatService
from app.services.completions.service import CompletionService
from app.services.generation.admission import build_controller
from app.services.generation.fairness import FairnessView
from app.services.images.service import ImageLimits, ImageLoader
from app.services.messages.service import MessagesService
from app.services.responses.sealing import ReasoningSeal
from app.services.responses.service import ResponsesService
from app.storage.database import TenantDatabase
from app.storage.files import FileStore
from app.storage.responses import ResponseLimits, ResponseStore
from app.tenancy.middleware import AuthMiddleware
from app.tenancy.prices.seeds import parse_seeds
from app.tenancy.quotas import StoredBytesQuota
from app.tenancy.service import Tenancy, database_url
from app.transport.body_reads import BodyReadGuard, BodyReads
from app.transport.hosts import AllowedHosts, HostGuard
from app.transport.uploads import FileLimits
from engine.admission.probes import Probe
from engine.admission.runtime import AdmissionController
from engine.protocol import Engine, ModelHost
from engine.ticks import sleep_to_tick
from engine.warm.host import PoolHost
from engine.warm.pool import ModelPool

log = logging.getLogger("lilac.app")


def create_app(
    settings: Settings | None = None,
    engine: Engine | None = None,
    *,
    models: ModelPool | None = None,
    probe: Probe | None = None,
    handle_sigterm: bool = False,
    exit_on_engine_death: bool = False,
    tenancy: Tenancy | None = None,
) -> Litestar:
    """Build the app. With `engine`, it is the one model served; with `models`, those;
    otherwise one engine per model the settings declare is built and started in the
    background, so that /health answers 503 while the models load. `probe` overrides the
    GPU probe the settings name; `handle_sigterm` makes SIGTERM drain before stopping
    (and a stop that stalls log every thread's stack); `exit_on_engine_death` ends the
    process (non-zero) once the engine dies, for its supervisor to restart it."""
    settings = settings or Settings()
    models = models or build_pool(settings, engine)
    host = PoolHost(models)
    admission = build_controller(settings, host, probe)
    server_metrics = ServerMetrics(host, admission)
    WarmMetrics(server_metrics.registry, models)
    loop_lag = LoopLagMonitor(server_metrics.registry)
    tenancy = tenancy or Tenancy.from_settings(settings)
    tenancy.followers.max_per_owner = settings.max_followers_per_key
    tenancy.currency = settings.currency
    tenancy.price_seeds = parse_seeds(settings.price, at=time.time())  # written at start
    if tenancy.fleet is not None:  # this replica's models, published to the others
        tenancy.fleet.serve(models)
    if tenancy.writer is not None:
        server_metrics.registry.register(UsageWriterCollector(tenancy.writer))
    # Tenant data shares the keys database's pool when there is one.
    shared_pool = tenancy.writer.database if tenancy.writer is not None else None
    tenant_data = TenantDatabase(database_url(settings), shared_pool)
    response_store = ResponseStore(tenant_data, ResponseLimits.from_settings(settings))
    # Ended batches and expired files, deleted in bounded steps.
    retention = RetentionPurge(
        tenant_data, settings.batch_retention_days * DAY_S, responses=response_store
    )

    @asynccontextmanager
    async def engine_lifespan(_: Litestar) -> AsyncIterator[None]:
        # Loads what has not loaded. The process holds each model's running requests
        # and the queue's.
        held = settings.max_concurrent * len(models.models) + settings.max_queued
        starter = asyncio.create_task(_start_engine(host, held))
        watcher = (
            asyncio.create_task(_exit_when_engine_dies(host)) if exit_on_engine_death else None
        )
        await admission.start()
        lag_sampler = asyncio.create_task(loop_lag.run())
        await tenancy.start()
        purger = asyncio.create_task(retention.purge_forever())  # expired tenant data
        batch_runner.start()
        if handle_sigterm:
            _drain_on_sigterm(admission)
        try:
            yield
        finally:
            if handle_sigterm:  # a server process, which exits after this close
                dump_stacks_if_stop_stalls()
            collector.restore()
            if not starter.done():
                starter.cancel()
            lag_sampler.cancel()
            purger.cancel()
            if watcher is not None:
                watcher.cancel()
            await batch_runner.close()  # running lines are released for a later run
            await admission.close()
            await tenancy.close()  # usage still queued is written (SIGTERM flushes)
            await tenant_data.close(owned=shared_pool is None)
            await host.shutdown()

    admission.observers.append(_note_queue_wait)
    images = ImageLoader(ImageLimits.from_settings(settings))
    chat = ChatService(models, admission, images)
    completions = CompletionService(models, admission)
    responses = ResponsesService(models, admission, images, ReasoningSeal(settings.data_dir))
    file_store = FileStore(tenant_data, retention_s=settings.file_retention_days * DAY_S)
    # Batches: deferred work on the capacity interactive requests leave.
    endpoints: dict[str, LineService] = {
        "/v1/chat/completions": chat,
        "/v1/completions": completions,
        "/v1/responses": responses,
    }
    batches, batch_runner = build_batches(
        settings, tenant_data, endpoints, models, admission, tenancy.store, file_store
    )
    # Background responses: the same runner, before batch lines.
    background = build_background(
        settings, responses, batch_runner, tenant_data, response_store, tenancy.store
    )
    server_metrics.registry.register(BatchCollector(batch_runner))
    # How each engine shares itself between tenants (/admin/fairness, /metrics).
    fairness = FairnessView(models, settings.fair_share)
    services = Services(
        host=host,
        models=models,
        admission=admission,
        chat=chat,
        completions=completions,
        messages=MessagesService(models, admission, images),
        responses=responses,
        registry=server_metrics.registry,
        tenant_data=tenant_data,
        file_store=file_store,
        file_limits=FileLimits(settings.max_file_bytes, settings.max_file_lines),
        response_store=response_store,
        storage_quota=StoredBytesQuota.from_settings(settings),
        tenancy=tenancy,
        batches=batches,
        batch_runner=batch_runner,
        background=background,
        fairness=fairness,
    )
    server_metrics.registry.register(FairnessCollector(fairness))
    # Slow and unfinished request bodies: one set of counts for every route.
    body_reads = BodyReads(settings.body_read_timeout_s, settings.max_bodies_in_flight_per_client)
    app = Litestar(
        route_handlers=[
            create_chat_completion,
            create_completion,
            create_message,
            count_message_tokens,
            create_response,
            tokenize,
            detokenize,
            list_models,
            retrieve_model,
            retrieve_response,
            delete_response,
            list_input_items,
            cancel_response,
            health,
            liveness,
            metrics,
            openapi_json,
            *file_routes,
            admin_router(settings.resolved_admin_key()),
            admin_keys_router(settings.resolved_admin_key()),
            admin_models_router(settings.resolved_admin_key()),
            *batch_routes,
            admin_batches_router(settings.resolved_admin_key()),
            admin_fairness_router(settings.resolved_admin_key()),
            admin_prices_router(settings.resolved_admin_key()),
        ],
        middleware=_middleware(settings, tenancy, body_reads),
        dependencies={f.name: _provide(getattr(services, f.name)) for f in fields(Services)},
        # Handlers are typed per exception class; Litestar's mapping type is wider.
        exception_handlers=exception_handlers,  # type: ignore[arg-type]  # see above
        lifespan=[engine_lifespan],
        cors_config=cors_config(settings),
        # For operators that reach the app from outside a request:
        # `metrics.keys.count(key_id, ...)` counts a keyed request (app.observability.metrics).
        state=State({"metrics": server_metrics, "body_reads": body_reads}),
        openapi_config=None,
        # Logging is app.observability.logs' (text or JSON, with request ids), not Litestar's.
        logging_config=None,
    )
    # Outermost, around routing and the exception handlers: every response has an id.
    app.asgi_handler = RequestObserver(
        app.asgi_handler,
        [route.path for route in app.routes],
        server_metrics.observe_http,
        loop_lag,  # samples finely while requests are in flight
    )
    return app


def _note_queue_wait(what: str, seconds: float) -> None:
    """Admission's queue wait of the current request, for its access line."""
    record = context.current()
    if what == "queue_wait" and record is not None:
        record.queue_s = seconds


def cors_config(settings: Settings) -> CORSConfig | None:
    """Cross-origin access for the origins the operator lists; none by default, so a web
    page cannot read the answers of a server on its visitor's machine."""
    if not settings.allowed_origins:
        return None
    return CORSConfig(
        allow_origins=list(settings.allowed_origins),
        allow_methods=["GET", "POST", "OPTIONS"],
        allow_headers=[
            "Authorization",
            "Content-Type",
            "X-Request-Id",
            "X-Api-Key",
            "Anthropic-Version",
            "Anthropic-Beta",
        ],
        expose_headers=["X-Request-Id", "Retry-After", "X-Max-Tokens-Clamped"],
    )


def _middleware(
    settings: Settings, tenancy: Tenancy, body_reads: BodyReads
) -> list[Callable[[Any], Any]]:
    """The bounds on request bodies before anything (a body counts from when the app
    first has it); then keys; without keys, the `Host` guard before them (a page that
    rebinds a name to this machine gets a 403)."""
    stack: list[Callable[[Any], Any]] = [lambda app: AuthMiddleware(app, tenancy)]
    if tenancy.mode == "none":
        hosts = AllowedHosts(settings.host, settings.allowed_hosts)
        stack.insert(0, lambda app: HostGuard(app, hosts))
    stack.insert(0, lambda app: BodyReadGuard(app, body_reads))
    return stack


def _provide(service: Any) -> Provide:
    """A dependency that hands every request the same (app-wide) object."""

    def dependency() -> Any:
        return service

    return Provide(dependency, use_cache=True, sync_to_thread=False)


def _drain_on_sigterm(admission: AdmissionController) -> None:
    """SIGTERM: drain (in-flight requests get the grace period), then stop as on SIGINT,
    which granian still handles. A second SIGTERM stops at once."""
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Task[None]] = []

    async def drain_then_stop() -> None:
        log.info("SIGTERM: draining for up to %.0f s before stopping", admission.policy.grace_s)
        await admission.stop()
        os.kill(os.getpid(), signal.SIGINT)

    def on_sigterm() -> None:
        if draining:
            os.kill(os.getpid(), signal.SIGINT)
            return
        draining.append(loop.create_task(drain_then_stop()))

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)


# How often the server checks that the engine is alive (on the loop clock's grid of the
# periodic work, engine.ticks), and how long requests in flight get to send their error (a
# 500, or an SSE error event and [DONE]) before it exits.
ENGINE_WATCH_INTERVAL_S = 1.0
ENGINE_DEATH_LINGER_S = 2.0
ENGINE_DEAD_EXIT_CODE = 4


async def _exit_when_engine_dies(engine: ModelHost) -> None:
    """A dead engine core cannot be revived in place (vLLM's AsyncLLM is done for): exit
    non-zero within seconds, so that a supervisor (systemd `Restart=on-failure`, a
    container runtime) starts a fresh server. Until then /health answers 503 saying why."""
    while True:
        await sleep_to_tick(ENGINE_WATCH_INTERVAL_S)
        failure = engine.failure()
        if failure is not None:
            break
    log.error("engine failed: %s; exiting with status %d", failure, ENGINE_DEAD_EXIT_CODE)
    await asyncio.sleep(ENGINE_DEATH_LINGER_S)
    logging.shutdown()
    os._exit(ENGINE_DEAD_EXIT_CODE)


async def _start_engine(host: PoolHost, requests_held: int) -> None:
    """Load the models; then settle the collector for serving (app.launch.collector), for a
    process that holds at most `requests_held` requests at once."""
    try:
        await host.start()
        names = [name for model in host.pool.models for name in model.model.served_names]
        log.info("engine ready: serving %s", ", ".join(names))
        collector.settle_for_serving(requests_held)
    except Exception as exc:
        # A server that cannot load its model must not linger half-alive. The cause in
        # one line (vLLM wraps it: the innermost error says what went wrong); the
        # traceback for whoever runs at debug level.
        log.error("engine failed to start: %s; exiting", root_cause(exc))
        log.debug("engine start traceback", exc_info=exc)
        logging.shutdown()
        os._exit(3)


def root_cause(exc: BaseException) -> str:
    """An error and, when it wraps another, the innermost one it was caused by: on one
    line (vLLM's "Engine core initialization failed" hides what failed underneath)."""
    inner = exc
    while True:
        nested = inner.__cause__ or (None if inner.__suppress_context__ else inner.__context__)
        if nested is None:
            break
        inner = nested
    text = _one_line(exc)
    if inner is not exc and str(inner) not in str(exc):
        text += f" (caused by {_one_line(inner)})"
    return text


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split()) or '(no message)'}"
