"""Building batches for the app: the deferred-work store and runner over the tenant
database, the `batch` handler over the chat, completions and responses services, and
the API's service. The runner waits to touch the database until there is one to look
at: a server that never stored anything does not create it."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from app.config.settings import Settings
from app.db.engine import sqlite_path
from app.deferred.runner import DeferredRunner
from app.deferred.store import DeferredStore
from app.services.batches.jobs import BatchJobs, Files
from app.services.batches.lines import LineRunner, LineService
from app.services.batches.service import BatchService
from app.storage.database import TenantDatabase
from app.storage.files import FileStore
from app.tenancy.deferred_limits import DeferredLimits
from app.tenancy.keys.store import KeyStore
from engine.admission.runtime import AdmissionController
from engine.warm.pool import ModelPool


def replica_name(settings: Settings) -> str:
    return settings.replica_id or f"{socket.gethostname()}-{os.getpid()}"


def has_database(database: TenantDatabase) -> bool:
    """Whether batches may exist: the database is open, or its file is there (a
    server restarted over unfinished batches), or it is a server (PostgreSQL)."""
    if database.opened:
        return True
    path = sqlite_path(database.url)
    return path is None or path.expanduser().exists()


def admitted_model_names(models: ModelPool | None) -> Callable[[str], str | None]:
    """A line's model name -> the model admission knows it as (its first name); None
    for a name not served, whose line fails at once without reaching admission."""

    def name(named: str) -> str | None:
        model = models.get(named) if models is not None else None
        return model.model.name if model is not None else None

    return name


def build_batches(
    settings: Settings,
    database: TenantDatabase,
    endpoints: dict[str, LineService],
    models: ModelPool | None,
    admission: AdmissionController,
    keys: KeyStore | None,
    files: Files | None = None,
) -> tuple[BatchService, DeferredRunner]:
    """The Batch API's service and the deferred runner its lines (and background
    responses) run on: `endpoints` maps each batch endpoint to its service; `files` is
    the store the Files API serves (else one over the same database)."""
    files = files or FileStore(database)
    store = DeferredStore(database)
    replica = replica_name(settings)
    limits = DeferredLimits()  # the keys' batch lines and background responses, counted
    lines = LineRunner(endpoints, limits)
    jobs = BatchJobs(store, files, lines, keys, replica)
    runner = DeferredRunner(
        store,
        admission,
        [jobs],
        replica=replica,
        concurrency=settings.batch_concurrency,
        beside_interactive=settings.batch_concurrency_beside_interactive,
        resume_after_s=settings.batch_resume_after_s,
        prefill_lines=settings.batch_prefill_lines,
        lease_s=settings.batch_lease_s,
        should_poll=lambda: has_database(database),
        model_name=admitted_model_names(models),
        limits=limits,
    )
    admission.interactive_queued.append(runner.make_room)
    admission.interactive_arrived.append(runner.interactive_arrived)
    admission.deferred_prefilled.append(runner.prefilled)
    return BatchService(store, files, runner, settings.max_live_batches), runner
