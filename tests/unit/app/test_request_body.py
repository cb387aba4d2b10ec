"""Reading a body: a client that leaves halfway through sending it is a client that
left (499, `client_disconnected`), never a 500 with a traceback."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from app.main import create_app
from engine.scripted import ScriptedEngine
from tests.client import AppClient

BODY = b'{"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/tokenize"])
async def test_a_client_gone_mid_body_is_a_499_without_a_traceback(
    caplog: pytest.LogCaptureFixture, path: str
) -> None:
    caplog.set_level(logging.INFO)
    app = create_app(engine=ScriptedEngine())
    messages = iter(
        [
            {"type": "http.request", "body": BODY[: len(BODY) // 2], "more_body": True},
            {"type": "http.disconnect"},
        ]
    )

    async def receive() -> dict[str, Any]:
        return next(messages)

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(BODY)).encode()),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("test", 80),
        "state": {},
    }
    await app(scope, receive, send)  # type: ignore[arg-type]

    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    access = [r.access for r in caplog.records if r.name == "lilac.access"]  # type: ignore[attr-defined]
    assert [(a["status"], a["outcome"]) for a in access] == [(499, "client_disconnected")]
    async with AppClient(app, timeout=5) as http:
        metrics = (await http.get("/metrics")).text
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith("lilac_http_requests_total{") and 'method="POST"' in line
    ]
    assert counted and all('status="499"' in line for line in counted), counted
