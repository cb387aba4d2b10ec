"""The usage record a request's meter makes bills what the response reports: the
engine's prompt and output counts, and the cached and reasoning tokens of its `usage`
(read from the generation without building the usage body again)."""

from __future__ import annotations

import asyncio
import time

import msgspec

from app.schemas.chat import ChatCompletionRequest
from app.services.chat.wire import ChatGeneration
from app.tenancy.consumes import Consumes
from app.tenancy.keys.auth import Authenticator
from app.tenancy.keys.store import KeyLimits, KeyRecord
from app.tenancy.limits import Limiter, Reservation
from app.tenancy.service import RequestMeter, Tenancy
from engine.protocol import ChoiceDelta, GenerateOutput


def generation_of_two_prompts() -> ChatGeneration:
    request = msgspec.json.decode(
        b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}',
        type=ChatCompletionRequest,
    )
    generation = ChatGeneration(request, "chatcmpl-meter")
    states = generation.choice_states()
    steps = [
        (0, GenerateOutput(7, [ChoiceDelta(0, "a", 3, reasoning_token_count=2)], cached_tokens=4)),
        (1, GenerateOutput(9, [ChoiceDelta(1, "b", 5, reasoning_token_count=1)], cached_tokens=6)),
        (0, GenerateOutput(7, [ChoiceDelta(0, "c", 2, "stop")], cached_tokens=4)),
    ]
    for position, output in steps:
        generation.accumulate(states, position, output)
        generation.accepted(0)
    generation.accepted(16)
    generation.generated(10)
    return generation


def test_the_cached_and_reasoning_counts_are_the_usage_bodys() -> None:
    generation = generation_of_two_prompts()
    usage = generation.usage()
    assert usage.prompt_tokens_details.cached_tokens == generation.cached_tokens == 10
    assert usage.completion_tokens_details.reasoning_tokens == generation.reasoning_tokens == 3


def test_the_record_bills_the_engines_counts_and_the_bodys_details() -> None:
    key = KeyRecord(id="key_meter", name="meter", created_at=0.0)
    meter = RequestMeter(Tenancy(Authenticator()), key, "/v1/chat/completions", "m", 2)
    meter.usage_source = generation_of_two_prompts()
    record = meter.record("completed")
    assert record.request_id == "chatcmpl-meter" and record.key_id == "key_meter"
    assert (record.prompt_tokens, record.completion_tokens) == (16, 10)
    assert (record.cached_tokens, record.reasoning_tokens) == (10, 3)
    assert record.n == 2 and record.outcome == "completed"


def test_a_request_gone_before_its_generation_gets_an_id_made_in_time_order() -> None:
    """Its row has no response id to take: it gets one as the server makes request ids
    (32 hex digits, the millisecond first), so it too lands at the end of the index."""
    key = KeyRecord(id="key_meter", name="meter", created_at=0.0)
    tenancy = Tenancy(Authenticator())
    ids = [
        RequestMeter(tenancy, key, "/v1/chat/completions", "m", 1).record("cancelled").request_id
        for _ in range(2)
    ]
    assert all(len(made) == 32 and int(made, 16) >= 0 for made in ids)
    assert ids[0] != ids[1] and ids[0][:12] <= ids[1][:12]
    assert abs(int(ids[0][:12], 16) - time.time() * 1000) < 60_000


class _RoundLimiter(Limiter):
    """A limiter that, like the fleet's when its slices fall short, answers only after
    a round (here 50 ms)."""

    def admit_now(self, key_id: str, limits: KeyLimits, tokens: int, slots: int = 1) -> None:  # type: ignore[override]  # never answers at once
        return None

    async def acquire(
        self, key_id: str, limits: KeyLimits, tokens: int, slots: int = 1
    ) -> Reservation:
        await asyncio.sleep(0.05)
        return self.admit(key_id, limits, tokens, slots)


COMPLETION = Consumes("/v1/completions", "m", tokens=10, slots=1)


async def test_a_request_admitted_at_once_or_after_a_round_is_metered_from_its_start() -> None:
    key = KeyRecord(id="key_meter", name="meter", created_at=0.0)
    here = Tenancy(Authenticator())
    before = time.monotonic()
    meter = here.admit_now(key, COMPLETION)
    assert meter is not None and meter.reservation is not None
    assert before <= meter.started <= time.monotonic()

    fleet = Tenancy(Authenticator(), limiter=_RoundLimiter())
    assert fleet.admit_now(key, COMPLETION) is None
    before = time.monotonic()
    waited = await fleet.admit(key, COMPLETION)
    assert waited is not None and waited.reservation is not None
    assert waited.started - before < 0.04  # the round's wait is part of its time
