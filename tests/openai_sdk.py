"""The real `openai` SDK talking to an app in-process (the SDK runs on `httpx2`, so it
gets its own ASGI transport)."""

from __future__ import annotations

from typing import Any


def openai_sdk(app: Any, timeout: float = 120.0, api_key: str = "unused") -> Any:
    import httpx2
    import openai

    http = httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=timeout
    )
    return openai.AsyncOpenAI(
        base_url="http://127.0.0.1/v1", api_key=api_key, http_client=http, max_retries=0
    )
