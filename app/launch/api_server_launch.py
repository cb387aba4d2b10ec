"""`lilac-serve serve --api-server-count N` over 1: this process launches the engine core,
then runs granian with N workers, each a client of that engine core (app.launch.api_servers),
and stops the engine core when granian stops.

This process serves no request: it supervises. When the engine core exits unasked,
the workers cannot tell (a killed engine core says nothing), so this process stops
them and exits with the status a dead engine gives (app.main.ENGINE_DEAD_EXIT_CODE), for
a supervisor to start a fresh server. A worker that exits takes the server down the
same way (granian does not start it again: a new client could not join the engine
core's handshake, which happens once).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from app.config.settings import Settings
from app.launch.api_servers import ENV, SharedEngine

log = logging.getLogger("lilac.app")
ENGINE_START_FAILED_EXIT_CODE = 3  # as a single process's worker exits (app.main)
# After its drain, a worker closes its app (usage flushed, engine client closed): a
# second or two. Past the drain's longest wait and this, granian kills it.
WORKER_CLOSE_SLACK_S = 15.0


def workers_kill_timeout_s(settings: Settings) -> int:
    """How long granian waits for each worker to stop on SIGTERM before it kills it: a
    safety net only (each worker stops by itself once its requests drained). A worker
    killed holds no engine core (it is this process's), and its slot lock goes with it."""
    from app.services.generation.admission import policy_from
    from engine.admission.runtime import stop_wait_limit_s

    return math.ceil(stop_wait_limit_s(policy_from(settings)) + WORKER_CLOSE_SLACK_S)


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """While the engine core loads (before granian handles signals), SIGTERM and SIGINT
    unwind through `finally`, which stops what was started."""

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_shared(settings: Settings, granian: Callable[[int], Any]) -> int:
    """Launch the engine core for `settings.api_server_count` frontends, then serve with
    `granian(workers)` (a `Granian` server, not yet started) until it stops."""
    from app.config.model_specs import engine_settings, model_specs
    from app.launch.served_models import engine_config
    from app.main import ENGINE_DEAD_EXIT_CODE, root_cause
    from engine.vllm_backend.shared_core import SharedCore

    count = settings.api_server_count
    config = engine_config(engine_settings(settings, model_specs(settings)[0]))
    run_dir = tempfile.mkdtemp(prefix="lilac-api-servers-")
    core: SharedCore | None = None
    try:
        with _stop_on_sigterm():
            log.info("starting the engine core for %d frontend processes", count)
            try:
                core = SharedCore.launch(config, count)
            except Exception as exc:
                log.error("engine failed to start: %s; exiting", root_cause(exc))
                log.debug("engine start traceback", exc_info=exc)
                return ENGINE_START_FAILED_EXIT_CODE
        log.info("engine core ready (pid %s)", ", ".join(map(str, core.pids())))
        shared = SharedEngine(run_dir, core.frontend)
        os.environ[ENV] = msgspec.json.encode(shared).decode()
        # Only now: the engine core, started from this process, must not inherit them.
        os.environ["LILAC_SETTINGS_JSON"] = msgspec.json.encode(settings).decode()
        server = granian(count)
        died: list[str] = []

        def on_death(reason: str) -> None:
            if server.interrupt_signal:  # stopping already: SIGTERM reached it too
                return
            log.error("%s; stopping the frontends", reason)
            died.append(reason)
            server.signal_handler_interrupt()

        core.watch(on_death)
        code = 0
        try:
            server.serve()
        except SystemExit as exc:  # granian exits 1 when a worker exited unasked
            code = exc.code if isinstance(exc.code, int) else 1
        return ENGINE_DEAD_EXIT_CODE if died else code
    finally:
        if core is not None:
            core.shutdown()
        shutil.rmtree(run_dir, ignore_errors=True)
