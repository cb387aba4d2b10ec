"""The bytes of images being fetched or decoded, across all requests: one bound, shared
fairly between clients, so a burst of large images costs a retry (429 or 503), never
more memory."""

from __future__ import annotations

from app.errors import ServiceUnavailable, TooManyRequests


class ByteBudget:
    """Bytes held by images in flight, across requests, shared fairly between clients
    (admission's fairness key: with API keys, the key). Taking is all-or-nothing and
    never waits.

    One client may hold at most its share: what is left after `reserve` (one image of
    the largest size), divided among the clients holding bytes (itself included), and
    never less than `reserve`. So a client alone cannot take the reserve, and a client
    holding nothing always finds room for an image while the others are within their
    shares. Over its share a client gets a 429 (its own images are in the way); over
    the whole bound, a 503 (the server is busy). Both: retry shortly."""

    def __init__(self, limit: int, reserve: int = 0) -> None:
        self.limit = limit
        self.reserve = min(reserve, limit)
        self.used = 0
        self._held: dict[str | None, int] = {}  # client -> bytes; only clients holding any

    def share(self, client: str | None) -> int:
        """The most `client` may hold now."""
        holders = len(self._held) + (client not in self._held)
        return max(self.reserve, (self.limit - self.reserve) // holders)

    def held(self, client: str | None) -> int:
        return self._held.get(client, 0)

    def take(self, count: int, client: str | None = None) -> None:
        held = self.held(client)
        if held + count > self.share(client):
            raise TooManyRequests(
                "This client's images being fetched or decoded hold its share of the "
                "server's image budget; retry shortly.",
                retry_after=1,
                code="image_share_exceeded",
            )
        if self.used + count > self.limit:
            raise ServiceUnavailable(
                "Too many image bytes are being fetched or decoded now; retry shortly.",
                retry_after=1,
                code="images_busy",
            )
        self.used += count
        self._held[client] = held + count

    def give(self, count: int, client: str | None = None) -> None:
        self.used -= count
        left = self.held(client) - count
        if left > 0:
            self._held[client] = left
        else:
            self._held.pop(client, None)


class Held:
    """What one image holds of the budget, given back once it is decoded (or failed)."""

    def __init__(self, budget: ByteBudget, client: str | None = None) -> None:
        self.budget = budget
        self.client = client
        self.count = 0

    def take(self, count: int) -> None:
        self.budget.take(count, self.client)
        self.count += count

    def give_all(self) -> None:
        self.budget.give(self.count, self.client)
        self.count = 0
