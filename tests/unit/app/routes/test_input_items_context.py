"""GET /v1/responses/{id}/input_items lists the context the response saw, as OpenAI's
does: the items of the responses it continued through `previous_response_id` (each
one's input, then its output), then its own input; paged by `after`, `limit` and
`order` through the `openai` SDK. A response of the chain deleted since is left out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.unit.app.tenancy.helpers import keyed_app, new_key
from tests.unit.app.tenancy.test_responses_keys import CALL, Scripts, answer

TOOL: Any = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}


def described(item: Any) -> tuple[str, str]:
    """(type, what it holds) of a listed item."""
    if item.type == "message":
        return f"{item.role} message", item.content[0].text
    if item.type == "function_call":
        return "function_call", item.call_id
    return item.type, item.output


async def test_input_items_list_the_context_of_a_chain(
    database: AsyncEngine, tmp_path: Path
) -> None:
    engine = Scripts(answer("Hi."), CALL, answer("It is 1."))
    async with keyed_app(database, tmp_path / "spool.jsonl", engine) as (http, tenancy):
        _, secret = await new_key(tenancy)
        sdk = openai.AsyncOpenAI(
            base_url="http://127.0.0.1/v1", api_key=secret, http_client=http, max_retries=0
        )
        first = await sdk.responses.create(model="scripted", input="hello")
        second = await sdk.responses.create(
            model="scripted", input="look it up", tools=[TOOL], previous_response_id=first.id
        )
        output = {"type": "function_call_output", "call_id": "call_7", "output": "1"}
        third = await sdk.responses.create(
            model="scripted", input=[output], tools=[TOOL], previous_response_id=second.id
        )
        items = sdk.responses.input_items
        ascending = await items.list(third.id, order="asc")
        newest_first = [item async for item in items.list(third.id, limit=2)]  # auto-paging
        after = await items.list(third.id, order="asc", after=ascending.data[1].id, limit=2)
        own = await items.list(first.id)
        await sdk.responses.delete(first.id)
        without_first = await items.list(third.id, order="asc")
    assert [described(item) for item in ascending.data] == [
        ("user message", "hello"),
        ("assistant message", "Hi."),
        ("user message", "look it up"),
        ("function_call", "call_7"),
        ("function_call_output", "1"),
    ]
    assert not ascending.has_more and ascending.first_id == ascending.data[0].id
    assert [item.id for item in ascending.data] == [item.id for item in reversed(newest_first)]
    assert [item.id for item in after.data] == [item.id for item in ascending.data[2:4]]
    assert after.has_more
    assert [described(item) for item in own.data] == [("user message", "hello")]
    assert [described(item) for item in without_first.data] == [
        ("user message", "look it up"),
        ("function_call", "call_7"),
        ("function_call_output", "1"),
    ]
