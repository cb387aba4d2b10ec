"""Shared fixtures. Engines are expensive (about a minute to start), so the real one is
session-scoped and shared by every test that needs it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

# Two engines may run at once (integration + e2e): keep each one's KV cache small.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from engine.scripted import ScriptedEngine
from tests.client import AppClient, app_client

SCRIPTED_MODEL = "scripted"


@pytest.fixture
def scripted_engine() -> ScriptedEngine:
    return ScriptedEngine()


@pytest.fixture
async def client(scripted_engine: ScriptedEngine) -> AsyncIterator[AppClient]:
    """The app over a scripted engine, in-process."""
    async with app_client(scripted_engine) as http:
        yield http
