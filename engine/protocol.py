"""The engine boundary: what the HTTP side may ask of a model, and what comes back.

Kept deliberately small (generate, abort, health, model info), the way httpx keeps
its transport to one method. `engine.vllm_engine` implements it with vLLM;
`engine.scripted` implements it with canned tokens for fast tests and benchmarks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

FinishReason = Literal["stop", "length"]


@dataclass(slots=True)
class SamplingOptions:
    """Engine-neutral sampling parameters; the HTTP side has validated them already."""

    max_tokens: int | None = None  # None: the rest of the context
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    n: int = 1
    ignore_eos: bool = False
    skip_special_tokens: bool = True


@dataclass(slots=True)
class GenerateRequest:
    """One generation: chat `messages` (rendered by the model's template) or a raw `prompt`."""

    request_id: str
    sampling: SamplingOptions
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # `chat_template_kwargs`
    # Top-level reasoning fields the client set (`thinking`, `enable_thinking`,
    # `reasoning_effort`); the model's family decides what they mean.
    reasoning_controls: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ChoiceDelta:
    """New output of one choice since the previous `GenerateOutput`."""

    index: int
    text: str  # content; never chain of thought
    token_count: int  # all generated tokens, reasoning included
    finish_reason: FinishReason | None = None
    reasoning: str = ""  # chain of thought, split from the output by the family's parser


@dataclass(slots=True)
class GenerateOutput:
    """One step of a generation: deltas for the choices that advanced."""

    prompt_tokens: int
    choices: list[ChoiceDelta]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the HTTP side may know about the served model."""

    served_names: tuple[str, ...]
    max_model_len: int
    created: int
    root: str  # where the weights came from: a folder or a Hugging Face id
    family: str | None = None  # the model family it is bound to (engine.families)
    reasons_by_default: bool = False  # thinks unless the request turns reasoning off

    @property
    def name(self) -> str:
        return self.served_names[0]


class Engine(Protocol):
    """A model that turns requests into streams of output deltas."""

    @property
    def model(self) -> ModelInfo: ...

    async def start(self) -> None:
        """Load the model; `is_ready` turns true when this returns."""

    async def shutdown(self) -> None:
        """Stop generating and release the model."""

    def is_ready(self) -> bool: ...

    def unfinished_requests(self) -> int:
        """Requests the engine still holds (for health checks and leak tests)."""

    def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateOutput]:
        """Stream the request's output. Raises `engine.errors` exceptions for bad requests
        before the first output. Closing or cancelling the iterator aborts the request."""

    async def abort(self, request_id: str) -> None: ...
