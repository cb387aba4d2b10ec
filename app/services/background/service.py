"""The API of background responses: create one (stored `queued`, its job and line
written, the runner woken), cancel one, read its events again.

Every operation names its owner: another key's response is the same 404 as an unknown
one (`ResponseNotFound`), so a key can neither read, stream nor cancel another's. An
owner has at most `max_queued` background responses queued or in progress (a 429
`too_many_background_responses` past them), and a stream of one's events lasts at most
`max_follow_s`."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import msgspec

from app.db.deferred import JOB_ID_CHARS
from app.deferred.runner import DeferredRunner
from app.deferred.store import CANCELLED, DeferredStore, Job
from app.errors import InvalidRequest, TooManyBackgroundResponses
from app.observability import context
from app.schemas.responses_output import Response
from app.services.background.events import FINAL_STATUSES, EventHub, follow
from app.services.background.runs import KIND, RUNNABLE, BackgroundResponses
from app.services.responses.request import ResponsesChatRequest
from app.services.responses.service import ResponsesService
from app.storage.response_events import EventStore
from app.storage.responses import ResponseStore, StoredResponse
from app.tenancy.keys.store import KeyRecord

CANCEL_WAIT_S = 5.0  # how long a cancel waits for a running response to stop
# A background response takes seconds to minutes: a key at its bound can try again soon.
QUEUED_RETRY_AFTER_S = 10.0
_encoder = msgspec.json.Encoder()


class _Head(msgspec.Struct):
    status: str = ""
    background: bool = False


_head = msgspec.json.Decoder(_Head)


def _not_background(param: str) -> InvalidRequest:
    return InvalidRequest(
        "Only background responses (made with `background: true`) can be cancelled or "
        "streamed again; this one was not.",
        param=param,
        code="not_background",
    )


class BackgroundService:
    def __init__(
        self,
        store: DeferredStore,
        responses: ResponsesService,
        response_store: ResponseStore,
        events: EventStore,
        hub: EventHub,
        handler: BackgroundResponses,
        runner: DeferredRunner | None = None,
        max_queued: int = 0,
        max_follow_s: float = 0.0,
    ) -> None:
        self.store = store
        self.responses = responses
        self.response_store = response_store
        self.events = events
        self.hub = hub
        self.handler = handler
        self.runner = runner
        self.max_queued = max_queued  # per owner, queued or in progress (0: no bound)
        self.max_follow_s = max_follow_s  # one stream of events, at most (0: no bound)
        # Counting an owner's queued responses and adding one is one step per replica,
        # so that many creations at once cannot all pass the count.
        self._creating = asyncio.Lock()

    def _request_id(self) -> str:
        """The engine request id a foreground response of this HTTP request would have
        (the response id is made from it): its request id (X-Request-Id); a client's
        cut so that the response id fits a job's, the whole UUID after it keeping it
        unique."""
        prefix = self.responses.id_prefix
        record = context.current()
        if record is None:
            return f"{prefix}-{context.new_request_id()}"
        if not record.client_supplied:
            return record.engine_request_id(prefix)
        room = JOB_ID_CHARS - len("resp_") - 32  # the client's part: less `resp_`, a UUID
        return f"{prefix}-{record.request_id[:room]}-{uuid.uuid4().hex}"

    async def create(
        self, chat: ResponsesChatRequest, raw: bytes, key: KeyRecord | None
    ) -> Response:
        """Store the response `queued` and its job: the request as sent, run later."""
        self.responses.engine_for(chat)  # a model not served: 404 now, not later
        now = time.time()
        chat.created_at = now
        # Named as a foreground response is: `resp_` and the request's id (X-Request-Id).
        generation = self.responses.generation(chat, self._request_id())
        chat.response_id = generation.id  # every run keeps it
        queued = generation.response("queued", [], None)
        async with self._creating:
            await self._refuse_over_bound(chat.owner)
            await self._save(chat, queued, raw, key, now)
        if self.runner is not None:
            self.runner.wake()
        return queued

    async def _refuse_over_bound(self, owner: str) -> None:
        if self.max_queued <= 0:
            return
        if await self.store.count_jobs(KIND, owner, RUNNABLE) >= self.max_queued:
            raise TooManyBackgroundResponses(self.max_queued, QUEUED_RETRY_AFTER_S)

    async def _save(
        self,
        chat: ResponsesChatRequest,
        queued: Response,
        raw: bytes,
        key: KeyRecord | None,
        now: float,
    ) -> None:
        """The stored response and its job (with its one line: the request as sent)."""
        await self.response_store.save(
            StoredResponse(
                id=queued.id,
                owner=chat.owner,
                model=queued.model,
                created_at=now,
                previous_response_id=queued.previous_response_id,
                status="queued",
                response=_encoder.encode(queued),
                input_items=_encoder.encode(chat.input_items),
                output_items=b"[]",
            )
        )
        job = Job(
            id=queued.id,
            kind=KIND,
            owner=chat.owner,
            key_id=key.id if key is not None else None,
            state="queued",
            payload={"model": queued.model},
            result=None,
            stamps={},
            created_at=now,
            expires_at=None,
        )
        try:
            await self.store.create(job, [raw.decode()])
        except BaseException:
            await self.response_store.delete(chat.owner, queued.id)
            raise

    async def _background(
        self, owner: str, response_id: str, param: str
    ) -> tuple[StoredResponse, _Head]:
        stored = await self.response_store.get(owner, response_id)  # another's: 404
        head = _head.decode(stored.response)
        if not head.background:
            raise _not_background(param)
        return stored, head

    async def cancel(self, owner: str, response_id: str) -> bytes:
        """Cancel the owner's background response; the Response as it is then."""
        stored, head = await self._background(owner, response_id, "response_id")
        if head.status == "cancelled":
            return stored.response
        if head.status in FINAL_STATUSES:
            raise InvalidRequest(
                f"The response is {head.status}; only a queued or running response can be "
                "cancelled.",
                param="response_id",
                code="response_not_cancellable",
            )
        await self.store.move(response_id, RUNNABLE, "cancelling")
        if await self.store.close_pending(response_id, CANCELLED):  # it was not running
            job = await self.store.get(response_id)
            if job is not None:
                await self.handler.set_cancelled(job)
        else:
            self.handler.cancel_here(response_id)  # else its replica sees the state
        if self.runner is not None:
            self.runner.wake()
        await self._settled(response_id)
        return (await self.response_store.get(owner, response_id)).response

    async def _settled(self, response_id: str) -> None:
        """Wait (a while) for the response's line to be answered: its run stopped and
        what it ran billed."""
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            counts = (await self.store.counts([response_id]))[response_id]
            if counts.unfinished == 0:
                return
            await asyncio.sleep(0.05)

    async def stop(self, owner: str, response_id: str) -> None:
        """Before a delete: a background response still queued or running is cancelled
        first, so what it ran is billed before its rows go."""
        stored = await self.response_store.get(owner, response_id)
        head = _head.decode(stored.response)
        if head.background and head.status not in FINAL_STATUSES:
            await self.cancel(owner, response_id)

    async def replay(self, owner: str, response_id: str, after: int) -> AsyncIterator[bytes]:
        """The response's events after `after` (-1: all), then live until it is final.
        Raised here, before any byte: 404, not a background response, and `after` at or
        past the events of a finished response."""
        _, head = await self._background(owner, response_id, "stream")
        if after >= 0 and head.status in FINAL_STATUSES:
            count = await self.events.count(response_id)
            if after >= count:
                raise InvalidRequest(
                    f"`starting_after` is {after}, and the response has {count} events "
                    f"(numbered 0 to {count - 1}).",
                    param="starting_after",
                )

        async def status() -> str | None:
            return await self.response_store.status(owner, response_id)

        return follow(self.events, self.hub, status, response_id, after, max_s=self.max_follow_s)
