"""The `chat.completion` and `chat.completion.chunk` wire shapes of one chat request, on
the generation skeleton (`app.services.generation.service`): choices accumulated into a
completion, or streamed as chunks (most content chunks written from a template,
`app.services.chat.frames`), `echo` and logprobs included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from msgspec import UNSET

from app.schemas.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    Delta,
    ResponseMessage,
    TextPart,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from app.schemas.extensions import PromptLogprobs
from app.services.chat.frames import ContentFrames
from app.services.generation import prompt_logprobs
from app.services.generation.service import ChoiceState, Generation, include_usage
from app.services.generation.tools import ToolCallCollector, wire_deltas
from engine import protocol
from engine.protocol import ChoiceDelta, GenerateOutput


def to_wire_logprobs(entries: list[protocol.TokenLogprob] | None) -> ChoiceLogprobs | None:
    if entries is None:
        return None
    return ChoiceLogprobs(
        content=[
            TokenLogprob(
                token=entry.token,
                logprob=entry.logprob,
                bytes=list(entry.token.encode()),
                top_logprobs=[
                    TopLogprob(token=top.token, logprob=top.logprob, bytes=list(top.token.encode()))
                    for top in entry.top
                ],
            )
            for entry in entries
        ]
    )


def echoed_text(request: ChatCompletionRequest) -> str:
    """With `echo`: the last message's text when it has the answer's role (`assistant`,
    or the last message's own role without a generation prompt), as `vllm serve` echoes."""
    if not request.echo:
        return ""
    last = request.messages[-1]
    role = last.__struct_config__.tag
    if request.add_generation_prompt and role != "assistant":
        return ""
    content = last.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


@dataclass(slots=True)
class ChatChoiceState(ChoiceState):
    reasoning: list[str] = field(default_factory=list)
    logprobs: list[protocol.TokenLogprob] = field(default_factory=list)
    calls: ToolCallCollector = field(default_factory=ToolCallCollector)

    def message(self) -> ResponseMessage:
        text = "".join(self.text)
        tool_calls = self.calls.calls()
        message = ResponseMessage(content=text or None if tool_calls else text)
        if tool_calls:
            message.tool_calls = tool_calls
        if self.reasoning:
            message.reasoning = "".join(self.reasoning)
        return message


class ChatGeneration(Generation[ChatChoiceState]):
    """The `chat.completion` and `chat.completion.chunk` shapes of one request."""

    def __init__(self, request: ChatCompletionRequest, request_id: str) -> None:
        super().__init__(request_id, request.model, include_usage(request))
        self._n = request.n
        self._wants_logprobs = bool(request.logprobs)
        self._started: set[int] = set()
        self._echo = echoed_text(request)
        self._prompt_logprobs_k = request.prompt_logprobs
        self._prompt_logprobs: PromptLogprobs | None = None
        self._content_frames: ContentFrames | None = None

    def choice_states(self) -> dict[int, ChatChoiceState]:
        states = {i: ChatChoiceState(i) for i in range(self._n)}
        if self._echo:
            for state in states.values():
                state.text.append(self._echo)
        return states

    def absorb_output(
        self, states: dict[int, ChatChoiceState], position: int, out: GenerateOutput
    ) -> None:
        if self._prompt_logprobs_k is not None and out.prompt_logprobs is not None:
            self._prompt_logprobs = prompt_logprobs.wire_prompt_logprobs(
                out.prompt_logprobs, self._prompt_logprobs_k
            )

    def state_of(
        self, states: dict[int, ChatChoiceState], position: int, delta: ChoiceDelta
    ) -> ChatChoiceState:
        return states[delta.index]

    def absorb(self, state: ChatChoiceState, delta: ChoiceDelta) -> None:
        if delta.logprobs:
            state.logprobs.extend(delta.logprobs)
        if delta.tool_calls:
            state.calls.add(delta.tool_calls)
        if delta.reasoning:
            state.reasoning.append(delta.reasoning)

    def body(self, states: dict[int, ChatChoiceState], usage: Usage) -> ChatCompletion:
        choices = [
            Choice(
                index=state.index,
                message=state.message(),
                logprobs=to_wire_logprobs(state.logprobs) if self._wants_logprobs else None,
                finish_reason=state.finish_reason,
            )
            for state in states.values()
        ]
        return ChatCompletion(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=usage,
            prompt_logprobs=UNSET if self._prompt_logprobs_k is None else self._prompt_logprobs,
        )

    def delta_frame(
        self, position: int, output: GenerateOutput, delta: ChoiceDelta
    ) -> bytes | None:
        # Most chunks of a stream are the same bytes around one piece of content: those
        # are written from a template (ContentFrames), byte for byte what encoding the
        # chunk would give; every other chunk is built and encoded.
        if (
            delta.text
            and delta.index in self._started
            and delta.finish_reason is None
            and delta.logprobs is None
            and not (delta.reasoning or delta.tool_calls)
        ):
            if self._content_frames is None:
                self._content_frames = ContentFrames(
                    self.id, self.created, self.model, self.chunk_usage
                )
            data = self._content_frames.frame(delta.index, delta.text)
            if data is not None:
                return data
        return super().delta_frame(position, output, delta)

    def delta_chunk(
        self, position: int, output: GenerateOutput, delta: ChoiceDelta
    ) -> ChatCompletionChunk | None:
        role: Literal["assistant"] | None = None
        text = delta.text
        if delta.index not in self._started:
            self._started.add(delta.index)
            role = "assistant"
            text = self._echo + text
        if not (text or delta.reasoning or role or delta.finish_reason or delta.tool_calls):
            return None
        tool_calls = wire_deltas(delta.tool_calls) if delta.tool_calls else None
        # The first chunk carries content "" with the role, unless it carries
        # reasoning or a tool call instead.
        first_content = role is not None and not (delta.reasoning or tool_calls)
        choice = ChunkChoice(
            index=delta.index,
            delta=Delta(
                role=role,
                content=text if text or first_content else None,
                reasoning=delta.reasoning or None,
                tool_calls=tool_calls,
            ),
            logprobs=to_wire_logprobs(delta.logprobs),
            finish_reason=delta.finish_reason,
        )
        return ChatCompletionChunk(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=[choice],
            usage=self.chunk_usage,
        )

    def usage_chunk(self, usage: Usage) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.id, created=self.created, model=self.model, choices=[], usage=usage
        )
