"""The family's reasoning parser reaches vLLM's structured-output config."""

import json

from engine.vllm_backend.config import EngineConfig, engine_args


def test_reasoning_parser_follows_the_family(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert engine_args(EngineConfig(str(tmp_path), ("m",))).reasoning_parser == ""
    config = EngineConfig(str(tmp_path), ("m",), family="glm45")
    assert engine_args(config).reasoning_parser == "glm45"


def test_parallelism_reaches_vllm_engine_args(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    config = EngineConfig(
        str(tmp_path),
        ("m",),
        tensor_parallel_size=2,
        pipeline_parallel_size=3,
        data_parallel_size=4,
        distributed_executor_backend="ray",
    )
    args = engine_args(config)
    assert (args.tensor_parallel_size, args.pipeline_parallel_size) == (2, 3)
    assert args.data_parallel_size == 4
    assert args.distributed_executor_backend == "ray"


def test_parallelism_defaults_are_one_gpu_and_vllms_backend(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    args = engine_args(EngineConfig(str(tmp_path), ("m",)))
    assert (args.tensor_parallel_size, args.pipeline_parallel_size) == (1, 1)
    assert args.data_parallel_size == 1
    assert args.distributed_executor_backend is None
    assert args.otlp_traces_endpoint is None


def test_otlp_endpoint_and_stats_reach_vllm(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    config = EngineConfig(str(tmp_path), ("m",), otlp_traces_endpoint="http://collector:4317")
    args = engine_args(config)
    assert args.otlp_traces_endpoint == "http://collector:4317"
    # No periodic log lines; the Prometheus logger is installed by build_async_llm.
    assert args.disable_log_stats is True


def test_settings_flags_map_into_the_engine_config(monkeypatch) -> None:
    from app.config.sources import parse_args
    from app.launch.served_models import build_engine

    settings = parse_args(
        [
            "--pipeline-parallel-size", "2",
            "--data-parallel-size", "3",
            "--distributed-executor-backend", "mp",
            "--otlp-traces-endpoint", "http://c:4317",
            "--engine-frontend-process", "false",  # a VLLMEngine, its config at hand
        ]
    )  # fmt: skip
    config = build_engine(settings)._config  # type: ignore[attr-defined]  # VLLMEngine's
    assert (config.pipeline_parallel_size, config.data_parallel_size) == (2, 3)
    assert config.distributed_executor_backend == "mp"
    assert config.otlp_traces_endpoint == "http://c:4317"
    args = engine_args(config)
    assert (args.pipeline_parallel_size, args.data_parallel_size) == (2, 3)
    assert args.distributed_executor_backend == "mp"


def test_an_unknown_executor_backend_stops_before_loading() -> None:
    import pytest

    from app.config.sources import parse_args
    from app.launch.served_models import build_engine

    with pytest.raises(SystemExit, match="mp` or `ray"):
        build_engine(parse_args(["--distributed-executor-backend", "threads"]))


def test_the_cpu_keeps_chunked_prefill_and_names_the_seed_safe_worker(tmp_path) -> None:
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.worker.cpu_worker import CPUWorker

    from engine.vllm_backend.config import SEED_SAFE_CPU_WORKER

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    args = engine_args(EngineConfig(str(tmp_path), ("m",)))
    assert args.enable_chunked_prefill is not False  # None: vLLM's default, which is on
    assert args.worker_cls == SEED_SAFE_CPU_WORKER
    # The name the engine core imports is a real CPU worker.
    assert issubclass(resolve_obj_by_qualname(SEED_SAFE_CPU_WORKER), CPUWorker)


def test_the_engine_schedules_by_priority(tmp_path) -> None:
    """Deferred requests carry a priority past every interactive one (see
    tests/unit/engine/test_protocol_priority.py): vLLM orders by it only under this policy."""
    assert engine_args(EngineConfig(str(tmp_path), ("m",))).scheduling_policy == "priority"


def test_scheduler_limits_reach_vllm_only_when_set(tmp_path) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    args = engine_args(EngineConfig(str(tmp_path), ("m",)))
    defaults = AsyncEngineArgs(model=str(tmp_path))
    assert args.max_num_batched_tokens == defaults.max_num_batched_tokens
    assert args.max_num_seqs == defaults.max_num_seqs
    assert args.enable_prefix_caching == defaults.enable_prefix_caching
    config = EngineConfig(
        str(tmp_path),
        ("m",),
        max_num_batched_tokens=1024,
        max_num_seqs=64,
        long_prefill_token_threshold=256,
        enable_prefix_caching=False,
    )
    args = engine_args(config)
    assert (args.max_num_batched_tokens, args.max_num_seqs) == (1024, 64)
    assert args.long_prefill_token_threshold == 256 and args.enable_prefix_caching is False


def test_the_grammar_compile_limit_is_five_seconds_with_the_warm_up_on(tmp_path) -> None:
    config = EngineConfig(str(tmp_path), ("m",))
    assert config.grammar_compile_timeout_s == 5.0 and config.grammar_warmup


def test_grammar_warmup_false_starts_the_engine_without_the_warm_up() -> None:
    from app.config.sources import parse_args
    from app.launch.served_models import build_engine

    here = ["--engine-frontend-process", "false"]  # a VLLMEngine, its config at hand
    on = build_engine(parse_args(here))._config  # type: ignore[attr-defined]  # VLLMEngine's
    off = build_engine(parse_args([*here, "--grammar-warmup", "false"]))._config  # type: ignore[attr-defined]
    assert on.grammar_warmup is True and off.grammar_warmup is False


def test_engine_metrics_false_builds_the_engine_without_vllms_stat_logger() -> None:
    from app.config.sources import parse_args
    from app.launch.served_models import build_engine, build_pool

    # In the HTTP process (tests/unit/app/test_engine_process.py: in a process of its own).
    here = ["--engine-frontend-process", "false"]
    on = build_engine(parse_args(here))._config  # type: ignore[attr-defined]  # VLLMEngine's
    off_settings = parse_args([*here, "--engine-metrics", "false"])
    off = build_engine(off_settings)._config  # type: ignore[attr-defined]
    assert on.prometheus_stats is True and off.prometheus_stats is False
    pooled = build_pool(off_settings).first.engine._config  # type: ignore[attr-defined]
    assert pooled.prometheus_stats is False
