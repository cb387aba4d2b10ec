"""Shared fixtures. Engines are expensive (about a minute to start), so the real one is
session-scoped and shared by every test that needs it; so is the real PostgreSQL
server (seconds to start), defined here once so that every folder gets the same one."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

# Two engines may run at once (integration + e2e): keep each one's KV cache small.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from engine.scripted import ScriptedEngine
from tests.client import AppClient, app_client
from tests.postgres import TempPostgres, start_postgres

SCRIPTED_MODEL = "scripted"


@pytest.fixture
def scripted_engine() -> ScriptedEngine:
    return ScriptedEngine()


@pytest.fixture
async def client(scripted_engine: ScriptedEngine) -> AsyncIterator[AppClient]:
    """The app over a scripted engine, in-process."""
    async with app_client(scripted_engine) as http:
        yield http


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TempPostgres]:
    """The session's one PostgreSQL server. A test takes a database of its own
    (`await pg_server.new_database()`); a test that stops the server does it in
    `with pg_server.outage():`, which starts it again. A conftest must not re-export
    this fixture: each copy would start a server of its own."""
    pg = start_postgres()
    yield pg
    pg.stop()
