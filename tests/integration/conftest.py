"""The real vLLM engines of the integration tests, each started once for the whole
package and shut down when its last test has run (before the e2e servers start): the
default SmolLM2 checkpoint (`real_engine`), and the family-test checkpoint
(`family_engine`, tests/integration/family_engine.py) that the family tests and the
warm-models tests share. A start costs about a minute here: a module shares these
rather than starting its own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME, default_model_dir, is_prepared
from engine.vllm_backend.config import EngineConfig
from engine.vllm_backend.engine import VLLMEngine
from perf.harness.family_model import make_family_checkpoint
from tests.client import AppClient, app_client
from tests.integration.family_engine import ForcedOutputEngine, family_engine_config


@pytest.fixture(scope="package")
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


@pytest.fixture(scope="package")
async def real_client(real_engine: VLLMEngine) -> AsyncIterator[AppClient]:
    async with app_client(real_engine, timeout=120) as c:
        yield c


@pytest.fixture(scope="package")
async def family_engine(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[ForcedOutputEngine]:
    source = default_model_dir()
    assert is_prepared(source), "run `lilac-serve prepare-model` (make test does)"
    checkpoint = make_family_checkpoint(source, tmp_path_factory.mktemp("family") / "ckpt")
    engine = ForcedOutputEngine(family_engine_config(checkpoint))
    await engine.start()
    yield engine
    await engine.shutdown()
