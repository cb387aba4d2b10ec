"""The Responses API of the running server, through the real model, driven by the real
`openai` client (`responses.create`, `responses.stream`, a stored chain, a background
response polled, replayed and cancelled) and by the
OpenAI Agents SDK (an agent with one function tool, forced, on the Responses model)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import Server

LOOKUP = {
    "type": "function",
    "name": "lookup",
    "description": "Look up a city's population.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
ASK = {"model": DEFAULT_MODEL_NAME, "temperature": 0, "max_output_tokens": 8}


@pytest.fixture(scope="module")
def sdk(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def test_create(sdk: openai.OpenAI) -> None:
    response = sdk.responses.create(
        input=[{"role": "user", "content": "What is the capital of France?"}],
        instructions="Answer in one word.",
        store=False,
        **ASK,
    )
    assert response.status in ("completed", "incomplete")
    assert response.output_text.strip()
    assert response.output[0].type == "message"
    usage = response.usage
    assert usage is not None and usage.input_tokens > 0
    assert 0 < usage.output_tokens <= 8
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    if response.status == "incomplete":
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"


def test_stream_helper_and_raw_events(sdk: openai.OpenAI) -> None:
    ask = {**ASK, "max_output_tokens": 16}
    france = {"input": "What is the capital of France?", "instructions": "Answer in one word."}
    with sdk.responses.stream(store=False, **france, **ask) as stream:
        events = list(stream)
        kinds = [event.type for event in events]
        # The helper's final response is that of `response.completed`; an incomplete
        # response ends in `response.incomplete`, as OpenAI's do.
        final = stream.get_final_response() if kinds[-1] == "response.completed" else None
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert "response.output_text.delta" in kinds and "response.output_item.done" in kinds
    last = events[-1].response  # type: ignore[union-attr]  # a lifecycle event
    if final is not None:
        assert final.output_text.strip() and final.status == "completed"
    else:
        assert last.status == "incomplete" and last.output_text.strip()
    numbers = [
        event.sequence_number
        for event in sdk.responses.create(store=False, stream=True, **france, **ask)
    ]
    assert numbers == list(range(len(numbers)))


def test_a_chain_of_three_with_a_function_call(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(input="Hi, I have a question.", **ASK)
    assert first.store is True
    second = sdk.responses.create(
        input="How many people live in Paris?",
        previous_response_id=first.id,
        tools=[LOOKUP],
        tool_choice={"type": "function", "name": "lookup"},
        **{**ASK, "max_output_tokens": 40},
    )
    [call] = [item for item in second.output if item.type == "function_call"]
    assert call.name == "lookup" and call.call_id
    assert isinstance(call.arguments, str) and call.arguments.startswith("{")
    third = sdk.responses.create(
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "2.1 million"}],
        previous_response_id=second.id,
        tools=[LOOKUP],
        **ASK,
    )
    assert third.previous_response_id == second.id
    assert third.usage is not None and second.usage is not None
    # The whole chain is the prompt: more than the second turn's.
    assert third.usage.input_tokens > second.usage.input_tokens
    assert sdk.responses.retrieve(third.id).output_text == third.output_text
    # Its input items are the context it saw: the chain's items, then its own.
    listed = sdk.responses.input_items.list(third.id, order="asc")
    assert [item.type for item in listed.data] == [
        "message",
        "message",
        "message",
        "function_call",
        "function_call_output",
    ]


def test_an_agents_sdk_run_with_a_forced_tool(server: Server) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIResponsesModel,
        Runner,
        WebSearchTool,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)  # no trace export: the hub is unreachable
    calls: list[str] = []

    @function_tool
    def lookup(city: str) -> str:
        """Look up a city's population."""
        calls.append(city)
        return "2.1 million"

    client = openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    agent = Agent(
        name="Census",
        instructions="Use the lookup tool.",
        # A hosted tool, as agents send them: not served, not offered, no failure.
        tools=[lookup, WebSearchTool()],
        model=OpenAIResponsesModel(model=DEFAULT_MODEL_NAME, openai_client=client),
        model_settings=ModelSettings(tool_choice="lookup", max_tokens=40, temperature=0),
        tool_use_behavior="stop_on_first_tool",
    )

    async def run() -> object:
        try:
            return await Runner.run(agent, "How many people live in Paris?", max_turns=3)
        finally:
            await client.close()

    result = asyncio.run(run())
    assert len(calls) == 1 and calls[0]  # the tool ran, with the model's argument
    assert result.final_output == "2.1 million"  # type: ignore[attr-defined]  # RunResult


def _until_final(sdk: openai.OpenAI, response_id: str, timeout_s: float = 240) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = sdk.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress"):
            return response
        time.sleep(0.2)
    raise AssertionError(f"background response {response_id} not final in time")


def test_a_background_response_polled_replayed_and_cancelled(sdk: openai.OpenAI) -> None:
    queued = sdk.responses.create(
        input="What is the capital of France?", background=True, **{**ASK, "max_output_tokens": 12}
    )
    assert queued.status == "queued" and queued.background is True and queued.output == []
    done = _until_final(sdk, queued.id)
    assert done.status in ("completed", "incomplete") and done.output_text.strip()
    assert done.usage is not None and 0 < done.usage.output_tokens <= 12
    events = list(sdk.responses.retrieve(queued.id, stream=True))
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(len(numbers)))
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert events[-1].response.output_text == done.output_text  # type: ignore[union-attr]
    after = list(sdk.responses.retrieve(queued.id, stream=True, starting_after=2))
    assert [event.sequence_number for event in after] == numbers[3:]
    with pytest.raises(openai.BadRequestError):
        sdk.responses.cancel(queued.id)  # finished: nothing to cancel
    with pytest.raises(openai.BadRequestError):
        sdk.responses.retrieve(queued.id, stream=True, starting_after=len(numbers))

    long = sdk.responses.create(
        input="Count from 1 to 500, separated by commas.",
        background=True,
        **{**ASK, "max_output_tokens": 400},
    )
    deadline = time.monotonic() + 120
    while sdk.responses.retrieve(long.id).status == "queued" and time.monotonic() < deadline:
        time.sleep(0.1)
    cancelled = sdk.responses.cancel(long.id)
    assert cancelled.status == "cancelled"
    assert sdk.responses.retrieve(long.id).status == "cancelled"
    assert cancelled.usage is None or cancelled.usage.output_tokens < 400
    plain = sdk.responses.create(input="Hi", **ASK)
    with pytest.raises(openai.BadRequestError):
        sdk.responses.cancel(plain.id)  # not a background response
    with pytest.raises(openai.BadRequestError):
        sdk.responses.create(input="Hi", background=True, store=False, **ASK)
