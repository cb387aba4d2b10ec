"""The integration package's real engines, by fixture name: how each is made, and
`Started`, which starts those the selected tests use together.

A start is about a minute here, most of it in the engine-core process that vLLM spawns
(imports, weights, the KV cache) and one core busy: started one after the other, three
engines cost three minutes; started together on two cores, about the longest one plus
the share the others take of the second core. Each is still stopped by its own fixture,
when its last test has run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME, default_model_dir, is_prepared
from engine.vllm_backend.config import EngineConfig
from engine.vllm_backend.engine import VLLMEngine
from perf.harness.family_model import make_family_checkpoint
from tests.integration.family_engine import ForcedOutputEngine, family_engine_config
from tests.vision_model import build_tiny_vlm

VISION_MODEL = "tiny-vlm"


def _prepared() -> Path:
    model_dir = default_model_dir()
    assert is_prepared(model_dir), "run `lilac-serve prepare-model` (make test does)"
    return model_dir


def make_real(factory: pytest.TempPathFactory) -> VLLMEngine:
    return VLLMEngine(
        EngineConfig(
            model=str(_prepared()),
            served_names=(DEFAULT_MODEL_NAME,),
            dtype="float32",
            enforce_eager=True,
            max_model_len=2048,
        )
    )


def make_family(factory: pytest.TempPathFactory) -> ForcedOutputEngine:
    checkpoint = make_family_checkpoint(_prepared(), factory.mktemp("family") / "ckpt")
    return ForcedOutputEngine(family_engine_config(checkpoint))


def make_vision(factory: pytest.TempPathFactory) -> VLLMEngine:
    model_dir = build_tiny_vlm(factory.mktemp("models") / VISION_MODEL, _prepared())
    return VLLMEngine(
        EngineConfig(
            model=str(model_dir),
            served_names=(VISION_MODEL,),
            dtype="float32",
            enforce_eager=True,
            max_model_len=1024,
            # No test of it asks for a grammar: the warm-up (seconds) would buy nothing;
            # `real_engine` starts with it.
            grammar_warmup=False,
        )
    )


MAKERS: dict[str, Callable[[pytest.TempPathFactory], VLLMEngine]] = {
    "real_engine": make_real,
    "family_engine": make_family,
    "vision_engine": make_vision,
}


class Started:
    """The engines of `MAKERS` that the selected tests of this package use, started
    together the first time one is needed. A fixture takes its own; one not started
    ahead (a test that asks for its fixture by name at run time) starts when taken."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        here = Path(__file__).parent
        self._factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
        self._used = {
            name
            for item in request.session.items
            if here in item.path.parents
            for name in getattr(item, "fixturenames", ())
            if name in MAKERS
        }
        self._engines: dict[str, VLLMEngine] = {}

    async def start(self) -> None:
        # vLLM's modules imported once, before the builds' threads import them at once.
        await asyncio.to_thread(__import__, "vllm.v1.engine.async_llm")
        self._engines = {name: MAKERS[name](self._factory) for name in sorted(self._used)}
        results = await asyncio.gather(
            *(engine.start() for engine in self._engines.values()), return_exceptions=True
        )
        failed = [result for result in results if isinstance(result, BaseException)]
        if failed:
            await self.stop_left()
            raise failed[0]

    async def take(self, name: str) -> VLLMEngine:
        engine = self._engines.pop(name, None)
        if engine is None:
            engine = MAKERS[name](self._factory)
            await engine.start()
        return engine

    async def stop_left(self) -> None:
        engines, self._engines = list(self._engines.values()), {}
        await asyncio.gather(*(engine.shutdown() for engine in engines))
