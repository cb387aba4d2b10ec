"""Background responses are named as foreground ones are: `resp_` and the request's id
(what the `openai` SDK reads as `_request_id`), 32 hex digits when the server made it;
a client's X-Request-Id, as in the foreground, then a UUID, cut to fit (both databases)."""

from __future__ import annotations

import re
from pathlib import Path

import openai
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.deferred import JOB_ID_CHARS
from tests.unit.app.deferred.test_background_http import finished
from tests.unit.app.tenancy.helpers import keyed_app, new_key

MADE = re.compile(r"resp_[0-9a-f]{32}")


async def test_background_ids_have_the_foreground_form(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        _, secret = await new_key(tenancy)
        sdk = openai.AsyncOpenAI(
            base_url="http://127.0.0.1/v1", api_key=secret, http_client=http, max_retries=0
        )
        foreground = await sdk.responses.create(model="scripted", input="hi")
        background = await sdk.responses.create(model="scripted", input="hi", background=True)
        client_id = "job-" + "7" * 32  # 36 characters, the most kept of a client's id
        named = await sdk.responses.create(
            model="scripted",
            input="hi",
            background=True,
            extra_headers={"X-Request-Id": client_id},
        )
        done = await finished(http, secret, named.id)
        retrieved = await sdk.responses.retrieve(background.id)
    for response in (foreground, background):
        assert MADE.fullmatch(response.id), response.id
        assert response.id == "resp_" + str(response._request_id)
    assert background.status == "queued" and retrieved.id == background.id
    assert named._request_id == client_id
    assert named.id.startswith("resp_job") and len(named.id) <= JOB_ID_CHARS
    assert done["id"] == named.id and done["status"] == "completed"
