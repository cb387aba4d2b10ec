"""After the engine is ready, what start-up built is frozen out of the collector's reach:
a full collection then costs what requests allocated, not the whole heap."""

from __future__ import annotations

import gc

from app.main import _start_engine
from app.served_models import build_pool
from app.settings import Settings
from engine.scripted import ScriptedEngine
from engine.warm.host import PoolHost


async def test_start_up_objects_are_frozen_once_the_engine_is_ready() -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    host = PoolHost(build_pool(Settings(), ScriptedEngine()))
    try:
        await _start_engine(host)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        await host.shutdown()
