"""GET and DELETE /v1/responses/{id} and its input_items, through the app with two keys
and the real `openai` client, on both backends: a row saved through the store reads back
as the SDK expects, and only for the key that made it."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.main import create_app
from app.storage.responses import ResponseStore, StoredResponse
from tests.client import AppClient, provided
from tests.unit.app.tenancy.helpers import ADMIN_KEY, bearer, keyed_app, new_key


def response_body(response_id: str, text: str) -> dict[str, Any]:
    """A Response object as POST /v1/responses returns it."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1_800_000_000,
        "status": "completed",
        "model": "scripted",
        "output": [
            {
                "type": "message",
                "id": f"msg_{response_id}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 5,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 7,
        },
    }


def input_items(count: int) -> list[dict[str, Any]]:
    return [
        {"id": f"item_{i}", "type": "message", "role": "user",
         "content": [{"type": "input_text", "text": f"question {i}"}]}
        for i in range(count)
    ]  # fmt: skip


async def save(store: ResponseStore, owner: str, response_id: str, items: int = 3) -> bytes:
    body = json.dumps(response_body(response_id, "Paris")).encode()
    await store.save(
        StoredResponse(
            id=response_id,
            owner=owner,
            model="scripted",
            created_at=time.time(),
            previous_response_id=None,
            status="completed",
            response=body,
            input_items=json.dumps(input_items(items)).encode(),
            output_items=json.dumps(response_body(response_id, "Paris")["output"]).encode(),
        )
    )
    return body


def sdk(http: AppClient, secret: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://127.0.0.1/v1", api_key=secret, http_client=http, max_retries=0
    )


@asynccontextmanager
async def two_keys(
    database: AsyncEngine, tmp_path: Path
) -> AsyncIterator[tuple[AppClient, ResponseStore, tuple[str, str], tuple[str, str]]]:
    """The keyed app; its store; key A and key B as (id, secret)."""
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        a = await new_key(tenancy)
        b = await new_key(tenancy)
        yield http, provided(http.app, "response_store"), a, b


async def test_retrieve_returns_the_stored_response(database: AsyncEngine, tmp_path: Path) -> None:
    async with two_keys(database, tmp_path) as (http, store, (a_id, a_secret), _):
        body = await save(store, a_id, "resp_1")
        retrieved = await sdk(http, a_secret).responses.retrieve("resp_1")
        raw = await http.get("/v1/responses/resp_1", headers=bearer(a_secret))
    assert retrieved.id == "resp_1" and retrieved.status == "completed"
    assert retrieved.output_text == "Paris" and retrieved.usage is not None
    assert retrieved.usage.output_tokens == 2
    assert raw.status_code == 200 and raw.content == body
    assert raw.headers["content-type"].startswith("application/json")


async def test_another_key_gets_404_and_cannot_delete(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with two_keys(database, tmp_path) as (http, store, (a_id, a_secret), (_, b_secret)):
        await save(store, a_id, "resp_a")
        b = sdk(http, b_secret).responses
        for attempt in (b.retrieve("resp_a"), b.delete("resp_a"), b.input_items.list("resp_a")):
            with pytest.raises(openai.NotFoundError) as caught:
                await attempt
            assert caught.value.code == "response_not_found"
        unknown = await http.get("/v1/responses/resp_nope", headers=bearer(b_secret))
        still = await sdk(http, a_secret).responses.retrieve("resp_a")
    foreign = caught.value.response.json()["error"]
    assert unknown.status_code == 404
    # A foreign id and an unknown one read alike but for the id itself.
    assert unknown.json()["error"]["message"].replace("resp_nope", "resp_a") == foreign["message"]
    assert still.id == "resp_a"


async def test_delete_answers_as_openai_then_the_response_is_gone(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with two_keys(database, tmp_path) as (http, store, (a_id, a_secret), _):
        await save(store, a_id, "resp_1")
        await save(store, a_id, "resp_2")
        raw = await http.delete("/v1/responses/resp_1", headers=bearer(a_secret))
        client = sdk(http, a_secret)
        await client.responses.delete("resp_2")  # the SDK's call returns nothing
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve("resp_1")
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve("resp_2")
        again = await http.delete("/v1/responses/resp_1", headers=bearer(a_secret))
    assert raw.status_code == 200
    assert raw.json() == {"id": "resp_1", "object": "response", "deleted": True}
    assert again.status_code == 404


async def test_input_items_page_as_the_sdk_expects(database: AsyncEngine, tmp_path: Path) -> None:
    async with two_keys(database, tmp_path) as (http, store, (a_id, a_secret), _):
        await save(store, a_id, "resp_1", items=25)
        items = sdk(http, a_secret).responses.input_items
        first = await items.list("resp_1")
        every = [item.id async for item in items.list("resp_1", limit=7)]  # auto-paging
        ascending = [item.id async for item in items.list("resp_1", order="asc", limit=100)]
        after = await items.list("resp_1", order="asc", after="item_3", limit=2)
        before = await items.list(
            "resp_1", order="asc", limit=3, extra_query={"before": "item_10"}
        )  # OpenAI documents `before`; this SDK passes it as an extra
        included = await items.list("resp_1", include=["message.input_image.image_url"])
    assert len(first.data) == 20 and first.has_more
    assert first.first_id == "item_24" and first.last_id == "item_5"  # newest first
    assert first.data[0].type == "message"
    assert every == [f"item_{i}" for i in reversed(range(25))]
    assert ascending == [f"item_{i}" for i in range(25)]
    assert [i.id for i in after.data] == ["item_4", "item_5"] and after.has_more
    assert [i.id for i in before.data] == ["item_7", "item_8", "item_9"] and before.has_more
    assert len(included.data) == 20


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=ten", "limit"),
        ("order=sideways", "order"),
        ("after=item_nope", "after"),
        ("before=item_nope", "before"),
    ],
)
async def test_bad_listing_queries_are_400s(
    database: AsyncEngine, tmp_path: Path, query: str, param: str
) -> None:
    async with two_keys(database, tmp_path) as (http, store, (a_id, a_secret), _):
        await save(store, a_id, "resp_1")
        answer = await http.get(
            f"/v1/responses/resp_1/input_items?{query}", headers=bearer(a_secret)
        )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


async def test_streaming_a_response_not_made_in_the_background_is_a_400(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with two_keys(database, tmp_path) as (http, store, (a_id, a_secret), _):
        await save(store, a_id, "resp_1")
        answer = await http.get("/v1/responses/resp_1?stream=true", headers=bearer(a_secret))
        plain = await http.get("/v1/responses/resp_1?stream=false", headers=bearer(a_secret))
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "stream"
    assert "background" in answer.json()["error"]["message"]
    assert plain.status_code == 200


async def test_a_revoked_key_gets_401(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        store: ResponseStore = provided(http.app, "response_store")
        await save(store, key_id, "resp_1")
        before = await http.get("/v1/responses/resp_1", headers=bearer(secret))
        revoked = await http.delete(f"/admin/keys/{key_id}", headers=bearer(ADMIN_KEY))
        answers = [
            await http.get("/v1/responses/resp_1", headers=bearer(secret)),
            await http.delete("/v1/responses/resp_1", headers=bearer(secret)),
            await http.get("/v1/responses/resp_1/input_items", headers=bearer(secret)),
            await http.get("/v1/responses/resp_1"),
        ]
    assert before.status_code == 200 and revoked.status_code == 200
    assert [a.status_code for a in answers] == [401] * 4
    assert {a.json()["error"]["code"] for a in answers} == {"invalid_api_key"}


async def test_without_keys_reads_create_no_database(tmp_path: Path) -> None:
    """`--auth none`: the anonymous owner's responses; a read before anything was stored
    is a 404 and makes no database file."""
    from engine.scripted import ScriptedEngine

    settings = Settings(auth="none", data_dir=str(tmp_path / "data"))
    app = create_app(settings, engine=ScriptedEngine())
    async with AppClient(app, timeout=10) as http:
        missing = await http.get("/v1/responses/resp_1")
        created = not (tmp_path / "data").exists()
        store: ResponseStore = provided(app, "response_store")
        await save(store, "anonymous", "resp_1")
        found = await http.get("/v1/responses/resp_1")
        await store.database.close()
    assert missing.status_code == 404 and created
    assert found.status_code == 200 and found.json()["id"] == "resp_1"


async def test_an_unusable_database_is_a_503(tmp_path: Path) -> None:
    from engine.scripted import ScriptedEngine

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    settings = Settings(auth="none", database_url=f"postgresql://nobody@/x?host={blocker}")
    app = create_app(settings, engine=ScriptedEngine())
    async with AppClient(app, timeout=20) as http:
        answer = await http.get("/v1/responses/resp_1")
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "database_unavailable" and str(blocker) not in error["message"]
    assert answer.headers["retry-after"]
