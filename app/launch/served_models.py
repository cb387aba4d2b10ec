"""The served models: one vLLM engine per model the settings declare, held by a warm
pool that sleeps idle models and wakes the one a request names."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from app.config.model_specs import engine_settings, model_specs
from app.config.settings import Settings
from engine.protocol import Engine
from engine.warm.model import WarmConfig
from engine.warm.pool import ModelPool
from engine.warm.sleeper import PauseSleeper, Sleeper, VLLMSleeper

if TYPE_CHECKING:
    from engine.vllm_backend.config import EngineConfig, Frontend


def build_engine(
    settings: Settings,
    *,
    sleep_mode: bool = False,
    prometheus_stats: bool = True,
    engines: int = 1,
    frontend: Frontend | None = None,
    apart: bool | None = None,
) -> Engine:
    """The vLLM engine the settings describe, with CPU defaults when there is no GPU.
    `sleep_mode` builds it with vLLM's sleep mode on a GPU (to sleep between requests);
    `prometheus_stats` gives it vLLM's `vllm:` series, labelled with its model;
    `engines` is how many this server builds (they share the CPU's free memory);
    `frontend`: connect to a shared engine core as that client (`--api-server-count`);
    `apart`: run it in a process of its own (`--engine-frontend-process`); None: as the
    settings say (app.launch.engine_process.runs_apart)."""
    from app.launch.engine_process import runs_apart
    from engine.vllm_backend.engine import VLLMEngine

    config = engine_config(
        settings, sleep_mode=sleep_mode, prometheus_stats=prometheus_stats, engines=engines
    )
    if frontend is not None:
        from dataclasses import replace

        config = replace(config, frontend=frontend)
    if apart is None:
        apart = frontend is None and runs_apart(settings)
    if apart:
        from app.launch.engine_process import remote_engine

        return remote_engine(config)
    return VLLMEngine(config)


def engine_config(
    settings: Settings,
    *,
    sleep_mode: bool = False,
    prometheus_stats: bool = True,
    engines: int = 1,
) -> EngineConfig:
    """What `build_engine` builds, also what the command launches a shared engine core
    from (the frontends then build the same one)."""
    from engine.checkpoint import resolve_model
    from engine.fairness import shares_file
    from engine.families import get as get_family
    from engine.templates import load_template_file
    from engine.vllm_backend.config import EngineConfig

    model_path, default_name = resolve_model(settings.model[0] if settings.model else None)
    if settings.family is not None:
        try:
            get_family(settings.family)
        except ValueError as exc:  # before minutes of loading, not after
            raise SystemExit(f"--family: {exc}") from exc
    if settings.tool_call_parser is not None:
        from engine.errors import EngineRequestError
        from engine.vllm_backend.tool_calls import structural_tag_model

        try:
            structural_tag_model(settings.tool_call_parser)
        except EngineRequestError as exc:
            raise SystemExit(f"--tool-call-parser: {exc.message}") from exc
    if settings.distributed_executor_backend not in (None, "mp", "ray"):
        raise SystemExit("--distributed-executor-backend: expected `mp` or `ray`")
    on_gpu = settings.on_gpu
    if not on_gpu:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(cpu_kv_cache_gib(settings, model_path, engines))
        bind_cpu_threads(settings, engines)
    if os.path.isdir(model_path):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    served_names = settings.served_model_name or (default_name,)
    config = EngineConfig(
        model=model_path,
        served_names=served_names,
        dtype=settings.dtype or ("auto" if on_gpu else "float32"),
        max_model_len=settings.max_model_len,
        enforce_eager=(not on_gpu) if settings.enforce_eager is None else settings.enforce_eager,
        tensor_parallel_size=settings.tensor_parallel_size,
        pipeline_parallel_size=settings.pipeline_parallel_size,
        data_parallel_size=settings.data_parallel_size,
        distributed_executor_backend=settings.distributed_executor_backend,
        otlp_traces_endpoint=settings.otlp_traces_endpoint,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        seed=settings.seed,
        chat_template=load_template_file(settings.chat_template)
        if settings.chat_template
        else None,
        family=settings.family,
        tool_parser=settings.tool_call_parser,
        enable_sleep_mode=on_gpu and (settings.release_memory or sleep_mode),
        prometheus_stats=prometheus_stats and settings.engine_metrics,
        grammar_compile_timeout_s=settings.grammar_compile_timeout,
        grammar_warmup=settings.grammar_warmup,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs,
        fair_share=settings.fair_share,
        fairness_shares_path=str(shares_file(served_names[0])),
    )
    return config


def cpu_kv_cache_gib(settings: Settings, model_path: str, engines: int = 1) -> int:
    """The flag, else `VLLM_CPU_KVCACHE_SPACE`, else a share of the free memory split
    between the `engines` this server builds (the first value is kept in the variable,
    so every engine of the pool gets the same share)."""
    from engine import machine

    if settings.cpu_kvcache_space_gib is not None:
        return settings.cpu_kvcache_space_gib
    already = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
    if already.isdigit():
        return int(already)
    weights = machine.weights_bytes(model_path)
    return machine.cpu_kv_cache_gib(machine.probe(), weights, engines)


def bind_cpu_threads(settings: Settings, engines: int) -> None:
    """Every core to the model's threads on a small box, unless the user set the binding
    (engine/machine.py says why)."""
    from engine import machine

    workers = settings.tensor_parallel_size * settings.pipeline_parallel_size
    bind = machine.cpu_threads_bind(machine.probe(), workers, engines)
    if bind is not None:
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", bind)


def build_pool(
    settings: Settings, engine: Engine | None = None, frontend: Frontend | None = None
) -> ModelPool:
    """The served models: `engine` alone (never sleeping), or one engine per model the
    settings declare, each with vLLM's `vllm:` series unless `--engine-metrics false`.
    With `frontend` (one model only), the engine is that client of a shared engine core."""
    sleeper: Sleeper = VLLMSleeper() if settings.on_gpu else PauseSleeper()
    wakes = settings.max_wakes_per_minute if settings.max_wakes_per_minute > 0 else None
    pool = ModelPool(
        sleeper,
        budget_gib=settings.memory_budget_gib,
        wakes_per_client_per_minute=wakes,
        prefer_awake_elsewhere=settings.prefer_awake_elsewhere,
    )
    if engine is not None:
        pool.add(engine)
        return pool
    from app.launch.engine_process import runs_apart

    specs = model_specs(settings)
    # Decided for the server, not per model: each model's own settings name one model.
    apart = frontend is None and runs_apart(settings)
    for spec in specs:
        model_engine = build_engine(
            engine_settings(settings, spec),
            sleep_mode=len(specs) > 1,
            engines=len(specs),
            frontend=frontend,
            apart=apart,
        )
        keep_alive = -1.0 if spec.keep_alive is None else spec.keep_alive
        pool.add(model_engine, WarmConfig(keep_alive, spec.memory_gib, spec.pinned))
    return pool
