"""The names under which tenancy keeps a request's state in its ASGI scope: set by the
auth middleware and the generation routes, read by the tenancy service and the routes."""

from __future__ import annotations

from app.tenancy.keys.store import KeyRecord

# The owner of what a request stores and holds when no key authenticated it (`--auth
# none`): one tenant.
ANONYMOUS_OWNER = "anonymous"

# The key a request authenticated with (a `KeyRecord`), or absent.
SCOPE_KEY = "lilac.key"
# The x-ratelimit-* headers of an admitted request, as its admission left them (set by
# app.routes.respond); a response without them gets the limits as they stand at its start.
SCOPE_LIMIT_HEADERS = "lilac.limit_headers"
# The app's Tenancy, for the generation routes (app.tenancy.service.request_tenancy):
# from the scope rather than as a second Litestar dependency, which Litestar would
# resolve beside the service in a task group of two tasks, on every request.
SCOPE_TENANCY = "lilac.tenancy"


def owner_of(key: KeyRecord | None) -> str:
    """Whose data a request reads and writes: its key's, or the anonymous owner's."""
    return key.id if key is not None else ANONYMOUS_OWNER
