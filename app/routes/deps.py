"""What app.main injects into route handlers: `Services`, the one typed object it
assembles, and the type of each by parameter name.

Each is an app-wide object `create_app` built, not client input: Litestar is told
to skip validating it (`ModelHost` is a Protocol, which isinstance cannot check, and
a check per request would be wasted work).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from litestar.params import Dependency
from prometheus_client import CollectorRegistry

from app.deferred.runner import DeferredRunner
from app.services.background.service import BackgroundService
from app.services.batches.service import BatchService
from app.services.chat.service import ChatService
from app.services.completions.service import CompletionService
from app.services.generation.fairness import FairnessView
from app.services.messages.service import MessagesService
from app.services.responses.service import ResponsesService
from app.storage.database import TenantDatabase
from app.storage.files import FileStore
from app.storage.responses import ResponseStore
from app.tenancy.quotas import StoredBytesQuota
from app.tenancy.service import Tenancy
from app.transport.uploads import FileLimits
from engine.admission.runtime import AdmissionController
from engine.protocol import ModelHost
from engine.warm.pool import ModelPool

_app_wide = Dependency(skip_validation=True)

HostDep = Annotated[ModelHost, _app_wide]  # parameter `host`: every model at once (PoolHost)
ModelsDep = Annotated[ModelPool, _app_wide]  # parameter `models`: each served model
AdmissionDep = Annotated[AdmissionController, _app_wide]  # parameter `admission`
ChatDep = Annotated[ChatService, _app_wide]  # parameter `chat`
CompletionsDep = Annotated[CompletionService, _app_wide]  # parameter `completions`
MessagesDep = Annotated[MessagesService, _app_wide]  # parameter `messages`
ResponsesDep = Annotated[ResponsesService, _app_wide]  # parameter `responses`
RegistryDep = Annotated[CollectorRegistry, _app_wide]  # parameter `registry`
FileStoreDep = Annotated[FileStore, _app_wide]  # parameter `file_store`
FileLimitsDep = Annotated[FileLimits, _app_wide]  # parameter `file_limits`
ResponseStoreDep = Annotated[ResponseStore, _app_wide]  # parameter `response_store`
StorageQuotaDep = Annotated[StoredBytesQuota, _app_wide]  # parameter `storage_quota`
BackgroundDep = Annotated[BackgroundService, _app_wide]  # parameter `background`
TenancyDep = Annotated[Tenancy, _app_wide]  # parameter `tenancy`: keys, limits, usage


@dataclass(frozen=True, slots=True)
class Services:
    """Everything `create_app` builds that handlers receive, each under its field's name
    as a dependency."""

    host: ModelHost  # every model at once (a PoolHost)
    models: ModelPool
    admission: AdmissionController
    chat: ChatService
    completions: CompletionService
    messages: MessagesService
    responses: ResponsesService
    registry: CollectorRegistry
    tenant_data: TenantDatabase
    file_store: FileStore
    file_limits: FileLimits
    response_store: ResponseStore
    storage_quota: StoredBytesQuota
    tenancy: Tenancy
    batches: BatchService
    batch_runner: DeferredRunner
    background: BackgroundService
    fairness: FairnessView
