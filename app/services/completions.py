"""Legacy text completions: one engine request per prompt, merged into one response or stream."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

from app.schemas.chat import Usage
from app.schemas.completions import (
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
)
from app.services.sampling import check_common, check_model, sampling_options
from app.services.streaming import open_sse
from app.sse import frame
from engine.admission.lease import admitted
from engine.admission.runtime import AdmissionController
from engine.protocol import Engine, GenerateOutput, GenerateRequest, TokenLogprob
from engine.streams import merge

Indexed = tuple[int, GenerateOutput]  # (prompt position, output)


class LogprobsBuilder:
    """Accumulates the legacy logprobs shape (parallel lists) for one choice."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self.logprobs = CompletionLogprobs(
            tokens=[], token_logprobs=[], top_logprobs=[], text_offset=[]
        )

    def add(self, entries: list[TokenLogprob | None]) -> None:
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


class CompletionService:
    def __init__(self, engine: Engine, admission: AdmissionController) -> None:
        self._engine = engine
        self._admission = admission

    def _prompts(self, request: CompletionRequest) -> list[str]:
        return [request.prompt] if isinstance(request.prompt, str) else list(request.prompt)

    def _outputs(
        self, request: CompletionRequest, request_id: str, client: str | None
    ) -> AsyncIterator[Indexed]:
        check_model(self._engine, request.model)
        check_common(request, request.max_tokens)
        options = sampling_options(
            request,
            max_tokens=request.max_tokens,
            logprobs=request.logprobs,
            prompt_logprobs=request.logprobs if request.echo else None,
        )
        streams = [
            admitted(
                self._admission,
                self._engine,
                GenerateRequest(
                    request_id=f"{request_id}-{i}",
                    sampling=options,
                    prompt=prompt,
                    client=client,
                    priority=request.priority,
                ),
            )
            for i, prompt in enumerate(self._prompts(request))
        ]
        return merge(streams)

    async def complete(self, request: CompletionRequest, client: str | None = None) -> Completion:
        request_id = f"cmpl-{uuid.uuid4().hex}"
        prompts = self._prompts(request)
        n = request.n
        texts = {i: [prompts[i // n]] if request.echo else [] for i in range(len(prompts) * n)}
        builders = {i: LogprobsBuilder() for i in texts} if request.logprobs is not None else {}
        finish: dict[int, str | None] = {}
        prompt_tokens: dict[int, int] = {}
        completion_tokens = 0
        async for position, output in self._outputs(request, request_id, client):
            prompt_tokens[position] = output.prompt_tokens
            if output.prompt_logprobs is not None:
                for j in range(n):
                    builders[position * n + j].add(output.prompt_logprobs)
            for delta in output.choices:
                index = position * n + delta.index
                texts[index].append(delta.text)
                completion_tokens += delta.token_count
                if delta.logprobs and builders:
                    builders[index].add(delta.logprobs)  # type: ignore[arg-type]
                if delta.finish_reason is not None:
                    finish[index] = delta.finish_reason
        choices = [
            CompletionChoice(
                index=index,
                text="".join(parts),
                logprobs=builders[index].logprobs if builders else None,
                finish_reason=finish.get(index),
            )
            for index, parts in texts.items()
        ]
        total_prompt = sum(prompt_tokens.values())
        return Completion(
            id=request_id,
            created=int(time.time()),
            model=request.model,
            choices=choices,
            usage=Usage(total_prompt, completion_tokens, total_prompt + completion_tokens),
        )

    async def open_stream(
        self, request: CompletionRequest, client: str | None = None
    ) -> AsyncIterator[bytes]:
        request_id = f"cmpl-{uuid.uuid4().hex}"
        outputs = self._outputs(request, request_id, client)
        return await open_sse(
            outputs, CompletionChunkWriter(request, request_id, self._prompts(request))
        )


class CompletionChunkWriter:
    def __init__(self, request: CompletionRequest, request_id: str, prompts: list[str]) -> None:
        self._request = request
        self._id = request_id
        self._created = int(time.time())
        self._prompts = prompts
        self._echoed: set[int] = set()
        self._builders: dict[int, LogprobsBuilder] = {}
        self._prompt_tokens: dict[int, int] = {}
        self._completion_tokens = 0
        options = request.stream_options
        self._include_usage = bool(options and options.include_usage)

    def _chunk(self, choice: CompletionChoice) -> bytes:
        chunk = Completion(
            id=self._id, created=self._created, model=self._request.model, choices=[choice]
        )
        if self._include_usage:
            chunk.usage = None
        return frame(chunk)

    def frames(self, indexed: Indexed) -> list[bytes]:
        position, output = indexed
        n = self._request.n
        self._prompt_tokens[position] = output.prompt_tokens
        frames = []
        for delta in output.choices:
            index = position * n + delta.index
            self._completion_tokens += delta.token_count
            text = delta.text
            logprobs = None
            if self._request.logprobs is not None:
                builder = LogprobsBuilder(
                    self._builders[index].offset if index in self._builders else 0
                )
                if output.prompt_logprobs is not None:
                    builder.add(output.prompt_logprobs)
                builder.add(delta.logprobs or [])  # type: ignore[arg-type]
                self._builders[index] = builder
                logprobs = builder.logprobs
            if self._request.echo and index not in self._echoed:
                self._echoed.add(index)
                text = self._prompts[position] + text
            frames.append(
                self._chunk(
                    CompletionChoice(
                        index=index, text=text, logprobs=logprobs, finish_reason=delta.finish_reason
                    )
                )
            )
        return frames

    def closing_frames(self) -> list[bytes]:
        if not self._include_usage:
            return []
        prompt = sum(self._prompt_tokens.values())
        chunk = Completion(
            id=self._id,
            created=self._created,
            model=self._request.model,
            choices=[],
            usage=Usage(prompt, self._completion_tokens, prompt + self._completion_tokens),
        )
        return [frame(chunk)]
