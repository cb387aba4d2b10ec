"""The soak harness's clients: one kind of request each, and what became of it.

Every client returns a `Result` naming its outcome, one of:

- `status <code>` for a non-streamed answer (or a streamed one refused before the stream),
- `stream completed` (200, ended in `[DONE]` without an error event),
- `stream error event <code>` (200, then an error event),
- `abandoned` (the client gave up on purpose, at the point its kind names),
- `connection error` (refused, reset or closed by the server before a whole answer),
- `client timeout` (no answer within the client's patience).

Bad inputs expect a 4xx; `Result.bad_input` says when one was sent, so the report can
count the ones that did not get one.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from engine.checkpoint import DEFAULT_MODEL_NAME

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
PATIENCE_S = 120.0

PROMPTS = [
    "What is the capital of France?",
    "Name a colour.",
    "Count to five.",
    "Say hello in Spanish.",
    "Tell me a story about a lighthouse.",
]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"],
        },
    },
}
ANSWER_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {
            "type": "object",
            "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
            "required": ["answer"],
        },
    },
}
# Each gets a 4xx from today's server: (path, raw body).
BAD_INPUTS: list[tuple[str, bytes]] = [
    (CHAT, b"this is not json"),
    (CHAT, json.dumps({"model": DEFAULT_MODEL_NAME}).encode()),
    (CHAT, json.dumps({"model": DEFAULT_MODEL_NAME, "messages": []}).encode()),
    (CHAT, json.dumps({"model": "nope", "messages": [{"role": "user", "content": "x"}]}).encode()),
    (
        CHAT,
        json.dumps(
            {
                "model": DEFAULT_MODEL_NAME,
                "messages": [{"role": "user", "content": "x"}],
                "temperature": -3,
            }
        ).encode(),
    ),
    (CHAT, json.dumps({"model": DEFAULT_MODEL_NAME, "messages": [{"role": "robot"}]}).encode()),
    (COMPLETIONS, json.dumps({"model": DEFAULT_MODEL_NAME, "prompt": "x", "n": 0}).encode()),
]


@dataclass(slots=True)
class Result:
    kind: str
    started: float  # time.monotonic()
    ended: float
    outcome: str
    status: int | None = None
    bad_input: bool = False

    @property
    def failed(self) -> bool:
        """An answer that is a failure unless a fault explains it."""
        if self.outcome in ("connection error", "client timeout"):
            return True
        if self.outcome.startswith("stream error event"):
            return True
        return self.status is not None and self.status >= 500


@dataclass(frozen=True, slots=True)
class Traffic:
    base_url: str
    max_tokens: int
    rng: random.Random

    def tokens(self) -> int:
        return self.rng.randint(1, self.max_tokens)

    def chat(self, **extra: object) -> dict[str, object]:
        body: dict[str, object] = {
            "model": DEFAULT_MODEL_NAME,
            "messages": [{"role": "user", "content": self.rng.choice(PROMPTS)}],
            "max_tokens": self.tokens(),
        }
        return {**body, **extra}

    def completion(self, **extra: object) -> dict[str, object]:
        body: dict[str, object] = {
            "model": DEFAULT_MODEL_NAME,
            "prompt": self.rng.choice(PROMPTS),
            "max_tokens": self.tokens(),
        }
        return {**body, **extra}


Client = Callable[[httpx.AsyncClient, Traffic], Awaitable[Result]]


async def plain(http: httpx.AsyncClient, kind: str, path: str, body: dict[str, object]) -> Result:
    started = time.monotonic()
    try:
        response = await http.post(path, json=body, timeout=PATIENCE_S)
    except httpx.TimeoutException:
        return Result(kind, started, time.monotonic(), "client timeout")
    except httpx.TransportError:
        return Result(kind, started, time.monotonic(), "connection error")
    code = response.status_code
    return Result(kind, started, time.monotonic(), f"status {code}", code)


async def streamed(
    http: httpx.AsyncClient,
    kind: str,
    path: str,
    body: dict[str, object],
    abandon_after_events: int | None = None,
) -> Result:
    """A streamed request read to its end, or dropped after `abandon_after_events`."""
    started = time.monotonic()
    events = 0
    try:
        async with http.stream("POST", path, json={**body, "stream": True}) as response:
            if response.status_code != 200:
                await response.aread()
                code = response.status_code
                return Result(kind, started, time.monotonic(), f"status {code}", code)
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line.removeprefix("data: ")
                if payload == "[DONE]":
                    return Result(kind, started, time.monotonic(), "stream completed", 200)
                decoded = json.loads(payload)
                if "error" in decoded:
                    outcome = f"stream error event {decoded['error'].get('code')}"
                    return Result(kind, started, time.monotonic(), outcome, 200)
                events += 1
                if abandon_after_events is not None and events >= abandon_after_events:
                    return Result(kind, started, time.monotonic(), "abandoned", 200)
        return Result(kind, started, time.monotonic(), "connection error", 200)  # no [DONE]
    except httpx.TimeoutException:
        return Result(kind, started, time.monotonic(), "client timeout")
    except httpx.TransportError:
        return Result(kind, started, time.monotonic(), "connection error")


async def chat_plain(http: httpx.AsyncClient, t: Traffic) -> Result:
    return await plain(http, "chat", CHAT, t.chat())


async def chat_stream(http: httpx.AsyncClient, t: Traffic) -> Result:
    body = t.chat(stream_options={"include_usage": True})
    return await streamed(http, "chat stream", CHAT, body)


async def completion_plain(http: httpx.AsyncClient, t: Traffic) -> Result:
    return await plain(http, "completion", COMPLETIONS, t.completion())


async def completion_stream(http: httpx.AsyncClient, t: Traffic) -> Result:
    return await streamed(http, "completion stream", COMPLETIONS, t.completion())


async def chat_n(http: httpx.AsyncClient, t: Traffic) -> Result:
    body = t.chat(n=t.rng.randint(2, 3), temperature=0.8)
    if t.rng.random() < 0.5:
        return await streamed(http, "chat n>1 stream", CHAT, body)
    return await plain(http, "chat n>1", CHAT, body)


async def chat_tools(http: httpx.AsyncClient, t: Traffic) -> Result:
    body = t.chat(tools=[WEATHER_TOOL], tool_choice=t.rng.choice(["auto", "required"]))
    body["messages"] = [{"role": "user", "content": "What is the weather in Paris?"}]
    return await plain(http, "chat tools", CHAT, body)


async def chat_schema(http: httpx.AsyncClient, t: Traffic) -> Result:
    return await plain(http, "chat json_schema", CHAT, t.chat(response_format=ANSWER_SCHEMA))


async def bad_input(http: httpx.AsyncClient, t: Traffic) -> Result:
    path, raw = t.rng.choice(BAD_INPUTS)
    started = time.monotonic()
    headers = {"content-type": "application/json"}
    try:
        response = await http.post(path, content=raw, headers=headers, timeout=PATIENCE_S)
    except httpx.TransportError:
        return Result("bad input", started, time.monotonic(), "connection error", bad_input=True)
    code = response.status_code
    return Result("bad input", started, time.monotonic(), f"status {code}", code, bad_input=True)


async def abandon_before_headers(_: httpx.AsyncClient, t: Traffic) -> Result:
    """A raw socket sends the whole request, then closes before the response headers."""
    started = time.monotonic()
    url = urlsplit(t.base_url)
    body = json.dumps(t.chat(max_tokens=t.max_tokens)).encode()
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: {url.hostname}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    try:
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
    except OSError:
        return Result("abandon before headers", started, time.monotonic(), "connection error")
    try:
        split = t.rng.randint(0, len(body))  # sometimes mid-body, sometimes the whole body
        writer.write(head + body[:split])
        await writer.drain()
        await asyncio.sleep(t.rng.uniform(0.0, 0.3))
    except OSError:
        pass
    finally:
        writer.close()
    del reader
    return Result("abandon before headers", started, time.monotonic(), "abandoned")


async def abandon_first_chunk(http: httpx.AsyncClient, t: Traffic) -> Result:
    body = t.chat(max_tokens=t.max_tokens)
    return await streamed(http, "abandon after first chunk", CHAT, body, abandon_after_events=1)


async def abandon_mid_stream(http: httpx.AsyncClient, t: Traffic) -> Result:
    body = t.chat(max_tokens=t.max_tokens, n=t.rng.choice([1, 2]), temperature=0.7)
    after = t.rng.randint(2, max(2, t.max_tokens - 1))
    return await streamed(http, "abandon mid-stream", CHAT, body, abandon_after_events=after)


async def abandon_plain(http: httpx.AsyncClient, t: Traffic) -> Result:
    """A non-streamed request given up after a random wait (mid-way through generation)."""
    started = time.monotonic()
    body = t.completion(max_tokens=t.max_tokens, n=t.rng.choice([1, 2]), temperature=0.7)
    try:
        response = await asyncio.wait_for(
            http.post(COMPLETIONS, json=body, timeout=PATIENCE_S), t.rng.uniform(0.05, 1.5)
        )
    except TimeoutError:
        return Result("abandon non-streamed", started, time.monotonic(), "abandoned")
    except httpx.TransportError:
        return Result("abandon non-streamed", started, time.monotonic(), "connection error")
    code = response.status_code
    return Result("abandon non-streamed", started, time.monotonic(), f"status {code}", code)


# Kind -> weight in the mix.
VALID: dict[Client, int] = {
    chat_plain: 4,
    chat_stream: 4,
    completion_plain: 2,
    completion_stream: 2,
    chat_n: 2,
    chat_tools: 1,
    chat_schema: 1,
}
HOSTILE: dict[Client, int] = {
    bad_input: 2,
    abandon_before_headers: 1,
    abandon_first_chunk: 1,
    abandon_mid_stream: 1,
    abandon_plain: 1,
}
MIX: dict[Client, int] = {**VALID, **HOSTILE}


def pick(rng: random.Random) -> Client:
    clients = list(MIX)
    return rng.choices(clients, weights=[MIX[c] for c in clients])[0]
