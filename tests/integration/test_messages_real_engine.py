"""The Messages API through the real engine, driven by the real `anthropic` package
(and model retrieval by the `openai` package), in-process over the session's app."""

from __future__ import annotations

import anthropic
import jsonschema
import openai
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from tests.anthropic_sse import anthropic_sdk
from tests.client import AppClient, provided

# The SDK no longer takes sampling parameters (newer API versions dropped them); the
# server still does, so greedy decoding travels in the body.
GREEDY = {"temperature": 0}
MODEL = DEFAULT_MODEL_NAME  # "HuggingFaceTB/SmolLM2-135M-Instruct": an id with a `/`
ASK = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"],
    },
}


@pytest.fixture
def sdk(real_client: AppClient) -> anthropic.AsyncAnthropic:
    sdk: anthropic.AsyncAnthropic = anthropic_sdk(real_client.app)
    return sdk


async def test_create(sdk: anthropic.AsyncAnthropic) -> None:
    message = await sdk.messages.create(
        model=MODEL,
        max_tokens=6,
        system="Answer in one short sentence.",
        messages=ASK,
        extra_body=GREEDY,
        metadata={"user_id": "tester"},
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text" and message.content[0].text.strip()
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert 0 < message.usage.output_tokens <= 6 and message.usage.input_tokens > 0


async def test_stream_matches_the_final_message(sdk: anthropic.AsyncAnthropic) -> None:
    async with sdk.messages.stream(
        model=MODEL,
        max_tokens=6,
        messages=ASK,
        extra_body=GREEDY,
        stop_sequences=["\n\n"],
    ) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert text and final.content[0].type == "text" and final.content[0].text == text
    assert final.stop_reason in ("end_turn", "max_tokens", "stop_sequence")
    assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0


async def test_count_tokens_is_the_prompt_the_engine_ran(sdk: anthropic.AsyncAnthropic) -> None:
    counted = await sdk.messages.count_tokens(model=MODEL, messages=ASK, system="Be brief.")
    message = await sdk.messages.create(
        model=MODEL,
        max_tokens=1,
        messages=ASK,
        system="Be brief.",
    )
    usage = message.usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)


async def test_max_tokens_over_the_room_is_clamped(
    sdk: anthropic.AsyncAnthropic, real_client: AppClient
) -> None:
    # A prompt that leaves a few tokens of the 2048 context, and a hosted-model budget.
    async def prompt_tokens(words: int) -> tuple[list[dict[str, str]], int]:
        messages = [{"role": "user", "content": "hello " * words + "Who are you?"}]
        counted = await sdk.messages.count_tokens(model=MODEL, messages=messages)
        return messages, counted.input_tokens

    _, at_100 = await prompt_tokens(100)
    _, at_200 = await prompt_tokens(200)
    per_word = (at_200 - at_100) / 100
    words = int(100 + (2048 - 16 - at_100) / per_word)
    messages, prompt = await prompt_tokens(words)
    for _ in range(4):  # step to within a few tokens of the target
        if 0 < 2048 - prompt < 32:
            break
        words += int((2048 - 16 - prompt) / per_word)
        messages, prompt = await prompt_tokens(words)
    assert 0 < 2048 - prompt < 32
    raw = await sdk.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=32000,
        messages=messages,
        timeout=120,  # explicit: the SDK refuses a non-streamed 32,000 on its default
    )
    assert raw.headers["x-max-tokens-clamped"] == str(2048 - prompt)
    message = await raw.parse()
    assert message.usage.output_tokens <= 2048 - prompt
    assert provided(real_client.app, "host").unfinished_requests() == 0


async def test_forced_tool_use_and_its_result(sdk: anthropic.AsyncAnthropic) -> None:
    ask = [{"role": "user", "content": "What is the weather like in Paris today?"}]
    first = await sdk.messages.create(
        model=MODEL,
        max_tokens=60,
        messages=ask,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        extra_body=GREEDY,
    )
    assert first.stop_reason == "tool_use"
    calls = [block for block in first.content if block.type == "tool_use"]
    assert [call.name for call in calls] == ["get_weather"]
    jsonschema.validate(calls[0].input, WEATHER["input_schema"])
    followup = [
        *ask,
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": calls[0].id, "content": "Sunny, 21 C"}
            ],
        },
    ]
    second = await sdk.messages.create(
        model=MODEL,
        max_tokens=12,
        messages=followup,
        tools=[WEATHER],
        extra_body=GREEDY,
    )

    # The whole prompt grew by the call and its result (part of it from the prefix cache).
    def prompt(usage: anthropic.types.Usage) -> int:
        return usage.input_tokens + (usage.cache_read_input_tokens or 0)

    assert second.content and prompt(second.usage) > prompt(first.usage)


async def test_bad_request_is_the_sdks_error(sdk: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        await sdk.messages.create(
            model=MODEL,
            max_tokens=4,
            messages=ASK,
            tools=[WEATHER],
            tool_choice={"type": "tool", "name": "nope"},
        )
    assert raised.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError):
        await sdk.messages.create(model="claude-sonnet-4-5", max_tokens=4, messages=ASK)


async def test_models_retrieve(real_client: AppClient) -> None:
    client = openai.AsyncOpenAI(
        base_url="http://127.0.0.1/v1", api_key="unused", http_client=real_client, max_retries=0
    )
    model = await client.models.retrieve(MODEL)
    assert model.id == MODEL and model.object == "model"
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve("org/not-served")
