"""A Responses request run from a deferred line: what the `response` kind of deferred
work (background responses) needs to run `POST /v1/responses` away from its HTTP
request, in the deferred lane of admission.

The request is the body the client sent, decoded and converted exactly as the route
does (a stored chain's items first, then `input`), checked against the key it was sent
with as the database has that key now (its models, priority and prefix-cache scope),
and run by `ResponsesService` as a stream of its events. It is billed as the usage row
`usage_record` makes, written with the line's answer (`DeferredStore.answer`), so it
is billed once whatever number of times the line was cut and run again."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from app.errors import ModelNotFound
from app.request_body import decode_checked
from app.schemas.responses import InputItem, ResponsesRequest, responses_request_decoder
from app.services.admission import clamp_priority
from app.services.responses_request import ResponsesChatRequest, chat_request, stored_items
from app.services.responses_sealing import ReasoningSeal
from app.storage.responses import ResponseStore
from app.tenancy.isolation import cache_salt
from app.tenancy.keys import KeyRecord
from app.tenancy.usage import UsageRecord
from app.usage_source import UsageSource

ENDPOINT = "/v1/responses"


async def history(store: ResponseStore, owner: str, previous: str | None) -> list[InputItem]:
    """Every item of the stored chain ending in `previous`, oldest first (another
    owner's response, an expired one or an unknown id: 404; a chain over its bounds: 400)."""
    if previous is None:
        return []
    items: list[InputItem] = []
    for stored in await store.chain(owner, previous):
        items += stored_items(stored.input_items, stored.output_items)
    return items


def converted(
    body: ResponsesRequest, owner: str, seal: ReasoningSeal, items: list[InputItem]
) -> ResponsesChatRequest:
    return chat_request(body, owner, lambda blob, param: seal.open(owner, blob, param), items)


def as_key(chat: ResponsesChatRequest, key: KeyRecord | None) -> ResponsesChatRequest:
    """The request as `key` may send it: a model it may use, its priority tier at most,
    its part of the prefix cache."""
    if key is not None:
        if not key.limits.allows_model(chat.model):
            raise ModelNotFound(chat.model)
        chat.priority = clamp_priority(chat.priority, key.limits.priority)
        chat.cache_salt = cache_salt(key, chat.cache_salt)
    else:
        chat.priority = clamp_priority(chat.priority)
    return chat


async def line_request(
    raw: bytes,
    owner: str,
    key: KeyRecord | None,
    seal: ReasoningSeal,
    store: ResponseStore,
) -> ResponsesChatRequest:
    """The chat request of a deferred line's Responses body, streamed (its events are
    what a deferred run records); errors are the route's."""
    body = decode_checked(raw, responses_request_decoder)
    items = await history(store, owner, body.previous_response_id)
    chat = as_key(converted(body, owner, seal, items), key)
    chat.stream = True
    chat.response_store = None  # the deferred run stores what it made, not the service
    return chat


@dataclass(slots=True)
class LineMeter:
    """What `ResponsesService.open_stream` fills in and finishes: the generation's usage
    (its engine tally is what the line is billed) and the error that ended its stream
    after it began (the stream itself ends in an `error` event then)."""

    usage_source: UsageSource | None = None
    failure: BaseException | None = None
    started: float = field(default_factory=time.monotonic)
    wall_start: float = field(default_factory=time.time)

    async def finish(self, exc: BaseException | None = None) -> None:
        self.failure = exc

    def abandon(self, exc: BaseException) -> None:
        """Cut or cancelled: billed when (and if) the line is answered."""


def usage_record(
    meter: LineMeter, key_id: str | None, request_id: str, model: str, outcome: str
) -> UsageRecord | None:
    """The line's usage row: what the engine ran for it (None: unmetered, or nothing ran).
    `request_id` is the same on every run of the line."""
    generation = meter.usage_source
    if key_id is None or generation is None:
        return None
    usage = generation.usage()
    first = generation.first_output_at
    return UsageRecord(
        request_id=request_id,
        key_id=key_id,
        model=model,
        endpoint=ENDPOINT,
        prompt_tokens=generation.engine_prompt_tokens,
        cached_tokens=usage.prompt_tokens_details.cached_tokens,
        completion_tokens=generation.engine_completion_tokens,
        reasoning_tokens=usage.completion_tokens_details.reasoning_tokens,
        n=1,
        outcome=outcome,
        queue_ms=None,
        ttft_ms=(first - meter.started) * 1000 if first is not None else None,
        duration_ms=(time.monotonic() - meter.started) * 1000,
        created_at=meter.wall_start,
    )
