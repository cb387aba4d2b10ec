"""After the engine is ready, what start-up built is frozen out of the collector's reach
(a full collection then costs what requests allocated, not the whole heap), and young
collections come every `YOUNG_COLLECTION_EVERY` allocations rather than Python's 700."""

from __future__ import annotations

import gc

from app.main import YOUNG_COLLECTION_EVERY, _start_engine
from app.served_models import build_pool
from app.settings import Settings
from engine.scripted import ScriptedEngine
from engine.warm.host import PoolHost


async def test_start_up_objects_are_frozen_once_the_engine_is_ready() -> None:
    gc.unfreeze()
    threshold = gc.get_threshold()
    gc.set_threshold(700, *threshold[1:])  # Python's default (another app may have started here)
    assert gc.get_freeze_count() == 0
    host = PoolHost(build_pool(Settings(), ScriptedEngine()))
    try:
        await _start_engine(host)
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == YOUNG_COLLECTION_EVERY
        assert gc.get_threshold()[1:] == threshold[1:]
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        await host.shutdown()
