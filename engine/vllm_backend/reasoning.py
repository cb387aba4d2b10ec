"""Model output -> reasoning and content, per choice, with vLLM's parsers chosen by name.

Each served model is bound to a family (`engine.families`). `OutputParsing` holds what
that binding needs at request time: the family, the tokenizer and vLLM's composed
parser class. Per request it resolves the reasoning controls (`prepare`), and per
choice it splits the streamed text into reasoning and content (`ChoiceSplitter`),
exactly as `vllm serve --reasoning-parser NAME` would: the same parser, fed the same
deltas and token ids, told about the same template kwargs and prompt.

"The same prompt" is the current assistant turn only (`OutputParsing.current_turn`):
vLLM's parsers decide whether reasoning already ended by looking for the end marker in
the ids they are given, and a system turn that quotes the markers (MiniMax M3's
thinking instructions) or a past turn's reasoning would otherwise end it before the
model wrote anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from engine.families import Family, resolve
from engine.protocol import ChoiceDelta, GenerateRequest


@dataclass(slots=True)
class RequestParsing:
    """The reasoning side of one request: its family settings and one splitter per choice."""

    parsing: OutputParsing
    settings: dict[str, Any]
    prompt_token_ids: list[int] = field(default_factory=list)
    _splitters: dict[int, ChoiceSplitter] = field(default_factory=dict)

    @property
    def engine_kwargs(self) -> dict[str, Any]:
        """For `AsyncLLM.generate`: the structured-output gate builds its own copy of the
        reasoning parser from these, so it agrees with ours on where reasoning ends."""
        if self.parsing.parser_cls is None:
            return {}
        return {
            "reasoning_parser_kwargs": {"chat_template_kwargs": dict(self.settings)},
            # Decided from the current turn: left unset, vLLM scans the whole prompt.
            "reasoning_ended": self.parsing.reasoning_ended(self.settings, self.prompt_token_ids),
        }

    def apply(self, delta: ChoiceDelta, token_ids: list[int]) -> ChoiceDelta:
        """Split `delta.text` into `delta.reasoning` and `delta.text` (the content)."""
        splitter = self._splitters.get(delta.index)
        if splitter is None:
            splitter = self.parsing.splitter(self.settings, self.prompt_token_ids)
            self._splitters[delta.index] = splitter
        finished = delta.finish_reason is not None
        delta.reasoning, delta.text = splitter.feed(delta.text, token_ids, finished)
        delta.reasoning_token_count = reasoning_tokens(delta)
        return delta


def reasoning_tokens(delta: ChoiceDelta) -> int:
    """Of a delta's tokens, those of chain of thought: all of them when its text went to
    reasoning only, none when to content only; a delta that crosses the end of reasoning
    (rare: deltas are mostly one token) is split in proportion to the characters."""
    if not delta.reasoning:
        return 0
    if not delta.text:
        return delta.token_count
    share = len(delta.reasoning) / (len(delta.reasoning) + len(delta.text))
    return round(delta.token_count * share)


class OutputParsing:
    """A served model's family binding for output parsing; built once per binding."""

    def __init__(self, family: Family | None, tokenizer: Any) -> None:
        self.family = family
        self.tokenizer = tokenizer
        self.parser_cls = _parser_class(family, tokenizer)

    def prepare(self, request: GenerateRequest) -> tuple[GenerateRequest, RequestParsing]:
        """Resolve the request's reasoning controls (a 400 for a bad value) into the
        template variables it renders with; keep special tokens in the output text when a
        parser needs to see the markers."""
        if self.family is None:
            return request, RequestParsing(self, {})
        variables, settings = resolve(
            self.family, request.template_kwargs, request.reasoning_controls
        )
        request = replace(request, template_kwargs=variables)
        if self.parser_cls is not None:
            request.sampling = replace(request.sampling, skip_special_tokens=False)
        return request, RequestParsing(self, settings)

    @property
    def finds_turns(self) -> bool:
        """Whether `current_turn` can return less than the whole prompt."""
        return bool(self.family and self.family.assistant_start and self.parser_cls is not None)

    def current_turn(self, prompt_token_ids: list[int]) -> list[int]:
        """The prompt's ids from the last assistant-turn start on (the whole prompt when
        the family names no start or the prompt has none, e.g. a raw completion)."""
        marker = self.family.assistant_start if self.family else None
        if not marker or self.parser_cls is None:
            return prompt_token_ids
        start = last_occurrence(self.tokenizer, prompt_token_ids, marker)
        return prompt_token_ids if start is None else prompt_token_ids[start:]

    def reasoning_ended(self, settings: dict[str, Any], turn_token_ids: list[int]) -> bool:
        """Whether the current turn's prompt already closed reasoning (a thinking-off
        prefill), as the family's parser judges it."""
        parser = self.parser_cls(self.tokenizer, None, chat_template_kwargs=dict(settings))
        return bool(parser.is_reasoning_end(list(turn_token_ids)))

    def splitter(self, settings: dict[str, Any], prompt_token_ids: list[int]) -> ChoiceSplitter:
        if self.parser_cls is None or self.family is None:
            return PlainSplitter()
        splitter: ChoiceSplitter = VLLMSplitter(
            self.parser_cls(self.tokenizer, None, chat_template_kwargs=dict(settings)),
            prompt_token_ids,
        )
        marker = self.family.drop_leak_through
        if marker and not self.family.reasoning_on(settings):
            splitter = LeakGuard(splitter, marker)
        return splitter


class ChoiceSplitter:
    """Feeds one choice's deltas; returns (reasoning, content) new since the last feed."""

    def feed(self, text: str, token_ids: list[int], finished: bool) -> tuple[str, str]:
        raise NotImplementedError


class PlainSplitter(ChoiceSplitter):
    """No reasoning parser: everything is content."""

    def feed(self, text: str, token_ids: list[int], finished: bool) -> tuple[str, str]:
        return "", text


class VLLMSplitter(ChoiceSplitter):
    """vLLM's composed `Parser.parse_delta`, the streaming path `vllm serve` uses."""

    def __init__(self, parser: Any, prompt_token_ids: list[int]) -> None:
        self._parser = parser
        self._prompt_token_ids = prompt_token_ids
        self._request = _parse_request()

    def feed(self, text: str, token_ids: list[int], finished: bool) -> tuple[str, str]:
        message = self._parser.parse_delta(
            text,
            list(token_ids),
            self._request,
            prompt_token_ids=self._prompt_token_ids,
            finished=finished,
        )
        if message is None:
            return "", ""
        return message.reasoning or "", message.content or ""


class LeakGuard(ChoiceSplitter):
    """With reasoning off, a GLM 5.x model may still think and close with a bare
    `</think>`: everything up to and including the first marker is dropped. Content is
    held back until the marker shows up or the choice ends, since either may follow."""

    def __init__(self, inner: ChoiceSplitter, marker: str) -> None:
        self._inner = inner
        self._marker = marker
        self._held: str | None = ""  # None once decided

    def feed(self, text: str, token_ids: list[int], finished: bool) -> tuple[str, str]:
        reasoning, content = self._inner.feed(text, token_ids, finished)
        if self._held is None:
            return reasoning, content
        held = self._held + content
        cut = held.find(self._marker)
        if cut >= 0:
            self._held = None
            return reasoning, held[cut + len(self._marker) :]
        if finished:
            self._held = None
            return reasoning, held
        self._held = held
        return reasoning, ""


def last_occurrence(tokenizer: Any, token_ids: list[int], text: str) -> int | None:
    """The largest `i` whose suffix `token_ids[i:]` decodes to text containing `text`,
    or None. Searched on text, not ids: the marker may be spelled over several tokens,
    merged differently with its neighbours. Suffixes only grow as `i` falls, so a
    doubling step then a bisection take O(log n) decodes."""

    def contains(i: int) -> bool:
        return text in tokenizer.decode(token_ids[i:], skip_special_tokens=False)

    n = len(token_ids)
    step = 1
    while not contains(low := max(n - step, 0)):
        if low == 0:
            return None
        step *= 2
    high = n - step // 2  # the last suffix tried before `low` (an empty one at first)
    while high - low > 1:  # invariant: contains(low), not contains(high)
        mid = (low + high) // 2
        if contains(mid):
            low = mid
        else:
            high = mid
    return low


def _parser_class(family: Family | None, tokenizer: Any) -> Any:
    if family is None or family.reasoning_parser is None:
        return None
    from vllm.parser.parser_manager import ParserManager

    # Only the reasoning parser: tool calls are parsed by `tool_calls.ToolCallStream`,
    # with the family's tool parser.
    return ParserManager.get_parser(
        reasoning_parser_name=family.reasoning_parser, tokenizer=tokenizer
    )


def _parse_request() -> Any:
    """The request object vLLM's parsers read (`include_reasoning`, tools, tool_choice)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(model="", messages=[{"role": "user", "content": ""}], seed=None)
