"""Several frontend processes sharing one engine core (`--api-server-count N`).

The `lilac-serve` command launches the engine core (engine.vllm_backend.shared_core)
and runs granian with N workers. Each worker is one of the engine core's N clients:
granian gives a worker no index, so each claims one here, by taking an exclusive
`flock` on one of N slot files in a folder of the run's own (`claim_slot`). The kernel
drops the lock when the process ends however it ends, so a worker that starts again
finds its slot free, and two live workers never hold the same one.

What must not be multiplied by N is divided here: admission's budgets (each process
admits its share of the engine, `per_process`), the batch lane's concurrency, and the
usage spool file (one per process, `spool_name`). Key limits hold across processes
through the keys database (app.tenancy.fleet.limits, PostgreSQL), as they do across
replicas; what cannot yet be shared is refused at start (`refusal`).

Only the HTTP side's part is here: nothing imports vLLM.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
from litestar import Litestar
from prometheus_client import CollectorRegistry, Gauge

from app.config.settings import Settings
from engine.vllm_backend.config import Frontend

ENV = "LILAC_API_SERVERS_JSON"
SLOT_CLAIM_TIMEOUT_S = 30.0  # a worker started again waits this long for its old self


class SharedEngine(msgspec.Struct, frozen=True):
    """What the command hands its workers (as JSON in `LILAC_API_SERVERS_JSON`)."""

    run_dir: str  # where the slot files are
    frontend: Frontend  # the engine core's client sockets; each worker takes its index


def from_environment() -> SharedEngine | None:
    raw = os.environ.get(ENV)
    return msgspec.json.decode(raw, type=SharedEngine) if raw else None


@dataclass
class Slot:
    """A client index held by this process for as long as `fd` stays open."""

    index: int
    count: int
    fd: int

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def slot_path(run_dir: Path, index: int) -> Path:
    return run_dir / f"api-server-{index}.lock"


def claim_slot(run_dir: Path, count: int, timeout_s: float = SLOT_CLAIM_TIMEOUT_S) -> Slot:
    """The first of the `count` slots no live process holds. When all are held (a worker
    started again while the one it replaces still stops), waits up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        for index in range(count):
            fd = os.open(slot_path(run_dir, index), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            os.set_inheritable(fd, False)  # the engine's own processes do not hold it
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return Slot(index, count, fd)
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"all {count} API-server slots in {run_dir} are held by live processes"
            )
        time.sleep(0.1)


def share(value: int, count: int) -> int:
    """One process's part of a budget shared by `count`: at least 1 of a positive budget
    (so a budget smaller than the processes admits up to `count` at once in all), and
    0 or a negative value (off, or 'the engine's own') unchanged."""
    if value <= 0:
        return value
    return max(1, value // count)


def per_process(settings: Settings, slot: Slot) -> Settings:
    """The settings of the process holding `slot`: admission's and the batch lane's
    budgets divided between the processes, and a distinct batch-claim name."""
    count = slot.count
    replica = f"{settings.replica_id}-{slot.index}" if settings.replica_id else None
    return msgspec.structs.replace(
        settings,
        max_concurrent=share(settings.max_concurrent, count),
        throttled_concurrent=share(settings.throttled_concurrent, count),
        max_queued=share(settings.max_queued, count),
        kv_budget_tokens=share(settings.kv_budget_tokens, count),
        batch_concurrency=share(settings.batch_concurrency, count),
        batch_concurrency_beside_interactive=share(
            settings.batch_concurrency_beside_interactive, count
        ),
        replica_id=replica,
    )


def spool_name(default: Path, index: int) -> Path:
    """Each process's usage spool: the spool is rewritten whole when replayed, so two
    processes must not share one. The first keeps the usual name (a later start with
    one process replays it)."""
    if index == 0:
        return default
    return default.with_name(f"{default.stem}.api-server-{index}{default.suffix}")


def frontend_app(settings: Settings, shared: SharedEngine) -> Litestar:
    """This worker's app: a slot claimed, its share of the budgets, its engine a client
    of the shared engine core, its own usage spool, and its index on `/metrics`."""
    from app.launch.served_models import build_pool
    from app.main import create_app
    from app.tenancy.service import Tenancy, spool_path

    slot = claim_slot(Path(shared.run_dir), shared.frontend.count)
    mine = per_process(settings, slot)
    frontend = shared.frontend.at(slot.index)
    tenancy = Tenancy.from_settings(mine, spool_name(spool_path(mine), slot.index))
    app = create_app(
        mine,
        models=build_pool(mine, frontend=frontend),
        tenancy=tenancy,
        handle_sigterm=True,
        exit_on_engine_death=True,
    )
    register_identity(app.state.metrics.registry, slot)
    app.state.api_server_slot = slot  # held (its lock with it) as long as the app lives
    return app


def register_identity(registry: CollectorRegistry, slot: Slot) -> None:
    """`lilac_api_server{index, count, pid} 1`: which process answered this scrape."""
    gauge = Gauge(
        "lilac_api_server",
        "The frontend process that answered this scrape (one of --api-server-count)",
        ["index", "count", "pid"],
        registry=registry,
    )
    gauge.labels(str(slot.index), str(slot.count), str(os.getpid())).set(1)
