"""The Anthropic side of the tests: a reader for its event streams (`event: <type>`
then `data: <json>`), and its SDK over the app in-process."""

from __future__ import annotations

import json
from typing import Any

import httpx


def read_events(response: httpx.Response) -> list[dict[str, Any]]:
    """Every event of the stream, in order. Asserts the framing: each event is one
    `event:` line and one `data:` line whose `type` is that event's name; no `[DONE]`."""
    events = []
    for raw in response.text.replace("\r\n", "\n").split("\n\n"):
        if not raw.strip():
            continue
        lines = raw.split("\n")
        assert len(lines) == 2, f"not an event/data pair: {raw!r}"
        name, data = lines
        assert name.startswith("event: ") and data.startswith("data: "), raw
        payload = json.loads(data[len("data: ") :])
        assert payload["type"] == name[len("event: ") :], raw
        events.append(payload)
    return events


def anthropic_sdk(app: Any, timeout: float = 120.0) -> Any:
    """The real Anthropic SDK talking to `app` in-process. The SDK runs on `httpx2` (it
    refuses an `httpx` client), so it gets its own ASGI transport."""
    import anthropic
    import httpx2

    http = httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=timeout
    )
    return anthropic.AsyncAnthropic(
        base_url="http://127.0.0.1", api_key="unused", http_client=http, max_retries=0
    )
