"""After the engine is ready, what start-up built is frozen out of the collector's reach
(a full collection then costs what requests allocated, not the whole heap), and young
collections come only once more objects were made than the requests the process may
hold keep alive (app.launch.collector), rather than every 700 allocations."""

from __future__ import annotations

import asyncio
import gc

from app.config.settings import Settings
from app.launch.collector import (
    PYTHON_GC_THRESHOLD,
    TRACKED_PER_REQUEST,
    YOUNG_COLLECTION_MIN,
    young_collection_every,
)
from app.launch.served_models import build_pool
from app.main import _start_engine, create_app
from engine.scripted import ScriptedEngine
from engine.warm.host import PoolHost
from tests.client import scratch_data_dir


def test_the_threshold_grows_with_the_requests_a_process_may_hold() -> None:
    assert young_collection_every(0) == YOUNG_COLLECTION_MIN
    assert young_collection_every(1088) == 1088 * TRACKED_PER_REQUEST
    assert young_collection_every(4096) > young_collection_every(1088)


async def test_start_up_objects_are_frozen_once_the_engine_is_ready() -> None:
    gc.unfreeze()
    threshold = gc.get_threshold()
    gc.set_threshold(700, *threshold[1:])  # Python's default (another app may have started here)
    assert gc.get_freeze_count() == 0
    host = PoolHost(build_pool(Settings(), ScriptedEngine()))
    try:
        await _start_engine(host, 1088)
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == young_collection_every(1088)
        assert gc.get_threshold()[1:] == threshold[1:]
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        await host.shutdown()


async def test_the_server_stops_with_pythons_threshold() -> None:
    """Serving, young collections are rare, at a threshold from the admission limits
    (each model's running requests and the queue); once the app stops, they come as
    Python makes them, so that what closes the engine is collected as before."""
    gc.unfreeze()
    threshold = gc.get_threshold()
    gc.set_threshold(*PYTHON_GC_THRESHOLD)
    settings = Settings(data_dir=scratch_data_dir(), max_concurrent=8, max_queued=100)
    serving = young_collection_every(8 + 100)
    app = create_app(settings, engine=ScriptedEngine())
    try:
        async with app.lifespan():
            for _ in range(100):  # until the engine's start, a task of the lifespan
                if gc.get_threshold()[0] == serving:
                    break
                await asyncio.sleep(0.01)
            assert gc.get_threshold()[0] == serving
        assert gc.get_threshold() == PYTHON_GC_THRESHOLD
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
