"""Legacy text completions: what is completions-specific on the generation skeleton.

One engine request per prompt (merged by `app.services.generation`), echo, and the
legacy logprobs shape (parallel lists with text offsets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.schemas.chat import Usage
from app.schemas.completions import (
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
)
from app.services.generation import ChoiceState, Generation, GenerationService, include_usage
from app.services.sampling import check_common, sampling_options
from engine.protocol import ChoiceDelta, GenerateOutput, GenerateRequest, TokenLogprob


class LogprobsBuilder:
    """Accumulates the legacy logprobs shape (parallel lists) for one choice."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self.logprobs = CompletionLogprobs(
            tokens=[], token_logprobs=[], top_logprobs=[], text_offset=[]
        )

    def add(self, entries: Sequence[TokenLogprob | None]) -> None:
        for entry in entries:
            lists = self.logprobs
            lists.text_offset.append(self.offset)
            if entry is None:  # the first prompt token: nothing predicted it
                lists.tokens.append("")
                lists.token_logprobs.append(None)
                lists.top_logprobs.append(None)
                continue
            lists.tokens.append(entry.token)
            lists.token_logprobs.append(entry.logprob)
            lists.top_logprobs.append({top.token: top.logprob for top in entry.top})
            self.offset += len(entry.token)


def _prompts(request: CompletionRequest) -> list[str]:
    return [request.prompt] if isinstance(request.prompt, str) else list(request.prompt)


class CompletionService(GenerationService[CompletionRequest]):
    id_prefix = "cmpl"

    async def engine_requests(
        self, request: CompletionRequest, request_id: str, client: str | None
    ) -> list[GenerateRequest]:
        """One engine request per prompt, each with the request's `n`."""
        check_common(request, request.max_tokens)
        options = sampling_options(
            request,
            max_tokens=request.max_tokens,
            logprobs=request.logprobs,
            prompt_logprobs=request.logprobs if request.echo else None,
        )
        return [
            GenerateRequest(
                request_id=f"{request_id}-{i}",
                sampling=options,
                prompt=prompt,
                client=client,
                priority=request.priority,
            )
            for i, prompt in enumerate(_prompts(request))
        ]

    def generation(self, request: CompletionRequest, request_id: str) -> CompletionGeneration:
        return CompletionGeneration(request, request_id)


@dataclass(slots=True)
class CompletionChoiceState(ChoiceState):
    logprobs: LogprobsBuilder | None = None


class CompletionGeneration(Generation[CompletionChoiceState]):
    """The `text_completion` shape of one request, whole or in chunks; choice
    `position * n + i` is the i-th choice of prompt `position`."""

    def __init__(self, request: CompletionRequest, request_id: str) -> None:
        super().__init__(request_id, request.model, include_usage(request))
        self._request = request
        self._prompts = _prompts(request)
        self._echoed: set[int] = set()
        self._builders: dict[int, LogprobsBuilder] = {}  # streamed: text offsets so far

    def choice_states(self) -> dict[int, CompletionChoiceState]:
        request = self._request
        states = {}
        for index in range(len(self._prompts) * request.n):
            state = CompletionChoiceState(index)
            if request.echo:
                state.text.append(self._prompts[index // request.n])
            if request.logprobs is not None:
                state.logprobs = LogprobsBuilder()
            states[index] = state
        return states

    def absorb_output(
        self, states: dict[int, CompletionChoiceState], position: int, out: GenerateOutput
    ) -> None:
        if out.prompt_logprobs is None:
            return
        n = self._request.n
        for j in range(n):
            builder = states[position * n + j].logprobs
            if builder is not None:
                builder.add(out.prompt_logprobs)

    def state_of(
        self, states: dict[int, CompletionChoiceState], position: int, delta: ChoiceDelta
    ) -> CompletionChoiceState:
        return states[position * self._request.n + delta.index]

    def absorb(self, state: CompletionChoiceState, delta: ChoiceDelta) -> None:
        if delta.logprobs and state.logprobs is not None:
            state.logprobs.add(delta.logprobs)

    def body(self, states: dict[int, CompletionChoiceState], usage: Usage) -> Completion:
        choices = [
            CompletionChoice(
                index=state.index,
                text="".join(state.text),
                logprobs=state.logprobs.logprobs if state.logprobs is not None else None,
                finish_reason=state.finish_reason,
            )
            for state in states.values()
        ]
        return Completion(
            id=self.id, created=self.created, model=self.model, choices=choices, usage=usage
        )

    def delta_chunk(self, position: int, output: GenerateOutput, delta: ChoiceDelta) -> Completion:
        index = position * self._request.n + delta.index
        text = delta.text
        logprobs = None
        if self._request.logprobs is not None:
            previous = self._builders.get(index)
            builder = LogprobsBuilder(previous.offset if previous is not None else 0)
            if output.prompt_logprobs is not None:
                builder.add(output.prompt_logprobs)
            builder.add(delta.logprobs or [])
            self._builders[index] = builder
            logprobs = builder.logprobs
        if self._request.echo and index not in self._echoed:
            self._echoed.add(index)
            text = self._prompts[position] + text
        choice = CompletionChoice(
            index=index, text=text, logprobs=logprobs, finish_reason=delta.finish_reason
        )
        return Completion(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=[choice],
            usage=self.chunk_usage,
        )

    def usage_chunk(self, usage: Usage) -> Completion:
        return Completion(
            id=self.id, created=self.created, model=self.model, choices=[], usage=usage
        )
