"""Reasoning on the wire, over an engine that scripts reasoning and content deltas."""

import httpx

from engine.protocol import ChoiceDelta, GenerateOutput, GenerateRequest
from engine.scripted import ScriptedEngine
from tests.client import app_client, stream_events

URL = "/v1/chat/completions"
USER = [{"role": "user", "content": "hi"}]
# (reasoning, content) per step
SCRIPT = [("Let me ", ""), ("think.", ""), ("", "Hello"), ("", "!")]


class ReasoningEngine(ScriptedEngine):
    """Plays SCRIPT as one choice; remembers the requests it got."""

    async def generate(self, request: GenerateRequest):
        self.requests.append(request)
        for step, (reasoning, text) in enumerate(SCRIPT):
            finish = "stop" if step == len(SCRIPT) - 1 else None
            delta = ChoiceDelta(0, text, 1, finish, reasoning=reasoning)
            yield GenerateOutput(prompt_tokens=3, choices=[delta])


async def post(engine: ScriptedEngine, body: dict) -> httpx.Response:
    async with app_client(engine) as http:
        return await http.post(URL, json={"model": "scripted", "messages": USER, **body})


async def test_message_reasoning_apart_from_content() -> None:
    body = (await post(ReasoningEngine(), {})).json()
    message = body["choices"][0]["message"]
    assert message["reasoning"] == "Let me think." and message["content"] == "Hello!"
    assert body["usage"]["completion_tokens"] == 4  # reasoning tokens count


async def test_no_reasoning_key_without_reasoning() -> None:
    body = (await post(ScriptedEngine(), {})).json()
    assert "reasoning" not in body["choices"][0]["message"]


async def test_delta_reasoning_when_streaming() -> None:
    response = await post(ReasoningEngine(), {"stream": True})
    deltas = [e["choices"][0]["delta"] for e in stream_events(response)]
    assert deltas == [
        {"role": "assistant", "reasoning": "Let me "},
        {"reasoning": "think."},
        {"content": "Hello"},
        {"content": "!"},
    ]


async def test_reasoning_controls_reach_the_engine() -> None:
    engine = ReasoningEngine()
    body = {
        "chat_template_kwargs": {"thinking": False, "custom": [1]},
        "enable_thinking": False,
        "reasoning_effort": "max",
    }
    assert (await post(engine, body)).status_code == 200
    request = engine.requests[0]
    assert request.template_kwargs == {"thinking": False, "custom": [1]}
    assert request.reasoning_controls == {"enable_thinking": False, "reasoning_effort": "max"}


async def test_top_level_toggle_of_the_wrong_type_is_400() -> None:
    for field, value in (("thinking", "off"), ("enable_thinking", 0), ("reasoning_effort", 5)):
        response = await post(ScriptedEngine(), {field: value})
        assert response.status_code == 400
        assert response.json()["error"]["param"] == field
    response = await post(ScriptedEngine(), {"chat_template_kwargs": ["thinking"]})
    assert response.json()["error"]["param"] == "chat_template_kwargs"
