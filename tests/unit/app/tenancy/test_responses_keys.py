"""The Responses API with `--auth keys`: usage metered under its own endpoint with its
reasoning tokens, limits as chat's, and sealed reasoning bound to the key that got it."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app
from app.settings import Settings
from app.tenancy.service import Tenancy
from engine.protocol import ChoiceDelta, GenerateOutput, GenerateRequest
from engine.scripted import ScriptedEngine
from tests.client import AppClient
from tests.unit.app.tenancy.helpers import ADMIN_KEY, bearer, new_key, usage_rows

URL = "/v1/responses"
SEALED = ["reasoning.encrypted_content"]


class Thinking(ScriptedEngine):
    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        self.requests.append(request)
        steps = [
            ChoiceDelta(0, "", 2, reasoning="Hmm.", reasoning_token_count=2),
            ChoiceDelta(0, "Yes", 1, "stop"),
        ]
        assert request.tally is not None  # what is billed: the engine's own account
        request.tally.accepted(6)
        for step in steps:
            request.tally.generated(step.token_count)
            yield GenerateOutput(prompt_tokens=6, choices=[step])


def response(**extra: Any) -> dict[str, Any]:
    return {"model": "scripted", "input": "hi", "store": False, **extra}


async def test_responses_are_metered_limited_and_sealed_per_key(
    database: AsyncEngine, tmp_path: Path
) -> None:
    tenancy = Tenancy.with_database(database, tmp_path / "spool")
    settings = Settings(admin_key=ADMIN_KEY, auth="keys", data_dir=str(tmp_path / "data"))
    app = create_app(settings, engine=Thinking(), tenancy=tenancy)
    async with AppClient(app, timeout=10) as http:
        owner_id, owner = await new_key(tenancy, rpm=3)
        _, other = await new_key(tenancy)
        whole = await http.post(URL, json=response(include=SEALED), headers=bearer(owner))
        assert whole.status_code == 200, whole.text
        assert whole.headers["x-ratelimit-remaining-requests"] == "2"
        streamed = await http.post(URL, json=response(stream=True), headers=bearer(owner))
        assert streamed.status_code == 200 and "response.completed" in streamed.text
        reasoning = whole.json()["output"][0]
        carried = [
            {"role": "user", "content": "hi"},
            {
                "type": "reasoning",
                "summary": [],
                "encrypted_content": reasoning["encrypted_content"],
            },
            {"role": "user", "content": "and?"},
        ]
        # Another key cannot have the owner's reasoning rendered: its blob is foreign.
        foreign = await http.post(URL, json=response(input=carried), headers=bearer(other))
        assert foreign.status_code == 400
        assert foreign.json()["error"]["code"] == "invalid_encrypted_content"
        own = await http.post(URL, json=response(input=carried), headers=bearer(owner))
        assert own.status_code == 200, own.text
        refused = await http.post(URL, json=response(), headers=bearer(owner))
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        unkeyed = await http.post(URL, json=response())
        assert unkeyed.status_code == 401
    assert tenancy.writer is not None
    await tenancy.writer.close()
    rows = await usage_rows(database)
    mine = [row for row in rows if row.key_id == owner_id]
    assert [(r.endpoint, r.outcome) for r in mine] == [(URL, "completed")] * 3
    assert mine[0].request_id == whole.json()["id"]
    assert mine[0].completion_tokens == whole.json()["usage"]["output_tokens"] == 3
    assert mine[0].prompt_tokens == whole.json()["usage"]["input_tokens"] == 6
    assert mine[0].reasoning_tokens == 2
