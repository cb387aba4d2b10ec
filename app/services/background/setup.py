"""Building background responses for the app: the `response` kind's handler on the
deferred-work runner batches use (one runner, one store, one lane), and the API's
service."""

from __future__ import annotations

from app.config.settings import Settings
from app.deferred.runner import DeferredRunner
from app.services.background.events import EventHub
from app.services.background.runs import BackgroundResponses
from app.services.background.service import BackgroundService
from app.services.responses.service import ResponsesService
from app.storage.database import TenantDatabase
from app.storage.response_events import EventStore
from app.storage.responses import ResponseStore
from app.tenancy.keys.store import KeyStore


def build_background(
    settings: Settings,
    responses: ResponsesService,
    runner: DeferredRunner,
    database: TenantDatabase,
    response_store: ResponseStore,
    keys: KeyStore | None,
) -> BackgroundService:
    events = EventStore(database)
    hub = EventHub()
    handler = BackgroundResponses(
        runner.store, responses, response_store, events, hub, keys, runner.replica, runner.limits
    )
    runner.handlers[handler.kind] = handler
    return BackgroundService(
        runner.store,
        responses,
        response_store,
        events,
        hub,
        handler,
        runner,
        max_queued=settings.max_queued_background_per_key,
        max_follow_s=settings.max_follow_s,
    )
