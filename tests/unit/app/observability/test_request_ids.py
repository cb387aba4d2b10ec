"""X-Request-Id: accepted or made, returned on every response (errors too; on Anthropic's
routes as `request-id` too), and used in the response id, the engine request id and the
log lines of that request."""

from __future__ import annotations

import itertools
import logging
import time

import anthropic
import pytest

from app.db.schema import REQUEST_ID_CHARS
from app.observability.context import (
    MAX_CLIENT_ID_CHARS,
    RequestRecord,
    accept_request_id,
    new_request_id,
)
from app.observability.logs import RequestIdFilter
from engine.scripted import ScriptedEngine
from tests.anthropic_sse import anthropic_sdk
from tests.client import app_client, stream_events

URL = "/v1/chat/completions"
SAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-_"
BODY = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


async def test_a_client_id_comes_back_and_names_the_response_and_engine_request() -> None:
    engine = ScriptedEngine()
    seen: list[str] = []
    original = engine.generate

    def spy(request):  # type: ignore[no-untyped-def]
        seen.append(request.request_id)
        return original(request)

    engine.generate = spy  # type: ignore[method-assign]
    async with app_client(engine) as http:
        response = await http.post(URL, json=BODY, headers={"X-Request-Id": "abc-123"})
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "abc-123"
    assert response.json()["id"].startswith("chatcmpl-abc-123-")
    assert seen and seen[0].startswith("chatcmpl-abc-123-")


async def test_an_id_is_made_when_missing_and_returned_on_streams() -> None:
    async with app_client(ScriptedEngine()) as http:
        made = await http.post(URL, json={**BODY, "stream": True})
        blank = await http.post(URL, json=BODY, headers={"X-Request-Id": "   "})
    assert len(made.headers["x-request-id"]) == 32
    chunk_id = stream_events(made)[0]["id"]
    assert chunk_id == f"chatcmpl-{made.headers['x-request-id']}"
    assert len(blank.headers["x-request-id"]) == 32
    assert blank.json()["id"] == f"chatcmpl-{blank.headers['x-request-id']}"


async def test_an_odd_or_long_id_is_sanitized_and_cut_to_fit_the_usage_table() -> None:
    long_id = "trace/" + "x" * 114  # 120 characters, one of them unsafe
    async with app_client(ScriptedEngine()) as http:
        odd = await http.post(URL, json=BODY, headers={"X-Request-Id": "spaces are\tnot ok"})
        long = await http.post(URL, json=BODY, headers={"X-Request-Id": long_id})
    assert odd.headers["x-request-id"] == "spaces_are_not_ok"
    assert odd.json()["id"].startswith("chatcmpl-spaces_are_not_ok-")
    cut = "trace_" + "x" * (MAX_CLIENT_ID_CHARS - 6)
    assert long.headers["x-request-id"] == cut
    assert long.json()["id"].startswith(f"chatcmpl-{cut}-")
    assert len(long.json()["id"]) <= REQUEST_ID_CHARS


def test_every_id_made_from_a_client_id_fits_and_differs() -> None:
    """Any header (odd characters, any length): `<prefix>-<id>-<suffix>` fits the usage
    table's request_id for the longest prefix the endpoints use, and never repeats."""
    for header in ("a", "é" * 500, "x" * 10_000, "req_" + "0" * 32, "\x00\r\n;"):
        request_id, supplied = accept_request_id(header)
        assert supplied and len(request_id) <= MAX_CLIENT_ID_CHARS
        assert set(request_id) <= set(SAFE)
        record = RequestRecord(request_id, supplied, "POST", URL)
        ids = {record.engine_request_id("chatcmpl") for _ in range(1000)}
        assert len(ids) == 1000
        assert max(len(i) for i in ids) <= REQUEST_ID_CHARS


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", URL, {"model": "nope", "messages": []}, 400),
        ("POST", URL, {**BODY, "model": "nope"}, 404),
        ("GET", "/no/such/route", None, 404),
        ("DELETE", "/v1/models", None, 405),
    ],
)
async def test_errors_carry_the_id_too(method: str, path: str, body: object, status: int) -> None:
    async with app_client(ScriptedEngine()) as http:
        response = await http.request(method, path, json=body, headers={"X-Request-Id": "err-1"})
    assert response.status_code == status
    assert response.headers["x-request-id"] == "err-1"
    assert set(response.json()["error"]) >= {"message", "type", "param", "code"}


async def test_log_lines_written_during_a_request_carry_its_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.handler.addFilter(RequestIdFilter())
    caplog.set_level(logging.INFO)
    async with app_client(ScriptedEngine()) as http:
        await http.post(URL, json=BODY, headers={"X-Request-Id": "logged-7"})
    access = [r for r in caplog.records if r.name == "lilac.access"]
    assert len(access) == 1
    assert access[0].request_id == "logged-7"  # type: ignore[attr-defined]
    fields = access[0].access  # type: ignore[attr-defined]
    assert fields["endpoint"] == URL
    assert fields["model"] == "scripted"
    assert fields["status"] == 200
    assert fields["outcome"] == "ok"
    assert fields["completion_tokens"] == 3
    assert fields["prompt_tokens"] > 0
    assert 0 <= fields["ttft_s"] <= fields["duration_s"]
    assert fields["queue_s"] is not None


def test_made_ids_are_32_hex_digits_unique_and_sort_in_the_order_made() -> None:
    ids = []
    for _ in range(5):
        ids += [new_request_id() for _ in range(2_000)]
        time.sleep(0.002)  # across milliseconds
    assert all(len(i) == 32 and int(i, 16) >= 0 and i == i.lower() for i in ids)
    assert len(set(ids)) == len(ids)
    batches = [ids[i : i + 2_000] for i in range(0, len(ids), 2_000)]
    assert [max(b) for b in batches] == sorted(max(b) for b in batches)
    assert all(max(a) < min(b) for a, b in itertools.pairwise(batches))


async def test_the_anthropic_sdk_reads_the_request_id_on_the_messages_routes() -> None:
    """Anthropic's SDK reads `request-id` (its `_request_id`), not `x-request-id`: the
    Messages routes send both, errors included; the other routes only `x-request-id`."""
    request = {
        "model": "scripted",
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "hi"}],
    }
    async with app_client(ScriptedEngine()) as http:
        sdk = anthropic_sdk(http.app)
        raw = await sdk.messages.with_raw_response.create(**request)
        message = await raw.parse()
        counted = await sdk.messages.count_tokens(model="scripted", messages=request["messages"])
        async with sdk.messages.stream(**request) as stream:
            await stream.get_final_message()
            streamed = stream.request_id
        with pytest.raises(anthropic.NotFoundError) as refused:
            await sdk.messages.create(**{**request, "model": "nope"})
        chat = await http.post(URL, json=BODY)
    assert len(raw.headers["x-request-id"]) == 32
    assert message._request_id == raw.headers["x-request-id"]
    for request_id in (counted._request_id, streamed):
        assert request_id is not None and len(request_id) == 32
    assert refused.value.request_id is not None and len(refused.value.request_id) == 32
    assert "request-id" not in chat.headers and len(chat.headers["x-request-id"]) == 32
