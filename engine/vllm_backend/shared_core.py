"""One vLLM engine core shared by several frontend processes (`--api-server-count`).

vLLM's multi API-server mode, as `vllm serve --api-server-count N` runs it: the
supervising process launches the engine core for N clients; each frontend process
builds an `AsyncLLM` that binds its own pair of ZMQ sockets (requests in, outputs back)
and tells the engine core which of the N clients it is. The engine core connects to
every pair and sends each its ready message at once; ZMQ queues that message until the
frontend binds, so the engine core can be up before any frontend starts.

`SharedCore.launch` runs in the supervising process (the `lilac-serve` command); its
`Frontend` travels to each worker (as JSON) with the client index the worker claimed,
and `EngineConfig.frontend` makes `build_async_llm` connect to it instead of starting an
engine core of its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from multiprocessing import connection
from typing import Any

from engine.vllm_backend.config import EngineConfig, Frontend, engine_args, with_frontends

log = logging.getLogger("lilac.engine")


class SharedCore:
    """The engine core processes this process launched for `count` frontends."""

    def __init__(self, manager: Any, frontend: Frontend) -> None:
        self._manager = manager
        self.frontend = frontend
        self._stopped = threading.Event()

    @classmethod
    def launch(cls, config: EngineConfig, count: int) -> SharedCore:
        """Start the engine core and wait until it has loaded the model (a minute on
        this CPU): the frontends started afterwards find it ready."""
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.utils import (
            EngineZmqAddresses,
            get_engine_zmq_bind_addresses,
            launch_core_engines,
        )
        from vllm.v1.executor import Executor

        from engine.vllm_backend.config import check_family_markers

        check_family_markers(config)
        args = with_frontends(engine_args(config), count, -1)
        vllm_config = args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        # Local sockets (ipc://): one engine core on this machine.
        bind = get_engine_zmq_bind_addresses(vllm_config, count)
        addresses = EngineZmqAddresses(inputs=list(bind.inputs), outputs=list(bind.outputs))
        executor_class = Executor.get_class(vllm_config)
        # The engine core's own statistics feed the frontends' `vllm:` series.
        log_stats = config.prometheus_stats
        manager: Any = None
        try:
            with launch_core_engines(vllm_config, executor_class, log_stats, addresses) as launched:
                manager = launched.engine_manager
                coordinator = launched.coordinator
        except BaseException:  # it failed to load, or SIGTERM came meanwhile
            if manager is not None:
                manager.shutdown()
            raise
        stats = coordinator.get_stats_publish_address() if coordinator is not None else None
        frontend = Frontend(tuple(bind.inputs), tuple(bind.outputs), 0, stats)
        return cls(manager, frontend)

    def pids(self) -> list[int]:
        return [process.pid for process in self._manager.processes]

    def watch(self, on_death: Callable[[str], None]) -> threading.Thread:
        """Call `on_death` (from a thread of its own) when an engine core process exits
        before `shutdown`: the frontends cannot notice an engine core that was killed
        (it says nothing as it goes), so the supervisor stops them."""

        def run() -> None:
            sentinels = self._manager.sentinels()
            while not self._stopped.is_set():
                if connection.wait(sentinels, timeout=1.0):
                    break
            if not self._stopped.is_set():
                finished = self._manager.finished_procs()
                on_death(f"the engine core process exited ({finished})")

        thread = threading.Thread(target=run, name="lilac-engine-core-watch", daemon=True)
        thread.start()
        return thread

    def shutdown(self) -> None:
        """Stop the engine core processes (SIGTERM, then SIGKILL after vLLM's timeout)."""
        self._stopped.set()
        self._manager.shutdown()
