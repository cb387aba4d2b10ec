"""The Engine implemented with vLLM's AsyncLLM. The only module that imports vllm's engine."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from engine.errors import (
    ContextLengthExceeded,
    EngineFailure,
    EngineRequestError,
    EngineUnavailable,
)
from engine.families import Family, for_model
from engine.parsing import OutputParsing
from engine.protocol import ChoiceDelta, GenerateOutput, GenerateRequest, ModelInfo
from engine.templates import load_template_file, render_chat

log = logging.getLogger("lilac.engine")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What vLLM needs to load a model; built from the server settings."""

    model: str
    served_names: tuple[str, ...]
    dtype: str = "auto"
    max_model_len: int | None = None
    enforce_eager: bool = False
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    seed: int = 0
    chat_template: str | None = None  # template text overriding the family's and tokenizer's
    family: str | None = None  # `--family`; None: detected from the model (engine.families)

    @property
    def family_record(self) -> Family | None:
        return for_model(self.model, self.family)


class VLLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self._config = config
        self._llm: Any = None
        self._tokenizer: Any = None
        self._template: str | None = None
        self._special_tokens: dict[str, str] = {}
        self._model: ModelInfo | None = None
        self._parsing = OutputParsing(None, None)
        self._build: asyncio.Future[Any] | None = None

    @property
    def model(self) -> ModelInfo:
        if self._model is None:
            # Before start: what the config says, with the length still unknown.
            return ModelInfo(self._config.served_names, 0, int(time.time()), self._config.model)
        return self._model

    async def start(self) -> None:
        # Importing vLLM and building the engine block for most of a minute; a thread
        # keeps the event loop free to answer /health meanwhile.
        self._build = asyncio.ensure_future(asyncio.to_thread(_build_async_llm, self._config))
        llm = await asyncio.shield(self._build)
        self._tokenizer = llm.get_tokenizer()
        self._special_tokens = {
            "bos_token": self._tokenizer.bos_token or "",
            "eos_token": self._tokenizer.eos_token or "",
        }
        model_config = llm.model_config
        self._model = ModelInfo(
            served_names=self._config.served_names,
            max_model_len=model_config.max_model_len,
            created=int(time.time()),
            root=self._config.model,
        )
        self.bind_family(self._config.family_record, self._config.chat_template)
        self._llm = llm

    def bind_family(self, family: Family | None, chat_template: str | None = None) -> None:
        """Bind the served model to `family`: its template (unless `chat_template`
        overrides it) and its output parsing. Done at start; tests rebind one checkpoint
        to several families. vLLM's structured-output gate keeps the reasoning parser the
        engine was built with (EngineConfig.family)."""
        template = chat_template
        if template is None and family is not None:
            template = load_template_file(family.template)
        template = template or self._tokenizer.chat_template
        if not template:
            raise EngineFailure(f"{self._config.model} has no chat template; pass --chat-template")
        self._template = template
        self._parsing = OutputParsing(family, self._tokenizer)
        if self._model is not None:
            self._model = replace(
                self._model,
                family=family.name if family else None,
                reasons_by_default=family.reasons_by_default if family else False,
            )

    async def shutdown(self) -> None:
        llm, self._llm = self._llm, None
        if llm is None and self._build is not None:
            # Stopped while still loading: a thread cannot be cancelled, so let the build
            # finish and then stop what it started, leaving no engine-core process behind.
            try:
                llm = await self._build
            except Exception:
                return
        self._build = None
        if llm is not None:
            # Stop reading outputs first: the engine core going away is expected now.
            if llm.output_handler is not None:
                llm.output_handler.cancel()
            await asyncio.to_thread(llm.shutdown)

    def is_ready(self) -> bool:
        return self._llm is not None and not self._llm.errored

    def unfinished_requests(self) -> int:
        if self._llm is None:
            return 0
        return self._llm.output_processor.get_num_unfinished_requests()

    async def abort(self, request_id: str) -> None:
        if self._llm is not None:
            await self._llm.abort(request_id)

    def _prompt_token_ids(self, request: GenerateRequest) -> list[int]:
        if request.messages is not None:
            text = render_chat(
                self._template or "",
                request.messages,
                special_tokens=self._special_tokens,
                template_kwargs=request.template_kwargs,
            )
            # The template already wrote the special tokens.
            return self._tokenizer.encode(text, add_special_tokens=False)
        return self._tokenizer.encode(request.prompt or "", add_special_tokens=True)

    def _output_budget(self, prompt_tokens: int, requested: int | None) -> int:
        limit = self.model.max_model_len
        room = limit - prompt_tokens
        if requested is None:
            if room <= 0:
                raise ContextLengthExceeded(prompt_tokens, None, limit)
            return room
        if requested > room:
            raise ContextLengthExceeded(prompt_tokens, requested, limit)
        return requested

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateOutput]:
        if not self.is_ready():
            raise EngineUnavailable("The model is still loading.")
        from engine.sampling import to_sampling_params

        request, parsing = self._parsing.prepare(request)  # reasoning controls: may 400
        prompt_ids = self._prompt_token_ids(request)
        parsing.prompt_token_ids = prompt_ids
        max_tokens = self._output_budget(len(prompt_ids), request.sampling.max_tokens)
        params = to_sampling_params(request.sampling, max_tokens)
        reasoning_ended = self._constrain(request, params)
        prompt_tokens = len(prompt_ids)
        stream = self._llm.generate(
            {"prompt_token_ids": prompt_ids},
            params,
            request.request_id,
            reasoning_ended=reasoning_ended,
            **parsing.engine_kwargs,
        )
        try:
            async for output in stream:
                yield GenerateOutput(
                    prompt_tokens=prompt_tokens,
                    choices=[
                        parsing.apply(
                            ChoiceDelta(
                                index=completion.index,
                                text=completion.text,
                                token_count=len(completion.token_ids),
                                finish_reason=_finish_reason(completion.finish_reason),
                            ),
                            completion.token_ids,
                        )
                        for completion in output.outputs
                    ],
                )
        except ValueError as exc:  # vLLM's input validation
            raise EngineRequestError(str(exc)) from exc
        except Exception as exc:
            raise EngineFailure(repr(exc)) from exc
        finally:
            # Closed early (client gone, or an error): closing vLLM's generator aborts the
            # request in the engine core. A no-op when it already finished.
            await stream.aclose()

    def _constrain(self, request: GenerateRequest, params: Any) -> bool | None:
        """Add structured-output constraints to vLLM's `params`; return whether reasoning
        has already ended (None: vLLM's gate decides from the prompt and the family's
        parser). Nothing yet (response_format and tools come with their own issues); the
        family tests override it to make SmolLM2 write a family's reasoning markers."""
        return None


def engine_args(config: EngineConfig) -> Any:
    """vLLM's engine arguments. The family's reasoning parser goes to the structured-output
    config, so a grammar (json_schema, a tool call) applies only once reasoning ends."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    family = config.family_record
    return AsyncEngineArgs(
        model=config.model,
        served_model_name=list(config.served_names),
        dtype=config.dtype,
        max_model_len=config.max_model_len,
        enforce_eager=config.enforce_eager,
        tensor_parallel_size=config.tensor_parallel_size,
        gpu_memory_utilization=config.gpu_memory_utilization,
        seed=config.seed,
        disable_log_stats=True,
        reasoning_parser=(family.reasoning_parser if family else None) or "",
    )


def _build_async_llm(config: EngineConfig) -> Any:
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    args = engine_args(config)
    return AsyncLLM.from_engine_args(args, usage_context=UsageContext.OPENAI_API_SERVER)


def _finish_reason(reason: str | None) -> Any:
    if reason is None:
        return None
    return "length" if reason == "length" else "stop"
