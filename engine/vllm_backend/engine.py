"""`VLLMEngine`: the Engine (both `Generator` and `ModelHost` of engine.protocol)
implemented over vLLM's AsyncLLM (built by `config`).

It renders and tokenizes prompts, fits the output budget into the context length,
submits requests to the AsyncLLM (greedy `n > 1` as `n` requests, which vLLM refuses as
one) and turns vLLM's outputs into engine deltas, with reasoning and tool calls split
off; it also pauses, resumes and sleeps the AsyncLLM for the admission controller. The
decisions every engine shares (readiness, image input, context budget) come from
`engine.checks`; rendering prompts is `engine.vllm_backend.prompts`, running one
engine-core request and reading its outputs `engine.vllm_backend.request_stream`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from engine.checks import (
    checked,
    output_budget,
    require_image_input,
    require_ready,
    truncated,
)
from engine.errors import EngineFailure, EngineRequestError
from engine.fairness import tenant_args
from engine.families import Family
from engine.offload import off_loop
from engine.protocol import (
    GenerateOutput,
    GenerateRequest,
    ImageInput,
    ModelInfo,
    SamplingOptions,
)
from engine.streams import merge
from engine.templates import load_template_file
from engine.tool_use import calls_tools
from engine.vllm_backend.config import EngineConfig, build_async_llm
from engine.vllm_backend.encoding import encoder
from engine.vllm_backend.grammar_gate import GrammarGate, constraint_param
from engine.vllm_backend.grammar_warmup import warm_grammars
from engine.vllm_backend.outputs import (
    OutputConversion,
    check_token_ids,
    kv_cache_tokens,
    takes_images,
)
from engine.vllm_backend.prompts import Prompts
from engine.vllm_backend.reasoning import OutputParsing, RequestParsing
from engine.vllm_backend.request_stream import Plan, stream_request
from engine.vllm_backend.structured import constraint_for
from engine.vllm_backend.tally import OnePrompt
from engine.vllm_backend.tool_calls import ToolRequest

log = logging.getLogger("lilac.engine")


def frontends(config: EngineConfig) -> int:
    """How many frontend processes share this engine's core (1: this one alone)."""
    return 1 if config.frontend is None else config.frontend.count


class VLLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self._config = config
        self._llm: Any = None
        self._tokenizer: Any = None
        self._model: ModelInfo | None = None
        self._build: asyncio.Future[Any] | None = None
        self._parsing = OutputParsing(None, None)
        self._turn_end_ids: tuple[int, ...] = ()
        self._turn_end_texts: tuple[str, ...] = ()
        self._tool_parser = "hermes"
        self._grammar_gate: GrammarGate | None = None
        self._prompts = Prompts("", {}, encoder(None))

    @property
    def model(self) -> ModelInfo:
        if self._model is None:
            # Before start: what the config says, with the length still unknown.
            return ModelInfo(self._config.served_names, 0, int(time.time()), self._config.model)
        return self._model

    async def start(self) -> None:
        # Importing vLLM and building the engine block for most of a minute; a thread
        # keeps the event loop free to answer /health meanwhile.
        self._build = asyncio.ensure_future(asyncio.to_thread(build_async_llm, self._config))
        llm = await asyncio.shield(self._build)
        self._tokenizer = llm.get_tokenizer()
        model_config = llm.model_config
        self._model = ModelInfo(
            served_names=self._config.served_names,
            max_model_len=model_config.max_model_len,
            created=int(time.time()),
            root=self._config.model,
            vocab_size=model_config.get_vocab_size(),
            # Several frontends share the engine core: each admits against its share.
            kv_cache_tokens=kv_cache_tokens(llm) // frontends(self._config),
            supports_vision=takes_images(llm),
        )
        self.bind_family(self._config.family_record, self._config.chat_template)
        self._grammar_gate = await asyncio.to_thread(self._build_gate, self._model.vocab_size)
        if self._config.grammar_warmup:
            eos = self._tokenizer.eos_token_id or 0
            await warm_grammars(llm, self._tool_parser, eos, self._grammar_gate)
        self._llm = llm

    def _build_gate(self, vocab_size: int | None) -> GrammarGate | None:
        try:
            return GrammarGate(self._tokenizer, vocab_size, self._config.grammar_compile_timeout_s)
        except Exception:  # a tokenizer xgrammar cannot read: the engine core decides alone
            log.warning("no grammar compile deadline for this tokenizer", exc_info=True)
            return None

    def bind_family(self, family: Family | None, chat_template: str | None = None) -> None:
        """Bind the served model to `family`: its template (unless `chat_template`
        overrides it), its output parsing and its tool-call format. Done at start; tests
        rebind one checkpoint to several families. vLLM's structured-output gate keeps
        the reasoning parser the engine was built with (EngineConfig.family)."""
        template = chat_template
        if template is None and family is not None:
            template = load_template_file(family.template)
        template = template or self._tokenizer.chat_template
        if not template:
            raise EngineFailure(f"{self._config.model} has no chat template; pass --chat-template")
        max_model_len = self._model.max_model_len if self._model is not None else 0
        self._prompts = Prompts.of(self._tokenizer, template, family, max_model_len)
        self._parsing = OutputParsing(family, self._tokenizer)
        vocab = self._tokenizer.get_vocab()
        turn_ends = family.turn_ends if family else ()
        self._turn_end_ids = tuple(vocab[token] for token in turn_ends if token in vocab)
        self._turn_end_texts = tuple(turn_ends)
        family_parser = family.tool_parser if family else None
        self._tool_parser = self._config.tool_parser or family_parser or "hermes"
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

    def is_alive(self) -> bool:
        return self._llm is None or not self._llm.errored

    def is_ready(self) -> bool:
        return self._llm is not None and not self._llm.errored

    def failure(self) -> str | None:
        llm = self._llm
        if llm is None or not llm.errored:
            return None
        resources = getattr(llm.engine_core, "resources", None)  # the multiprocess client's
        if resources is not None and resources.engine_dead:
            return "the engine core process died"
        return "the engine's output handler stopped"

    def unfinished_requests(self) -> int:
        if self._llm is None:
            return 0
        return self._llm.output_processor.get_num_unfinished_requests()

    async def abort(self, request_id: str) -> None:
        if self._llm is not None:
            await self._llm.abort(request_id)

    async def pause(self) -> None:
        if self._config.frontend is not None:
            # A shared engine core is not this process's to pause: vLLM's pause stops the
            # scheduler for every client, and its abort ends the other processes' requests
            # too (on SIGTERM each process drains its own, then stops; this one's
            # stragglers were aborted one by one already).
            return
        # Keep the prefix cache: it makes the return warm when memory stays allocated.
        await self._llm.pause_generation(mode="abort", clear_cache=False)

    async def resume(self) -> None:
        if self._config.frontend is not None:
            return  # never paused (above)
        await self._llm.resume_generation()

    async def release_memory(self) -> bool:
        # Sleep level 1 offloads weights to host memory and drops the KV cache; it needs
        # the engine built with sleep mode (CUDA only: the CPU worker ignores it).
        if not self._config.enable_sleep_mode:
            return False
        await self._llm.sleep(level=1)
        return True

    async def reacquire_memory(self) -> None:
        await self._llm.wake_up()

    async def metrics_exposition(self) -> str:
        # Its `vllm:` series are in this process's default registry, which `/metrics`
        # serves (or, in a process of its own, engine.remote.child sends them).
        return ""

    def _prompt_token_ids(self, request: GenerateRequest) -> list[int]:
        if request.prompt_token_ids is not None:
            check_token_ids(request.prompt_token_ids, self.model.vocab_size, "prompt")
            return list(request.prompt_token_ids)
        return self._prompts.token_ids(request)

    def tokenize(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        add_special_tokens: bool = True,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        require_ready(self)
        return self._prompts.tokenize(
            prompt=prompt,
            messages=messages,
            add_special_tokens=add_special_tokens,
            add_generation_prompt=add_generation_prompt,
        )

    def detokenize(self, token_ids: list[int]) -> str:
        require_ready(self)
        check_token_ids(token_ids, self.model.vocab_size, "tokens")
        return self._tokenizer.decode(token_ids)

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        require_ready(self)
        sampling = request.sampling
        check_token_ids(list(sampling.logit_bias), self.model.vocab_size, "logit_bias")
        check_token_ids(sampling.stop_token_ids, self.model.vocab_size, "stop_token_ids")
        allowed = sampling.allowed_token_ids
        check_token_ids(allowed or [], self.model.vocab_size, "allowed_token_ids")
        request, parsing = self._parsing.prepare(request)  # reasoning controls: may 400
        # Rendering and tokenizing take time in proportion to the prompt: off the loop.
        prompt_ids = await off_loop(self._prompt_token_ids, request)
        prompt_ids = truncated(prompt_ids, request, self.model.max_model_len)
        prompt: dict[str, Any] = {"prompt_token_ids": prompt_ids}
        if request.images:
            # vLLM's processor puts each image's tokens in place of its placeholder:
            # the prompt (and its length, for the budget and `prompt_tokens`) grows.
            prompt = await self._multimodal_prompt(prompt_ids, request.images)
            prompt_ids = list(prompt["prompt_token_ids"])
        # Off the loop only when there is work: a hand-over to the pool and back costs
        # more of the loop's time than the no-op it would run (most requests).
        if self._parsing.finds_turns:
            parsing.prompt_token_ids = await off_loop(self._parsing.current_turn, prompt_ids)
        else:
            parsing.prompt_token_ids = prompt_ids
        max_tokens = output_budget(len(prompt_ids), sampling.max_tokens, self.model.max_model_len)
        if request.cache_salt is not None:
            prompt["cache_salt"] = request.cache_salt  # vLLM scopes its prefix cache by it
        # Checking and bounding schemas and building the grammar's spec: off the loop too
        # (a request without tools or a response format has none).
        constraint = None
        if request.response_format is not None or request.tools is not None:
            constraint = await off_loop(constraint_for, request, self._tool_parser, max_tokens)
        if self._grammar_gate is not None:
            await self._grammar_gate.check(constraint, constraint_param(request))
        greedy_n = sampling.n > 1 and sampling.temperature == 0
        # vLLM's own parameter checks, too, before the request may wake a model; a single
        # stream runs with the parameters they built.
        checked_params = self._sampling_params(
            replace(sampling, n=1) if greedy_n else sampling, max_tokens
        )
        await checked(request)
        if greedy_n:
            # vLLM refuses n > 1 with greedy sampling; OpenAI allows it. Run n requests.
            single = replace(sampling, n=1)
            one_prompt = OnePrompt(request.tally) if request.tally is not None else None
            streams = [
                self._stream(
                    request,
                    dict(prompt),
                    prompt_ids,
                    Plan(single, max_tokens, f"{request.request_id}-{i}", constraint, one_prompt),
                    # each stream's choice 0 is its own: its own reasoning splitter
                    RequestParsing(parsing.parsing, parsing.settings, parsing.prompt_token_ids),
                )
                for i in range(sampling.n)
            ]
            async with aclosing(merge(streams)) as merged:
                async for position, output in merged:
                    for choice in output.choices:
                        choice.index = position
                    yield output
            return
        # aclosing: closing this generator must close (and so abort) the inner one at once.
        plan = Plan(sampling, max_tokens, request.request_id, constraint, request.tally)
        stream = self._stream(request, prompt, prompt_ids, plan, parsing, checked_params)
        async with aclosing(stream) as outputs:
            async for output in outputs:
                yield output

    def _tool_request(self, request: GenerateRequest) -> ToolRequest | None:
        if request.tools is None or not calls_tools(request.tools, request.tool_choice):
            return None
        return ToolRequest(request.tools, request.tool_choice, request.parallel_tool_calls)

    async def _multimodal_prompt(
        self, prompt_ids: list[int], images: list[ImageInput]
    ) -> dict[str, Any]:
        require_image_input(self.model)
        # `detail` has no counterpart in vLLM's processors: each model sizes images its way.
        data = {"image": [image.image for image in images]}
        try:
            (rendered,) = await self._llm.renderer.render_cmpl_async(
                [{"prompt_token_ids": prompt_ids, "multi_modal_data": data}]
            )
        except ValueError as exc:  # e.g. placeholders and images do not match
            raise EngineRequestError(
                f"The images could not be placed in the prompt: {exc}", param="messages"
            ) from exc
        return rendered

    def _sampling_params(self, sampling: SamplingOptions, max_tokens: int) -> Any:
        from engine.vllm_backend.sampling import to_sampling_params

        try:
            return to_sampling_params(
                sampling, max_tokens, self._turn_end_ids, self._turn_end_texts
            )
        except ValueError as exc:  # vLLM's own parameter checks
            raise EngineRequestError(str(exc)) from exc

    def _stream(
        self,
        request: GenerateRequest,
        prompt: dict[str, Any],
        prompt_ids: list[int],
        plan: Plan,
        parsing: RequestParsing,
        params: Any = None,
    ) -> AsyncGenerator[GenerateOutput, None]:
        """The request's stream: its parameters (`params`, or built now) and output
        conversion, its submission at the first read (engine.vllm_backend.request_stream)."""
        sampling = plan.sampling
        if params is None:
            params = self._sampling_params(sampling, plan.max_tokens)
        params.structured_outputs = plan.constraint
        params.extra_args = tenant_args(request.client, request.weight)
        top_k = sampling.logprobs or 0
        conversion = OutputConversion(
            parsing, top_k, self._tool_request(request), self._tool_parser, self._tokenizer
        )
        return stream_request(
            lambda: self._llm,
            request,
            prompt,
            prompt_ids,
            plan,
            params,
            conversion,
            parsing,
            self._tokenizer,
        )
