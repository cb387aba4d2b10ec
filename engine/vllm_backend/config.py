"""How the vLLM engine is configured and built from lilac-serve's settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.errors import EngineFailure
from engine.fairness import CONFIG_KEY
from engine.families import Family, for_model


@dataclass(frozen=True, slots=True)
class Frontend:
    """One of several frontend processes sharing an engine core another process launched
    (engine.vllm_backend.shared_core): every client's pair of ZMQ sockets (requests in,
    outputs back) and which client this process is (it binds the pair at `index`)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    index: int = 0
    stats_update_address: str | None = None

    @property
    def count(self) -> int:
        return len(self.inputs)

    def at(self, index: int) -> Frontend:
        if not 0 <= index < self.count:
            raise ValueError(f"client index {index} is not in 0..{self.count - 1}")
        return Frontend(self.inputs, self.outputs, index, self.stats_update_address)

    def client_addresses(self) -> dict[str, Any]:
        """AsyncLLM's `client_addresses`: this client's pair of sockets."""
        addresses: dict[str, Any] = {
            "input_address": self.inputs[self.index],
            "output_address": self.outputs[self.index],
        }
        if self.stats_update_address is not None:
            addresses["stats_update_address"] = self.stats_update_address
        return addresses


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What vLLM needs to load a model; built from the server settings."""

    model: str
    served_names: tuple[str, ...]
    dtype: str = "auto"
    max_model_len: int | None = None
    enforce_eager: bool = False
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1  # model layers split over GPUs (and nodes, with Ray)
    data_parallel_size: int = 1  # engine replicas inside this one server
    # vLLM's `--distributed-executor-backend`: "mp" (one node) or "ray"; None: vLLM picks.
    distributed_executor_backend: str | None = None
    otlp_traces_endpoint: str | None = None  # OpenTelemetry collector for request spans
    gpu_memory_utilization: float = 0.9
    seed: int = 0
    chat_template: str | None = None  # template text overriding the family's and tokenizer's
    family: str | None = None  # `--family`; None: detected from the model (engine.families)
    # vLLM tool-parser name of the model's call format; None: the family's (else hermes).
    tool_parser: str | None = None
    # vLLM's sleep mode (GPU only): lets a yielded engine free its GPU memory.
    enable_sleep_mode: bool = False
    # vLLM's Prometheus stat logger (the `vllm:` series). One engine per process only:
    # building another AsyncLLM with it unregisters the first one's series.
    prometheus_stats: bool = True
    # Longest a new grammar may compile before its request is refused (0: no limit).
    grammar_compile_timeout_s: float = 5.0
    # Compile the bounded strings all schemas share at start (grammar_warmup).
    grammar_warmup: bool = True
    # The scheduler's limits; None: vLLM's defaults (engine.machine picks them on a CPU).
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    long_prefill_token_threshold: int | None = None
    enable_prefix_caching: bool | None = None
    # Set: connect to a shared engine core as this frontend instead of starting one.
    frontend: Frontend | None = None
    # The engine's waiting queue ordered by each tenant's service (engine.fairness) and
    # its heavy tenants' prefills held to their share of a step; False: vLLM's own
    # priority scheduler (tier, then arrival).
    fair_share: bool = True
    # Where the engine core publishes its tenants' shares once a second (None: nowhere).
    fairness_shares_path: str | None = None
    # Prompt tokens one request may compute in a step where a less-served client waits
    # (engine.vllm_backend.fair_scheduler); None: the scheduler's default.
    contended_chunk: int | None = None

    @property
    def family_record(self) -> Family | None:
        return for_model(self.model, self.family)


def engine_args(config: EngineConfig) -> Any:
    """vLLM's engine arguments. The family's reasoning parser goes to the structured-output
    config, so a grammar (json_schema, a tool call) applies only once reasoning ends."""
    from vllm.config import StructuredOutputsConfig
    from vllm.engine.arg_utils import AsyncEngineArgs

    family = config.family_record
    return AsyncEngineArgs(
        **cpu_scheduling(),
        **scheduler_limits(config),
        model=config.model,
        served_model_name=list(config.served_names),
        dtype=config.dtype,  # type: ignore[arg-type]  # one of --dtype's choices
        max_model_len=config.max_model_len,  # type: ignore[arg-type]  # None: the model's own
        enforce_eager=config.enforce_eager,
        tensor_parallel_size=config.tensor_parallel_size,
        pipeline_parallel_size=config.pipeline_parallel_size,
        data_parallel_size=config.data_parallel_size,
        distributed_executor_backend=config.distributed_executor_backend,
        otlp_traces_endpoint=config.otlp_traces_endpoint,
        gpu_memory_utilization=config.gpu_memory_utilization,
        seed=config.seed,
        # No periodic throughput log lines; the Prometheus series come from the stat
        # logger `build_async_llm` installs.
        disable_log_stats=True,
        enable_sleep_mode=config.enable_sleep_mode,
        # xgrammar, and no free whitespace inside JSON: where small models loop.
        structured_outputs_config=StructuredOutputsConfig(
            backend="xgrammar", disable_any_whitespace=True
        ),
        reasoning_parser=(family.reasoning_parser if family else None) or "",
        # Requests carry a priority (engine.protocol.scheduling_priority): a deferred
        # request waiting in the engine never goes before an interactive one, and is
        # the first preempted when the KV cache runs short.
        scheduling_policy="priority",
        **fair_scheduling(config),
    )


FAIR_SCHEDULER = "engine.vllm_backend.fair_scheduler.FairScheduler"


def fair_scheduling(config: EngineConfig) -> dict[str, Any]:
    """The fair scheduler (by name: the engine core imports it in its own process) and
    its settings, which reach that process in vLLM's `additional_config`."""
    if not config.fair_share:
        return {}
    settings: dict[str, Any] = {"shares_path": config.fairness_shares_path}
    if config.contended_chunk is not None:
        settings["contended_chunk"] = config.contended_chunk
    return {"scheduler_cls": FAIR_SCHEDULER, "additional_config": {CONFIG_KEY: settings}}


def scheduler_limits(config: EngineConfig) -> dict[str, Any]:
    """The scheduler limits the config sets; the rest stay vLLM's defaults."""
    limits = {
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "max_num_seqs": config.max_num_seqs,
        "long_prefill_token_threshold": config.long_prefill_token_threshold,
        "enable_prefix_caching": config.enable_prefix_caching,
    }
    return {name: value for name, value in limits.items() if value is not None}


# By name: the engine core imports it in its own process; importing vLLM's CPU worker
# here would load its shared-memory setup into the HTTP process for nothing.
SEED_SAFE_CPU_WORKER = "engine.vllm_backend.cpu_worker.SeedSafeCPUWorker"


def cpu_scheduling() -> dict[str, Any]:
    """On the CPU, vLLM's CPU worker with seed-safe sampling; chunked prefill stays on.

    With chunked prefill, vLLM's model runner rewinds a seeded request's generator by
    its offset after discarding the token sampled at a partial prefill, and the CPU
    generator has no offset: a seeded prompt longer than one step's token budget (or a
    burst of seeded requests overflowing one step) would kill the engine core with "CPU
    Generator does not use offset". The worker in `engine.vllm_backend.cpu_worker` saves
    and restores those generators' state around the draw instead, which is what the
    rewind means, so a prompt can be split across steps and the first tokens of a
    crowd of prompts come steps sooner. GPUs use vLLM's own worker: their generators
    rewind."""
    from vllm.platforms import current_platform

    return {"worker_cls": SEED_SAFE_CPU_WORKER} if current_platform.is_cpu() else {}


def check_family_markers(config: EngineConfig) -> None:
    """Refuse a family whose reasoning markers the model's tokenizer lacks, before the
    engine core spends a minute loading weights only to die on the same check (and its
    reason stays in the core process's log). Builds vLLM's own parser on the tokenizer."""
    family = config.family_record
    if family is None or not family.reasoning_parser:
        return
    from vllm.reasoning import ReasoningParserManager
    from vllm.tokenizers import get_tokenizer

    tokenizer = get_tokenizer(config.model)
    parser_cls = ReasoningParserManager.get_reasoning_parser(family.reasoning_parser)
    try:
        parser_cls(tokenizer)
    except Exception as exc:  # vLLM's parsers raise ValueError or RuntimeError
        raise EngineFailure(
            f"family `{family.name}` does not fit {config.model}: the tokenizer lacks its "
            f"reasoning markers ({exc})"
        ) from exc


def build_async_llm(config: EngineConfig) -> Any:
    """The engine, with vLLM's own Prometheus stat logger: the `vllm:` series `vllm serve`
    exports (same names, labels and buckets), in prometheus_client's default registry,
    which /metrics serves beside lilac-serve's own; every engine of the process shares
    the metric objects, each labelled with its model (engine.vllm_backend.shared_metrics)."""
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    from engine.vllm_backend.shared_metrics import SharedPrometheusStatLogger

    check_family_markers(config)
    stat_loggers: list[Any] | None = (
        [SharedPrometheusStatLogger] if config.prometheus_stats else None
    )
    frontend = config.frontend
    if frontend is None:
        return AsyncLLM.from_engine_args(
            engine_args(config),
            usage_context=UsageContext.OPENAI_API_SERVER,
            stat_loggers=stat_loggers,
        )
    # One of several frontends: the same engine config the supervisor built, told which
    # client this is, and the engine core it launched (vLLM's multi API-server mode).
    args = with_frontends(engine_args(config), frontend.count, frontend.index)
    vllm_config = args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    return AsyncLLM.from_vllm_config(
        vllm_config,
        usage_context=UsageContext.OPENAI_API_SERVER,
        stat_loggers=stat_loggers,
        disable_log_stats=args.disable_log_stats,
        client_addresses=frontend.client_addresses(),
        client_count=frontend.count,
        client_index=frontend.index,
    )


def with_frontends(args: Any, count: int, rank: int) -> Any:
    """vLLM's engine arguments told how many frontend processes share the engine core and
    which one this process is (-1: the supervisor, which serves no requests)."""
    args._api_process_count = count
    args._api_process_rank = rank
    return args
