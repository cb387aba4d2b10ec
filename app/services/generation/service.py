"""The generation skeleton every endpoint shares: engine outputs -> choices -> response.

Chat and legacy completions run the same steps: check the model, build the engine
request(s), run them, accumulate each choice, count prompt and completion tokens, and
answer with one body or an SSE stream (a chunk per choice delta, then the usage chunk
when asked for; `app.services.generation.streaming` adds the error event and `[DONE]`). The steps
are written once here; an endpoint supplies only its engine requests and its wire
shapes (SGLang's `OpenAIServingBase` splits the same way). The engine is called in
one place, `GenerationService._admitted`, so that a change of the engine protocol
touches one function.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import ClassVar, Generic, Protocol, TypeVar

from msgspec import UNSET, Struct, UnsetType

from app.observability import context
from app.schemas.chat import CompletionTokensDetails, PromptTokensDetails, Usage
from app.schemas.sampling import SamplingFields
from app.services.generation.admission import check_request_work
from app.services.generation.sampling import resolve_model
from app.services.generation.streaming import RequestEnd, open_sse
from app.transport.sse import frame
from app.usage_source import UsageSource
from engine.admission.lease import admitted
from engine.admission.runtime import AdmissionController
from engine.checks import default_output_tokens, estimate_prompt_tokens
from engine.protocol import ChoiceDelta, Engine, GenerateOutput, GenerateRequest
from engine.streams import merge
from engine.warm.pool import ModelPool


@dataclass(slots=True)
class ChoiceState:
    """What one choice of a non-streamed response has accumulated so far."""

    index: int
    text: list[str] = field(default_factory=list)
    finish_reason: str | None = None


StateT = TypeVar("StateT", bound=ChoiceState)
RequestT = TypeVar("RequestT", bound=SamplingFields)


class Generation(ABC, Generic[StateT]):
    """One request's generation: counts usage and turns engine outputs into the
    endpoint's wire shapes. `position` is the engine request an output came from (a
    legacy completion runs one per prompt; chat runs one)."""

    def __init__(self, request_id: str, model: str, include_usage: bool) -> None:
        self.id = request_id
        self.model = model
        self.created = int(time.time())
        self.include_usage = include_usage
        # A chunk's `usage`: null on every chunk but the last when usage was asked for,
        # else absent (UNSET is never encoded).
        self.chunk_usage: UnsetType | None = None if include_usage else UNSET
        self._prompt_tokens: dict[int, int] = {}
        self._cached_tokens: dict[int, int] = {}
        self._completion_tokens = 0
        self._reasoning_tokens = 0
        self.first_output_at: float | None = None  # time.monotonic() of the first output
        # The engine's own account (it is every engine request's `tally`): what is billed.
        self.engine_prompt_tokens = 0
        self.engine_completion_tokens = 0

    # ------------------------------------------------------------ the endpoint's shapes

    @abstractmethod
    def choice_states(self) -> dict[int, StateT]:
        """Every choice of the response, by index, before any output."""

    def absorb_output(self, states: dict[int, StateT], position: int, out: GenerateOutput) -> None:
        """Per-output state beyond the deltas (none by default)."""

    @abstractmethod
    def state_of(self, states: dict[int, StateT], position: int, delta: ChoiceDelta) -> StateT:
        """The choice a delta of engine request `position` belongs to."""

    @abstractmethod
    def absorb(self, state: StateT, delta: ChoiceDelta) -> None:
        """Endpoint-specific accumulation (the text and finish reason are done)."""

    @abstractmethod
    def body(self, states: dict[int, StateT], usage: Usage) -> Struct:
        """The whole non-streamed response."""

    @abstractmethod
    def delta_chunk(
        self, position: int, output: GenerateOutput, delta: ChoiceDelta
    ) -> Struct | None:
        """The stream chunk of one delta (its `usage` is `self.chunk_usage`), or None when
        the delta has nothing to send."""

    @abstractmethod
    def usage_chunk(self, usage: Usage) -> Struct:
        """The closing chunk: no choices, and `usage`."""

    # ------------------------------------------------------------ the engine's tally

    def accepted(self, prompt_tokens: int) -> None:
        self.engine_prompt_tokens += prompt_tokens

    def generated(self, tokens: int) -> None:
        self.engine_completion_tokens += tokens

    # ------------------------------------------------------------ the skeleton

    @property
    def cached_tokens(self) -> int:
        return sum(self._cached_tokens.values())

    @property
    def reasoning_tokens(self) -> int:
        return self._reasoning_tokens

    def usage(self) -> Usage:
        prompt = sum(self._prompt_tokens.values())
        completion = self._completion_tokens
        return Usage(
            prompt,
            completion,
            prompt + completion,
            PromptTokensDetails(sum(self._cached_tokens.values())),
            CompletionTokensDetails(self._reasoning_tokens),
        )

    def _count_prompt(self, position: int, output: GenerateOutput) -> None:
        if self.first_output_at is None:
            self.first_output_at = time.monotonic()
        self._prompt_tokens[position] = output.prompt_tokens
        self._cached_tokens[position] = output.cached_tokens

    def accumulate(self, states: dict[int, StateT], position: int, output: GenerateOutput) -> None:
        self._count_prompt(position, output)
        self.absorb_output(states, position, output)
        for delta in output.choices:
            self._completion_tokens += delta.token_count
            self._reasoning_tokens += delta.reasoning_token_count
            state = self.state_of(states, position, delta)
            state.text.append(delta.text)
            if delta.finish_reason is not None:
                state.finish_reason = delta.finish_reason
            self.absorb(state, delta)

    def frames(self, output: GenerateOutput, position: int = 0) -> list[bytes]:
        """SSE frames of one engine output: a chunk per delta that has something to say.
        The per-token path: keep it to one hook call per delta."""
        self._count_prompt(position, output)
        frames = []
        for delta in output.choices:
            self._completion_tokens += delta.token_count
            self._reasoning_tokens += delta.reasoning_token_count
            data = self.delta_frame(position, output, delta)
            if data is not None:
                frames.append(data)
        return frames

    def delta_frame(
        self, position: int, output: GenerateOutput, delta: ChoiceDelta
    ) -> bytes | None:
        """The SSE frame of one delta (`delta_chunk`, encoded), or None. An endpoint may
        write its most common chunk from bytes it prepared (chat's content deltas)."""
        chunk = self.delta_chunk(position, output, delta)
        return frame(chunk) if chunk is not None else None

    def indexed_frames(self, indexed: tuple[int, GenerateOutput]) -> list[bytes]:
        position, output = indexed
        return self.frames(output, position)

    def closing_frames(self) -> list[bytes]:
        """The usage chunk (empty `choices`), when the client asked for it."""
        if not self.include_usage:
            return []
        return [frame(self.usage_chunk(self.usage()))]

    async def collect(self, outputs: AsyncIterator[GenerateOutput]) -> Struct:
        """The non-streamed response of one engine request's outputs."""
        states = self.choice_states()
        async for output in outputs:
            self.accumulate(states, 0, output)
        return self.body(states, self.usage())

    async def collect_merged(self, outputs: AsyncIterator[tuple[int, GenerateOutput]]) -> Struct:
        """The non-streamed response of several engine requests' merged outputs."""
        states = self.choice_states()
        async for position, output in outputs:
            self.accumulate(states, position, output)
        return self.body(states, self.usage())


class Generating(UsageSource, Protocol):
    """What the skeleton needs of a request's `Generation`, whatever its choice state:
    the state is the generation's own business, so a service can hold any endpoint's."""

    def accepted(self, prompt_tokens: int) -> None: ...

    def generated(self, tokens: int) -> None: ...

    def frames(self, output: GenerateOutput, position: int = 0) -> list[bytes]: ...

    def indexed_frames(self, indexed: tuple[int, GenerateOutput]) -> list[bytes]: ...

    def closing_frames(self) -> list[bytes]: ...

    async def collect(self, outputs: AsyncIterator[GenerateOutput]) -> Struct: ...

    async def collect_merged(
        self, outputs: AsyncIterator[tuple[int, GenerateOutput]]
    ) -> Struct: ...


class GenerationService(ABC, Generic[RequestT]):
    """Runs a decoded request through the engine; subclasses give the endpoint's parts."""

    id_prefix: ClassVar[str]

    def __init__(self, models: ModelPool, admission: AdmissionController) -> None:
        self._models = models
        self._admission = admission

    def engine_for(self, request: RequestT) -> Engine:
        """The engine of the model the request names (404 for a model not served)."""
        return resolve_model(self._models, request.model)

    @abstractmethod
    async def engine_requests(
        self, request: RequestT, request_id: str, client: str | None
    ) -> list[GenerateRequest]:
        """Check the request (its model is served: `engine_for` gives its engine) and
        build its engine requests.
        `client` is whom admission's fairness counts the request against."""

    @abstractmethod
    def generation(self, request: RequestT, request_id: str) -> Generating:
        """The wire shapes of this request's response."""

    async def complete(
        self, request: RequestT, client: str | None = None, meter: RequestEnd | None = None
    ) -> Struct:
        """`meter`, when given, reads the generation's usage and is finished (the usage
        record made durable) before the body is returned."""
        generation, generates, engine = await self._start(request, client, meter)
        if meter is not None:
            meter.usage_source = generation
        if len(generates) == 1:
            body = await generation.collect(self._admitted(engine, generates[0]))
        else:
            body = await generation.collect_merged(self._merged(engine, generates))
        if meter is not None:
            await meter.finish()
        return body

    async def open_stream(
        self, request: RequestT, client: str | None = None, meter: RequestEnd | None = None
    ) -> AsyncIterator[bytes]:
        """Errors of the request are raised here, before any byte of the stream; `meter`
        is finished before the stream's last frame."""
        generation, generates, engine = await self._start(request, client, meter)
        if meter is not None:
            meter.usage_source = generation
        if len(generates) == 1:
            outputs = self._admitted(engine, generates[0])
            return await open_sse(outputs, generation.frames, generation.closing_frames, meter)
        merged = self._merged(engine, generates)
        return await open_sse(merged, generation.indexed_frames, generation.closing_frames, meter)

    def reserved_tokens(self, request: RequestT, body_bytes: int) -> int:
        """Tokens a request may use, before it is tokenized, for per-key token limits: a
        generous prompt estimate (`estimate_prompt_tokens` of the request body) plus every
        choice's output budget (without `max_tokens`, the model's default) for each of
        its prompts."""
        prompt = estimate_prompt_tokens(body_bytes)
        limit = getattr(request, "max_completion_tokens", None) or getattr(
            request, "max_tokens", None
        )
        if limit is None:
            model = self._models.get(request.model) or self._models.first  # unknown: 404 later
            limit = default_output_tokens(model.model.max_model_len)
        return prompt + self.slots(request) * request.n * limit

    def slots(self, request: RequestT) -> int:
        """Concurrent engine requests the request runs, one per prompt (its `n` choices
        share each prompt's): one, unless the endpoint takes several prompts."""
        return 1

    async def _start(
        self, request: RequestT, client: str | None, meter: RequestEnd | None = None
    ) -> tuple[Generating, list[GenerateRequest], Engine]:
        """The request's generation and engine requests, each carrying the weight of the
        key behind `meter` (1.0 without one) for the engine's fair scheduler."""
        record = context.current()
        if record is not None:
            record.model = request.model
        engine = self.engine_for(request)
        # The HTTP request's id (X-Request-Id) names the engine request and the response.
        if record is not None:
            request_id = record.engine_request_id(self.id_prefix)
        else:
            request_id = f"{self.id_prefix}-{context.new_request_id()}"
        generates = await self.engine_requests(request, request_id, client)
        policy = self._admission.policy
        check_request_work(generates, engine.model.max_model_len, policy.max_request_tokens)
        generation = self.generation(request, request_id)
        weight = meter.weight if meter is not None else 1.0
        for generate in generates:
            generate.tally = generation
            generate.weight = weight
        if record is not None:
            record.usage_source = generation
        return generation, generates, engine

    def _admitted(
        self, engine: Engine, generate: GenerateRequest
    ) -> AsyncGenerator[GenerateOutput, None]:
        """The one call into the engine: one request's outputs as they come (no merging
        on the per-token path)."""
        return admitted(self._admission, engine, generate)

    def _merged(
        self, engine: Engine, generates: list[GenerateRequest]
    ) -> AsyncGenerator[tuple[int, GenerateOutput], None]:
        """Several requests' outputs as (position, output) pairs, merged."""
        return merge([self._admitted(engine, g) for g in generates])


def include_usage(request: SamplingFields) -> bool:
    options = request.stream_options
    return bool(options and options.include_usage)
