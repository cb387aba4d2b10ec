"""The real vLLM engines of the integration tests (tests/integration/engines.py), each
started once for the whole package and shut down when its last test has run (tests/e2e
runs first: its servers are stopped by then): the default SmolLM2 checkpoint
(`real_engine`), the family-test checkpoint (`family_engine`,
tests/integration/family_engine.py) that the family tests and the warm-models tests
share, and the vision tests' tiny model (`vision_engine`). Those the selected tests use
start together the first time one is needed (`started`). A start costs about a minute
here: a module shares these rather than starting its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast

import pytest

from engine.vllm_backend.engine import VLLMEngine
from tests.client import AppClient, app_client
from tests.integration.engines import Started
from tests.integration.family_engine import ForcedOutputEngine


@pytest.fixture(scope="package")
async def started(request: pytest.FixtureRequest) -> AsyncIterator[Started]:
    engines = Started(request)
    await engines.start()
    yield engines
    await engines.stop_left()


@pytest.fixture(scope="package")
async def real_engine(started: Started) -> AsyncIterator[VLLMEngine]:
    engine = await started.take("real_engine")
    yield engine
    await engine.shutdown()


@pytest.fixture(scope="package")
async def real_client(real_engine: VLLMEngine) -> AsyncIterator[AppClient]:
    async with app_client(real_engine, timeout=120) as c:
        yield c


@pytest.fixture(scope="package")
async def family_engine(started: Started) -> AsyncIterator[ForcedOutputEngine]:
    engine = cast(ForcedOutputEngine, await started.take("family_engine"))
    yield engine
    await engine.shutdown()


@pytest.fixture(scope="module")
async def vision_engine(started: Started) -> AsyncIterator[VLLMEngine]:
    """Module-scoped: stopped (its memory given back) as soon as the vision tests end."""
    engine = await started.take("vision_engine")
    yield engine
    await engine.shutdown()
