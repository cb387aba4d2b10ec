"""Legacy text completions: what is completions-specific on the generation skeleton.

One engine request per prompt (merged by `app.services.generation.service`), echo, the legacy
logprobs shape (parallel lists with text offsets) and vLLM's `prompt_logprobs` per choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from msgspec import UNSET

from app.errors import InvalidRequest
from app.schemas.chat import Usage
from app.schemas.completions import (
    MAX_PROMPTS,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
)
from app.schemas.extensions import PromptLogprobs
from app.services.generation import prompt_logprobs
from app.services.generation.extensions import extension_fields
from app.services.generation.sampling import check_common, sampling_options
from app.services.generation.service import (
    ChoiceState,
    Generation,
    GenerationService,
    include_usage,
)
from app.services.generation.tools import response_format_constraint
from engine.offload import off_loop
from engine.protocol import ChoiceDelta, GenerateOutput, GenerateRequest, TokenLogprob


class LogprobsBuilder:
    """Accumulates the legacy logprobs shape (parallel lists) for one choice: `tokens`
    joined give back the text, and each `text_offset` is where its token starts."""

    def __init__(self, offset: int = 0, top_k: int | None = None) -> None:
        self.offset = offset
        # Alternatives kept per token: the engine may have computed more for the prompt
        # (when `prompt_logprobs` asks for more than `logprobs`).
        self.top_k = top_k
        self.logprobs = CompletionLogprobs(
            tokens=[], token_logprobs=[], top_logprobs=[], text_offset=[]
        )

    def add_prompt(self, entries: Sequence[TokenLogprob | None], texts: Sequence[str]) -> None:
        """Echoed prompt tokens; `texts` has each one's text (the first one has no entry:
        nothing predicted it, yet its text starts the prompt)."""
        for entry, text in zip(entries, texts, strict=False):
            if entry is not None:
                self.add([entry])
                continue
            lists = self.logprobs
            lists.text_offset.append(self.offset)
            lists.tokens.append(text)
            lists.token_logprobs.append(None)
            lists.top_logprobs.append(None)
            self.offset += len(text)

    def add(self, entries: Sequence[TokenLogprob | None]) -> None:
        for entry in entries:
            if entry is None:  # a prompt token without its text: keep the lists aligned
                self.add_prompt([None], [""])
                continue
            lists = self.logprobs
            lists.text_offset.append(self.offset)
            lists.tokens.append(entry.token)
            lists.token_logprobs.append(entry.logprob)
            top = entry.top if self.top_k is None else entry.top[: self.top_k]
            lists.top_logprobs.append({alt.token: alt.logprob for alt in top})
            self.offset += len(entry.token)


Prompt = str | list[int]


def prompts_of(request: CompletionRequest) -> list[Prompt]:
    """The request's prompts: strings, or token-id lists; a list mixing kinds is a 400."""
    prompt = request.prompt
    if isinstance(prompt, str):
        return [prompt]
    if all(isinstance(item, int) for item in prompt):
        return [list(prompt)]  # type: ignore[arg-type]  # all ints: one token prompt
    if all(isinstance(item, str) for item in prompt) or all(
        isinstance(item, list) for item in prompt
    ):
        if len(prompt) > MAX_PROMPTS:
            raise InvalidRequest(
                f"`prompt` holds {len(prompt)} prompts; at most {MAX_PROMPTS} per request.",
                param="prompt",
            )
        return list(prompt)  # type: ignore[arg-type]  # all str or all lists, checked above
    raise InvalidRequest(
        "`prompt` must be a string, a list of strings, a list of token ids or a list of "
        "lists of token ids (not a mix).",
        param="prompt",
    )


def check_token_prompts(prompts: list[Prompt], vocab_size: int) -> None:
    if not vocab_size:
        return
    for position, prompt in enumerate(prompts):
        if isinstance(prompt, str):
            continue
        for token_id in prompt:
            if token_id >= vocab_size:
                where = "prompt" if len(prompts) == 1 else f"prompt[{position}]"
                raise InvalidRequest(
                    f"Token id {token_id} is outside the model's vocabulary (0..{vocab_size - 1}).",
                    param=where,
                )


def engine_requests(
    request: CompletionRequest, request_id: str, client: str | None, vocab_size: int
) -> list[GenerateRequest]:
    """One checked engine request per prompt, each with the request's `n`."""
    check_common(request, request.max_tokens)
    prompts = prompts_of(request)
    check_token_prompts(prompts, vocab_size)
    echoed_logprobs = request.logprobs if request.echo else None
    options = sampling_options(
        request,
        max_tokens=request.max_tokens,
        logprobs=request.logprobs,
        prompt_logprobs=prompt_logprobs.engine_count(
            echoed_logprobs, prompt_logprobs.requested(request)
        ),
    )
    extensions = extension_fields(request, response_format_constraint(request.response_format))
    return [
        GenerateRequest(
            request_id=f"{request_id}-{i}",
            sampling=options,
            prompt=prompt if isinstance(prompt, str) else None,
            prompt_token_ids=None if isinstance(prompt, str) else prompt,
            client=client,
            priority=request.priority,
            **extensions,
        )
        for i, prompt in enumerate(prompts)
    ]


class CompletionService(GenerationService[CompletionRequest]):
    id_prefix = "cmpl"

    async def engine_requests(
        self, request: CompletionRequest, request_id: str, client: str | None
    ) -> list[GenerateRequest]:
        """Checked off the event loop, as chat's are: schema checks take time in
        proportion to the schema, and a token prompt is checked id by id."""
        vocab_size = self.engine_for(request).model.vocab_size
        return await off_loop(engine_requests, request, request_id, client, vocab_size)

    def slots(self, request: CompletionRequest) -> int:
        """One per prompt: a list of strings or of token-id lists is that many prompts;
        a list of token ids is one (a list mixing kinds, or too long, is a 400 later)."""
        prompt = request.prompt
        if isinstance(prompt, str) or not prompt or isinstance(prompt[0], int):
            return 1
        return min(len(prompt), MAX_PROMPTS)

    def generation(self, request: CompletionRequest, request_id: str) -> CompletionGeneration:
        """Echoed token-id prompts are echoed as their text (as `vllm serve` does)."""
        engine = self.engine_for(request)
        texts = [
            p if isinstance(p, str) else engine.detokenize(p) if request.echo else ""
            for p in prompts_of(request)
        ]
        return CompletionGeneration(request, request_id, texts)


@dataclass(slots=True)
class CompletionChoiceState(ChoiceState):
    logprobs: LogprobsBuilder | None = None
    prompt_logprobs: PromptLogprobs | None = None


class CompletionGeneration(Generation[CompletionChoiceState]):
    """The `text_completion` shape of one request, whole or in chunks; choice
    `position * n + i` is the i-th choice of prompt `position`."""

    def __init__(self, request: CompletionRequest, request_id: str, prompts: list[str]) -> None:
        super().__init__(request_id, request.model, include_usage(request))
        self._request = request
        self._prompts = prompts  # the text of each prompt, for echo
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
                state.logprobs = LogprobsBuilder(top_k=request.logprobs)
            states[index] = state
        return states

    def absorb_output(
        self, states: dict[int, CompletionChoiceState], position: int, out: GenerateOutput
    ) -> None:
        if out.prompt_logprobs is None:
            return
        request = self._request
        wire = None
        if request.prompt_logprobs is not None:
            k = request.prompt_logprobs
            wire = prompt_logprobs.wire_prompt_logprobs(out.prompt_logprobs, k)
        for j in range(request.n):
            state = states[position * request.n + j]
            state.prompt_logprobs = wire
            if request.echo and state.logprobs is not None:
                state.logprobs.add_prompt(out.prompt_logprobs, out.prompt_token_texts or [])

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
                prompt_logprobs=(
                    UNSET if self._request.prompt_logprobs is None else state.prompt_logprobs
                ),
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
            builder = LogprobsBuilder(
                previous.offset if previous is not None else 0, self._request.logprobs
            )
            if self._request.echo and output.prompt_logprobs is not None:
                builder.add_prompt(output.prompt_logprobs, output.prompt_token_texts or [])
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
