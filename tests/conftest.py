"""Shared fixtures. Engines are expensive (about a minute to start), so the real one is
session-scoped and shared by every test that needs it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import httpx
import pytest

# Two engines may run at once (integration + e2e): keep each one's KV cache small.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app.main import create_app
from engine.scripted import ScriptedEngine

SCRIPTED_MODEL = "scripted"


@pytest.fixture
def scripted_engine() -> ScriptedEngine:
    return ScriptedEngine()


@pytest.fixture
async def client(scripted_engine: ScriptedEngine) -> AsyncIterator[httpx.AsyncClient]:
    """The app over a scripted engine, in-process."""
    app = create_app(engine=scripted_engine)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        yield http
