"""One real vLLM engine on the default SmolLM2 checkpoint, shared by the whole session."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME, default_model_dir, is_prepared
from engine.vllm_backend.config import EngineConfig
from engine.vllm_backend.engine import VLLMEngine
from tests.client import AppClient, app_client


@pytest.fixture(scope="session")
async def real_engine() -> AsyncIterator[VLLMEngine]:
    model_dir = default_model_dir()
    assert is_prepared(model_dir), "run `lilac-serve prepare-model` (make test does)"
    engine = VLLMEngine(
        EngineConfig(
            model=str(model_dir),
            served_names=(DEFAULT_MODEL_NAME,),
            dtype="float32",
            enforce_eager=True,
            max_model_len=2048,
        )
    )
    await engine.start()
    yield engine
    await engine.shutdown()


@pytest.fixture(scope="session")
async def real_client(real_engine: VLLMEngine) -> AsyncIterator[AppClient]:
    async with app_client(real_engine, timeout=120) as c:
        yield c
