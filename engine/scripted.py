"""An Engine that plays back scripted tokens: fast tests of the HTTP side and frontend benchmarks.

It honours the same contract as the vLLM engine (readiness, image input and context
length decided by `engine.checks` before the first output, aborts on close) but
generates instantly, or with a set delay per token. It implements both sides of
`engine.protocol.Engine`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from engine.checks import checked, output_budget, require_image_input, require_ready
from engine.errors import EngineRequestError
from engine.protocol import (
    ChoiceDelta,
    FinishReason,
    GenerateOutput,
    GenerateRequest,
    ModelInfo,
    TokenLogprob,
    TopLogprob,
)


class ScriptedEngine:
    def __init__(
        self,
        tokens: Sequence[str] = ("Hello", ",", " world", "!"),
        *,
        served_names: tuple[str, ...] = ("scripted",),
        max_model_len: int = 2048,
        token_delay_s: float = 0.0,
        ready: bool = True,
        kv_cache_tokens: int = 0,
        supports_vision: bool = False,
        vocab_size: int = 1024,
        keep_requests: bool = True,
    ) -> None:
        self.tokens = list(tokens)
        self.token_delay_s = token_delay_s
        self._model = ModelInfo(
            served_names,
            max_model_len,
            int(time.time()),
            "scripted",
            vocab_size=vocab_size,
            kv_cache_tokens=kv_cache_tokens,
            supports_vision=supports_vision,
        )
        self._ready = ready
        self.failed: str | None = None  # set by tests: the engine died for this reason
        self.running: set[str] = set()
        # Every request that got past the checks, for tests to inspect; a benchmark
        # serving millions turns it off, or the list grows and every full collection
        # scans it.
        self.requests: list[GenerateRequest] = []
        self._keep_requests = keep_requests
        self.paused = False
        self.memory_released = False
        self._unpaused = asyncio.Event()
        self._unpaused.set()

    @property
    def model(self) -> ModelInfo:
        return self._model

    async def start(self) -> None:
        self._ready = True

    async def shutdown(self) -> None:
        self._ready = False

    def is_alive(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return self._ready and self.failed is None

    def failure(self) -> str | None:
        return self.failed

    def unfinished_requests(self) -> int:
        return len(self.running)

    async def abort(self, request_id: str) -> None:
        self.running.discard(request_id)

    def tokenize(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        add_special_tokens: bool = True,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """One token per word; a word's id is its length (enough for the HTTP layer)."""
        if messages is not None:
            prompt = " ".join(str(m.get("content", "")) for m in messages)
        return [len(word) for word in (prompt or "").split()]

    def detokenize(self, token_ids: list[int]) -> str:
        for token_id in token_ids:
            if not 0 <= token_id < self._model.vocab_size:
                raise EngineRequestError(
                    f"Token id {token_id} is outside the model's vocabulary.", param="tokens"
                )
        return " ".join("x" * token_id for token_id in token_ids)

    async def pause(self) -> None:
        # As vLLM's pause in "abort" mode: running requests end, new ones wait.
        self.paused = True
        self._unpaused.clear()
        for request_id in list(self.running):
            await self.abort(request_id)

    async def resume(self) -> None:
        self.paused = False
        self._unpaused.set()

    async def release_memory(self) -> bool:
        self.memory_released = True
        return True

    async def reacquire_memory(self) -> None:
        self.memory_released = False

    async def metrics_exposition(self) -> str:
        return ""

    def prompt_tokens(self, request: GenerateRequest) -> int:
        """One token per word of the prompt: enough to exercise length limits."""
        if request.messages is not None:
            return sum(len(str(m.get("content", "")).split()) + 3 for m in request.messages)
        if request.prompt_token_ids is not None:
            return len(request.prompt_token_ids)
        return len((request.prompt or "").split())

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        require_ready(self)
        if request.images:
            require_image_input(self._model)
        prompt_tokens = self.prompt_tokens(request)
        limit = output_budget(prompt_tokens, request.sampling.max_tokens, self._model.max_model_len)
        await checked(request)
        if self._keep_requests:
            self.requests.append(request)
        script = self.tokens if request.sampling.ignore_eos is False else self._cycled(limit)
        emitted = script[:limit]
        natural_end = len(script) <= limit and not request.sampling.ignore_eos
        self.running.add(request.request_id)
        tally = request.tally
        if tally is not None:
            tally.accepted(prompt_tokens)
        try:
            for position, token in enumerate(emitted):
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
                if not self._unpaused.is_set() and request.request_id in self.running:
                    await self._unpaused.wait()  # paused: new requests wait for resume
                if request.request_id not in self.running:
                    return  # aborted: as vLLM ends an aborted request's stream
                last = position == len(emitted) - 1
                finish: FinishReason | None = (
                    ("stop" if natural_end else "length") if last else None
                )
                if tally is not None:  # produced, whether or not anyone reads it
                    tally.generated(request.sampling.n)
                yield GenerateOutput(
                    prompt_tokens=prompt_tokens,
                    choices=[
                        ChoiceDelta(
                            index=i,
                            text=token,
                            token_count=1,
                            finish_reason=finish,
                            logprobs=_logprobs(token, request.sampling.logprobs),
                        )
                        for i in range(request.sampling.n)
                    ],
                    prompt_logprobs=_prompt_logprobs(request, position),
                    prompt_token_texts=_prompt_texts(request, position),
                )
        finally:
            self.running.discard(request.request_id)

    def _cycled(self, count: int) -> list[str]:
        return [self.tokens[i % len(self.tokens)] for i in range(count)]


def _logprobs(token: str, top_k: int | None) -> list[TokenLogprob] | None:
    if top_k is None:
        return None
    alternatives = [TopLogprob(token, -0.5)] + [
        TopLogprob(f"alt{i}", -1.0 - i) for i in range(1, top_k)
    ]
    return [TokenLogprob(token=token, logprob=-0.5, top=alternatives[:top_k])]


def _prompt_logprobs(request: GenerateRequest, position: int) -> list[TokenLogprob | None] | None:
    """Each prompt word after the first has rank 2 behind "alt" (id 0), then "alt2"...;
    a word's id is its length, as `tokenize` says."""
    top_k = request.sampling.prompt_logprobs
    if position != 0 or top_k is None:
        return None
    words = _prompt_words(request)
    alternatives = [TopLogprob("alt", -1.0, token_id=0, rank=1)] + [
        TopLogprob(f"alt{rank}", -1.0 - rank, token_id=1000 + rank, rank=rank)
        for rank in range(3, top_k + 1)
    ]
    entries: list[TokenLogprob | None] = [None]
    for word in words[1:]:
        chosen = TopLogprob(" " + word, -2.0, token_id=len(word), rank=2)
        top = sorted([*alternatives, chosen], key=lambda alt: alt.rank or 0)[:top_k]
        entries.append(
            TokenLogprob(" " + word, -2.0, top, token_id=chosen.token_id, rank=chosen.rank)
        )
    return entries


def _prompt_words(request: GenerateRequest) -> list[str]:
    if request.prompt_token_ids is not None:
        return ["x" * token_id for token_id in request.prompt_token_ids]
    if request.messages is not None:
        return " ".join(str(m.get("content", "")) for m in request.messages).split()
    return (request.prompt or "").split()


def _prompt_texts(request: GenerateRequest, position: int) -> list[str] | None:
    if position != 0 or request.sampling.prompt_logprobs is None:
        return None
    words = _prompt_words(request)
    return words[:1] + [" " + w for w in words[1:]]
