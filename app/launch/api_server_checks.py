"""What `--api-server-count` over 1 does not do yet, refused at start with the flags
that ask for it (app.launch.api_servers says what several frontend processes share)."""

from __future__ import annotations

from app.config.model_specs import model_specs
from app.config.settings import Settings
from app.db.engine import sqlite_path
from app.tenancy.service import auth_mode, database_url


def refusal(settings: Settings) -> str | None:
    """Why these settings cannot run with several frontend processes, or None."""
    count = settings.api_server_count
    if count < 1:
        return f"--api-server-count must be 1 or more, not {count}"
    if count == 1:
        return None
    flag = f"--api-server-count {count}"
    specs = model_specs(settings)
    if len(specs) > 1:
        return (
            f"{flag} serves one model: several models (repeated --model, or [[models]] "
            "tables of --config) are a warm pool that sleeps and wakes its engines, which "
            "one process decides; serve them with --api-server-count 1"
        )
    keep_alive = specs[0].keep_alive
    if keep_alive is not None and keep_alive >= 0:
        return (
            f"{flag}: the model's keep_alive ({keep_alive:g} s) would sleep the engine "
            "when idle, and one process cannot sleep an engine the others still use; "
            "drop keep_alive from its [[models]] table"
        )
    if settings.memory_budget_gib is not None:
        return f"{flag} cannot be combined with --memory-budget-gib (a warm pool's budget)"
    lends = settings.gpu_probe not in (None, "none") or (
        settings.gpu_probe is None and settings.on_gpu
    )
    # `--release-memory` acts only while yielded to the owner, which this refuses.
    if lends or settings.lending_windows:
        return (
            f"{flag}: lending the GPU to its owner (--gpu-probe, --lending-windows) "
            "pauses (or sleeps) the engine on the owner's reclaim, which each process "
            "would decide alone on the engine they share; pass --gpu-probe none and no "
            "--lending-windows"
        )
    if settings.data_parallel_size > 1:
        return f"{flag} cannot be combined with --data-parallel-size over 1"
    if auth_mode(settings) == "keys" and sqlite_path(database_url(settings)) is not None:
        return (
            f"{flag} with --auth keys needs a PostgreSQL keys database (--database-url "
            "postgresql://...): each key's limits hold across processes there, as across "
            "replicas; on SQLite each process would count them alone"
        )
    return None
