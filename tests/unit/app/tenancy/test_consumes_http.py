"""Every keyed route declares what it consumes and goes through the one admission,
`Tenancy.admit` (over HTTP, scripted engine, a real keys database on both backends):
the generation routes reserve tokens and slots and get a meter; `/tokenize`,
`/detokenize`, `count_tokens`, creating a background response and creating a batch take
one request per minute and write no usage row. A key with one request a minute gets a
429 with Retry-After from the second of each, and a model it may not use is a 404."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.tenancy.consumes import Consumes
from app.tenancy.meter import RequestMeter
from app.tenancy.service import Tenancy
from tests.unit.app.deferred.test_batches_http import CHAT, chat_line, upload
from tests.unit.app.tenancy.helpers import bearer, chat, keyed_app, new_key, usage_rows

MESSAGE = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
RESPONSE = {"model": "scripted", "input": "hi", "max_output_tokens": 4}
# (path, body, what it generates): the routes a key calls, and whether each runs the engine.
CALLS: list[tuple[str, dict[str, Any], bool]] = [
    ("/v1/chat/completions", chat(max_tokens=4), True),
    ("/v1/chat/completions", chat(max_tokens=4, stream=True), True),
    ("/v1/completions", {"model": "scripted", "prompt": "hi", "max_tokens": 4}, True),
    ("/v1/messages", {**MESSAGE, "max_tokens": 4}, True),
    ("/v1/responses", RESPONSE, True),
    ("/tokenize", {"model": "scripted", "prompt": "hi"}, False),
    ("/detokenize", {"model": "scripted", "tokens": [1, 2]}, False),
    ("/v1/messages/count_tokens", MESSAGE, False),
    ("/v1/responses", {**RESPONSE, "background": True}, False),
]


def recorded(tenancy: Tenancy, monkeypatch: pytest.MonkeyPatch) -> list[Consumes]:
    """Every `Consumes` the routes hand to the tenancy, in order."""
    seen: list[Consumes] = []
    admit, admit_now = tenancy.admit, tenancy.admit_now

    async def spied(key: Any, consumes: Consumes) -> RequestMeter | None:
        if not seen or seen[-1] is not consumes:  # admit_now's fallback: one request
            seen.append(consumes)
        return await admit(key, consumes)

    def spied_now(key: Any, consumes: Consumes) -> RequestMeter | None:
        seen.append(consumes)
        return admit_now(key, consumes)

    monkeypatch.setattr(tenancy, "admit", spied)
    monkeypatch.setattr(tenancy, "admit_now", spied_now)
    return seen


async def test_each_route_declares_what_it_consumes(
    database: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        seen = recorded(tenancy, monkeypatch)
        for path, body, _ in CALLS:
            answer = await http.post(path, json=body, headers=bearer(secret))
            assert answer.status_code == 200, (path, answer.text)
        file_id = await upload(http, key_id, [chat_line("a")])
        batch = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}
        created = await http.post("/v1/batches", json=batch, headers=bearer(secret))
        assert created.status_code == 200, created.text
        await tenancy.writer.close()  # type: ignore[union-attr]  # every row written
        rows = await usage_rows(database)
    expected = [(path, generates) for path, _, generates in CALLS] + [("/v1/batches", False)]
    assert [(c.endpoint, c.generates) for c in seen] == expected
    assert all(c.model == "scripted" for c in seen[:-1]) and seen[-1].model is None
    assert all(c.tokens > 0 for c in seen if c.generates)
    # A usage row for each request that generated, none for the others.
    assert sorted(r.endpoint for r in rows) == sorted(p for p, g in expected if g)


@pytest.mark.parametrize("path, body, generates", CALLS[5:])
async def test_a_request_that_generates_nothing_takes_one_request_a_minute(
    database: AsyncEngine, tmp_path: Path, path: str, body: dict[str, Any], generates: bool
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        _, secret = await new_key(tenancy, rpm=1)
        _, narrow = await new_key(tenancy, models=("other",))
        first = await http.post(path, json=body, headers=bearer(secret))
        second = await http.post(path, json=body, headers=bearer(secret))
        elsewhere = await http.post(path, json=body, headers=bearer(narrow))
    assert first.status_code == 200, first.text
    assert second.status_code == 429 and int(second.headers["retry-after"]) >= 1
    assert elsewhere.status_code == 404, elsewhere.text
