"""`--engine-frontend-process`: the served model's engine, vLLM's AsyncLLM included, runs
in a child process (engine.remote), and the HTTP process holds a `RemoteEngine`.

`auto` (the default) turns it on where it applies, one model and one HTTP process
(`runs_apart`); `true` asks for it, and what it cannot do is refused at start
(`refusal`): one child serves one model, and the several-frontends mode
(`--api-server-count`) is its own way of spreading the same work over processes.
Nothing here imports vLLM.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from app.config.model_specs import model_specs
from app.config.settings import Settings
from engine.protocol import Engine, ModelInfo
from engine.remote.client import RemoteEngine

if TYPE_CHECKING:
    from engine.vllm_backend.config import EngineConfig

FLAG = "--engine-frontend-process true"


def applies(settings: Settings) -> bool:
    """One model, served by one HTTP process: what the engine's own process can serve."""
    return settings.api_server_count == 1 and len(model_specs(settings)) == 1


def runs_apart(settings: Settings) -> bool:
    """Whether the served engine runs in a process of its own: `true`, or `auto` where
    it applies (`false`, and `auto` elsewhere, keep it in the HTTP process)."""
    if settings.engine_frontend_process == "auto":
        return applies(settings)
    return settings.engine_frontend_process == "true"


def refusal(settings: Settings) -> str | None:
    """Why these settings cannot run with the engine in a process of its own when `true`
    asks for it, or None (`auto` falls back without a word)."""
    if settings.engine_frontend_process != "true":
        return None
    if settings.api_server_count > 1:
        return (
            f"{FLAG} cannot be combined with --api-server-count over 1: pick one way of "
            "moving vLLM's output processing off the HTTP process"
        )
    if len(model_specs(settings)) > 1:
        return (
            f"{FLAG} serves one model: several models (repeated --model, or [[models]] "
            "tables of --config) would each need a process of their own; serve them "
            "without it"
        )
    return None


def remote_engine(config: EngineConfig) -> Engine:
    """The vLLM engine `config` describes, built and run in a child process, with vLLM's
    Prometheus series as `config` says: kept in that process, and read from it when
    `/metrics` is scraped (`Engine.metrics_exposition`)."""
    from engine.vllm_backend.engine import VLLMEngine

    placeholder = ModelInfo(config.served_names, 0, int(time.time()), config.model)
    return RemoteEngine(placeholder, VLLMEngine, config)
