"""The engine boundary: what the HTTP side may ask of a model, and what comes back.

Two narrow protocols, so each caller depends only on what it uses: `Generator` is one
generation (generate, abort; the way httpx keeps its transport to one method), and
`ModelHost` is the rest (lifecycle, readiness, tokenizer, model facts, yielding the GPU).
`Engine` is both. `engine.vllm_backend.engine` implements it with vLLM; `engine.scripted`
with canned tokens for fast tests and benchmarks.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(slots=True)
class SamplingOptions:
    """Engine-neutral sampling parameters; the HTTP side has validated them already."""

    max_tokens: int | None = None  # None: engine.checks.default_output_tokens
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 (or 0): disabled
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    include_stop_str_in_output: bool = False
    n: int = 1
    ignore_eos: bool = False
    min_tokens: int = 0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    logprobs: int | None = None  # None: no logprobs; k: the sampled token and the top k
    prompt_logprobs: int | None = None  # `echo` with logprobs, or vLLM's `prompt_logprobs`
    skip_special_tokens: bool = True
    allowed_token_ids: list[int] | None = None  # vLLM: sample only from these
    bad_words: list[str] = field(default_factory=list)  # vLLM: never generate these


@dataclass(slots=True)
class ToolCallDelta:
    """A piece of one tool call: id and name come first, arguments in pieces."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(slots=True)
class StructuredOutput:
    """One output constraint. `response_format` gives `json_object` (nothing set) or
    `json_schema` (`schema`); vLLM's `structured_outputs` (and the older `guided_*`
    fields) may instead give exactly one of `choice`, `regex`, `grammar` (EBNF/GBNF, as
    vLLM takes it) or `structural_tag` (an xgrammar structural tag, as a JSON string).
    `param` names the request field it came from, for errors."""

    schema: dict[str, Any] | None = None
    choice: list[str] | None = None
    regex: str | None = None
    grammar: str | None = None
    structural_tag: str | None = None
    param: str = "response_format"


@dataclass(slots=True)
class ImageInput:
    """One decoded image of a chat request. Its place in the conversation is the
    `{"type": "image"}` part of `GenerateRequest.messages` with the same position."""

    image: Any  # a PIL.Image.Image in RGB mode, decoded and size-checked by the HTTP side
    detail: str = "auto"  # OpenAI's `detail`: "auto", "low" or "high"


class Tally(Protocol):
    """Told what the engine counts for one request, as the engine counts it: usage is
    billed by this, not by what reached the client. A request can end with tokens the
    engine produced but no output carried (its client left, a stream closed while an
    output waited), and a prompt is the engine's work from the moment it takes the
    request, whether or not a token ever comes out."""

    def accepted(self, prompt_tokens: int) -> None:
        """The engine has taken the request (queued it to run): its prompt counts, once
        per prompt, whatever `n` is."""

    def generated(self, tokens: int) -> None:
        """The engine produced `tokens` more output tokens (all choices together)."""


# Clients whose names start so are deferred work (batch lines): the lowest lane, in
# admission (engine.admission.runtime) and in the engine's own scheduler.
DEFERRED_PREFIX = "deferred:"
# Added to a deferred request's priority in the engine's scheduler (lower runs sooner):
# past any priority an interactive request carries, so every interactive request waiting
# in the engine is scheduled before any deferred one, and under memory pressure a
# deferred one is preempted first.
DEFERRED_PRIORITY_OFFSET = 1 << 40


@dataclass(slots=True)
class GenerateRequest:
    """One generation: chat `messages` (rendered by the model's template) or a raw `prompt`."""

    request_id: str
    sampling: SamplingOptions
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None  # a pre-tokenized prompt (instead of `prompt`)
    # None: the path's default (a raw prompt gets the tokenizer's special tokens, a
    # rendered chat does not: its template wrote them).
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False  # render the last assistant message open-ended
    documents: list[dict[str, str]] | None = None  # for templates that cite documents
    truncate_prompt_tokens: int | None = None  # keep only the last k prompt tokens (-1: max)
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # `chat_template_kwargs`
    # Top-level reasoning fields the client set (`thinking`, `enable_thinking`,
    # `reasoning_effort`); the model's family decides what they mean.
    reasoning_controls: dict[str, Any] = field(default_factory=dict)
    # OpenAI-shaped tool definitions; rendered by the template and parsed from the output.
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    response_format: StructuredOutput | None = None
    # For admission (engine.admission.runtime): fairness key and priority (lower: sooner).
    client: str | None = None
    priority: int = 0
    # The client's share of the engine against other clients' (its key's `weight`): the
    # engine's fair scheduler charges it 1/weight of each token it serves it.
    weight: float = 1.0
    # Images, in the order their `{"type": "image"}` parts appear in `messages` (a message
    # with images has its content as a list of `text` and `image` parts).
    images: list[ImageInput] = field(default_factory=list)
    # Scopes the prefix cache: a request reuses cached prompt blocks only of requests
    # with the same salt (vLLM's `cache_salt`). None: the cache shared by every request.
    cache_salt: str | None = None
    # Awaited once the request has passed every check the engine makes before the model
    # takes it, and before the model does: a sleeping model's wake (engine.warm), so a
    # request that fails its checks never wakes one.
    before_run: Callable[[], Awaitable[None]] | None = None
    # Where the engine reports what it counts (the HTTP side's usage); None: nobody asks.
    tally: Tally | None = None


@dataclass(slots=True)
class TopLogprob:
    token: str
    logprob: float
    token_id: int | None = None  # set by engines that know it (vLLM's prompt logprobs need it)
    rank: int | None = None  # 1: the most likely token


@dataclass(slots=True)
class TokenLogprob:
    """One generated (or prompt) token with its log probability and the best alternatives."""

    token: str
    logprob: float
    top: list[TopLogprob]  # the most likely tokens at this place, best first
    token_id: int | None = None  # as in TopLogprob
    rank: int | None = None  # this token's rank in the whole vocabulary (1: the most likely)


@dataclass(slots=True)
class ChoiceDelta:
    """New output of one choice since the previous `GenerateOutput`."""

    index: int
    text: str  # content; never chain of thought
    token_count: int  # all generated tokens, reasoning included
    finish_reason: FinishReason | None = None
    logprobs: list[TokenLogprob] | None = None  # one per new token, when asked for
    tool_calls: list[ToolCallDelta] | None = None
    reasoning: str = ""  # chain of thought, split from the output by the family's parser
    reasoning_token_count: int = 0  # of `token_count`, the tokens of chain of thought


@dataclass(slots=True)
class GenerateOutput:
    """One step of a generation: deltas for the choices that advanced."""

    prompt_tokens: int
    choices: list[ChoiceDelta]
    # With `prompt_logprobs`, on the first output only: one entry per prompt token
    # (None for the first, which has nothing to be predicted from) ...
    prompt_logprobs: list[TokenLogprob | None] | None = None
    cached_tokens: int = 0  # of `prompt_tokens`, those served from the prefix cache
    # ... and each prompt token's text (the first one's too), in the same order.
    prompt_token_texts: list[str] | None = None


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the HTTP side may know about the served model."""

    served_names: tuple[str, ...]
    max_model_len: int
    created: int
    root: str  # where the weights came from: a folder or a Hugging Face id
    vocab_size: int = 0
    family: str | None = None  # the model family it is bound to (engine.families)
    reasons_by_default: bool = False  # thinks unless the request turns reasoning off
    kv_cache_tokens: int = 0  # tokens the KV cache holds; 0: unknown
    supports_vision: bool = False  # takes image input (a multi-modal model)

    @property
    def name(self) -> str:
        return self.served_names[0]


class Generator(Protocol):
    """What one generation needs: the request's output stream, and a way to stop it.
    Admission holds a lease around exactly this (engine.admission.runtime)."""

    def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        """Stream the request's output. Raises `engine.errors` exceptions for bad requests
        before the first output. Closing or cancelling the iterator aborts the request."""

    async def abort(self, request_id: str) -> None: ...


class ModelHost(Protocol):
    """Everything about the served model that is not one generation: its lifecycle,
    facts, tokenizer, and yielding the accelerator to its owner."""

    @property
    def model(self) -> ModelInfo: ...

    async def start(self) -> None:
        """Load the model; `is_ready` turns true when this returns."""

    async def shutdown(self) -> None:
        """Stop generating and release the model."""

    def is_alive(self) -> bool:
        """False once the engine has failed for good (loading or paused count as alive)."""
        ...

    def is_ready(self) -> bool:
        """The one readiness decision; `engine.checks.require_ready` enforces it."""

    def unfinished_requests(self) -> int:
        """Requests the engine still holds (for health checks and leak tests)."""

    def failure(self) -> str | None:
        """Why the engine can never serve again (its core process died), else None."""

    def tokenize(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        add_special_tokens: bool = True,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Token ids of a raw prompt, or of messages rendered by the chat template."""

    def detokenize(self, token_ids: list[int]) -> str: ...

    # Yielding the GPU to its owner (engine.admission.runtime).

    async def pause(self) -> None:
        """Stop scheduling: abort whatever still runs; new requests wait for `resume`."""

    async def resume(self) -> None: ...

    async def release_memory(self) -> bool:
        """While paused, free accelerator memory (weights and KV cache) if the platform
        can; True when it did."""

    async def reacquire_memory(self) -> None:
        """Undo `release_memory` (before `resume`)."""

    async def metrics_exposition(self) -> str:
        """Prometheus text of series the engine keeps out of this process's registries
        (an engine run in a process of its own keeps them there), for `/metrics` to
        append to its own; empty when it keeps none apart."""


class Engine(Generator, ModelHost, Protocol):
    """A whole engine, both sides: what the vLLM and scripted engines implement and the
    app wires up. Code that needs one side only asks for that side."""


def scheduling_priority(request: GenerateRequest) -> int:
    """The request's priority in the engine's scheduler: its own, after every interactive
    request's when it is deferred work."""
    if request.client is not None and request.client.startswith(DEFERRED_PREFIX):
        return request.priority + DEFERRED_PRIORITY_OFFSET
    return request.priority
