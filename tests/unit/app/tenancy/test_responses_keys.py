"""The Responses API with `--auth keys`: usage metered under its own endpoint with its
reasoning tokens, limits as chat's, and sealed reasoning bound to the key that got it."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.main import create_app
from app.tenancy.service import Tenancy
from engine.protocol import ChoiceDelta, GenerateOutput, GenerateRequest, ToolCallDelta
from engine.scripted import ScriptedEngine
from tests.client import AppClient
from tests.unit.app.tenancy.helpers import ADMIN_KEY, bearer, new_key, usage_rows

URL = "/v1/responses"
SEALED = ["reasoning.encrypted_content"]


class Scripts(ScriptedEngine):
    """Plays one script (ChoiceDelta steps) per request, in order; remembers requests."""

    def __init__(self, *scripts: list[ChoiceDelta]) -> None:
        super().__init__()
        self.scripts = list(scripts)

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        self.requests.append(request)
        for step in self.scripts.pop(0):
            yield GenerateOutput(prompt_tokens=4, choices=[step])


CALL = [
    ChoiceDelta(0, "", 1, tool_calls=[ToolCallDelta(0, "call_7", "lookup", "")]),
    ChoiceDelta(0, "", 1, "tool_calls", tool_calls=[ToolCallDelta(0, None, None, '{"q": 1}')]),
]


def answer(text: str) -> list[ChoiceDelta]:
    return [ChoiceDelta(0, text, 1, "stop")]


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


async def test_a_stored_chain_with_a_function_call_in_the_middle(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = Scripts(answer("Hi."), CALL, answer("It is 1."), answer("Gone."))
    tenancy = Tenancy.with_database(database, tmp_path / "spool")
    settings = Settings(admin_key=ADMIN_KEY, auth="keys", data_dir=str(tmp_path / "data"))
    app = create_app(settings, engine=engine, tenancy=tenancy)
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    async with AppClient(app, timeout=10) as http:
        _, mine = await new_key(tenancy)
        _, theirs = await new_key(tenancy)
        me, them = bearer(mine), bearer(theirs)
        first = await http.post(URL, json={"model": "scripted", "input": "hello"}, headers=me)
        assert first.status_code == 200 and first.json()["store"] is True
        second = await http.post(
            URL,
            json={
                "model": "scripted",
                "input": "look it up",
                "tools": [tool],
                "previous_response_id": first.json()["id"],
                "stream": True,
            },
            headers=me,
        )
        assert second.status_code == 200
        done = [line for line in second.text.split("\n") if '"response.completed"' in line]
        second_body = json.loads(done[0].removeprefix("data: "))["response"]
        [call] = second_body["output"]
        assert call["type"] == "function_call" and call["call_id"] == "call_7"
        output = {"type": "function_call_output", "call_id": "call_7", "output": "1"}
        continued = {"model": "scripted", "previous_response_id": second_body["id"]}
        # Another key cannot continue, read or delete this key's responses.
        foreign = await http.post(URL, json={**continued, "input": [output]}, headers=them)
        assert foreign.status_code == 404
        assert foreign.json()["error"]["param"] == "previous_response_id"
        assert (await http.get(f"{URL}/{second_body['id']}", headers=them)).status_code == 404
        third = await http.post(
            URL, json={**continued, "input": [output], "tools": [tool]}, headers=me
        )
        assert third.status_code == 200, third.text
        assert third.json()["output"][0]["content"][0]["text"] == "It is 1."
        # The stored Response is the one that was returned.
        stored = await http.get(f"{URL}/{third.json()['id']}", headers=me)
        assert stored.json() == third.json()
        # Its input items are the context it saw: the chain's items, then its own.
        listed = await http.get(f"{URL}/{third.json()['id']}/input_items?order=asc", headers=me)
        assert [item["type"] for item in listed.json()["data"]] == [
            "message",
            "message",
            "message",
            "function_call",
            "function_call_output",
        ]
        unstored = await http.post(
            URL, json={"model": "scripted", "input": "x", "store": False}, headers=me
        )
        assert (await http.get(f"{URL}/{unstored.json()['id']}", headers=me)).status_code == 404
    assert tenancy.writer is not None
    await tenancy.writer.close()
    # The third turn's prompt holds every item of the chain, the call and its output too.
    prompt = engine.requests[2].messages
    assert [m["role"] for m in prompt] == ["user", "assistant", "user", "assistant", "tool"]
    assert prompt[1]["content"] == "Hi."
    assert prompt[3]["tool_calls"][0]["id"] == "call_7"
    assert prompt[3]["tool_calls"][0]["function"] == {"name": "lookup", "arguments": {"q": 1}}
    assert prompt[4] == {"role": "tool", "content": "1", "tool_call_id": "call_7"}
