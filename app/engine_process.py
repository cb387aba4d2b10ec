"""`--engine-frontend-process`: the served model's engine, vLLM's AsyncLLM included, runs
in a child process (engine.remote), and the HTTP process holds a `RemoteEngine`.

What it cannot do yet is refused at start (`refusal`): one child serves one model, and
the several-frontends mode (`--api-server-count`) is its own way of spreading the same
work over processes. Nothing here imports vLLM.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from app.model_specs import model_specs
from app.settings import Settings
from engine.protocol import Engine, ModelInfo
from engine.remote.client import RemoteEngine

if TYPE_CHECKING:
    from engine.vllm_backend.config import EngineConfig

FLAG = "--engine-frontend-process true"


def refusal(settings: Settings) -> str | None:
    """Why these settings cannot run with the engine in a process of its own, or None."""
    if not settings.engine_frontend_process:
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
    """The vLLM engine `config` describes, built and run in a child process. vLLM's
    Prometheus series would be kept in that process, where `/metrics` cannot read them:
    the child builds the engine without them."""
    from engine.vllm_backend.engine import VLLMEngine

    placeholder = ModelInfo(config.served_names, 0, int(time.time()), config.model)
    return RemoteEngine(placeholder, VLLMEngine, replace(config, prometheus_stats=False))
