"""One engine-core request, run and read: vLLM's `AsyncLLM.generate` loop written out, so
the output collector stays at hand and an output the engine counted but nobody read is
counted too (the request's `Tally`); a stream closed early aborts its request.

`VLLMEngine.generate` decides what the request runs with (a `Plan`) and builds its
sampling parameters and output conversion; `stream_request` submits it and turns each
vLLM output into a `GenerateOutput`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import EngineFailure, EngineRequestError
from engine.protocol import (
    GenerateOutput,
    GenerateRequest,
    SamplingOptions,
    Tally,
    scheduling_priority,
)
from engine.vllm_backend.logprobs import convert_prompt_logprobs, prompt_token_texts
from engine.vllm_backend.outputs import OutputConversion
from engine.vllm_backend.reasoning import RequestParsing
from engine.vllm_backend.tally import token_count, unread_tokens


@dataclass(frozen=True, slots=True)
class Plan:
    """What one engine-core request runs with."""

    sampling: SamplingOptions
    max_tokens: int
    request_id: str
    constraint: Any  # vLLM StructuredOutputsParams, or None
    tally: Tally | None = None


async def stream_request(
    current_llm: Callable[[], Any],
    request: GenerateRequest,
    prompt: dict[str, Any],
    prompt_ids: list[int],
    plan: Plan,
    params: Any,
    conversion: OutputConversion,
    parsing: RequestParsing,
    tokenizer: Any,
) -> AsyncGenerator[GenerateOutput, None]:
    """Submit `prompt` with `params` (vLLM SamplingParams) and yield its outputs.
    `current_llm` is the engine's AsyncLLM as it is now: None once shut down, when a
    stream ending late has nothing to abort."""
    sampling = plan.sampling
    prompt_tokens = len(prompt_ids)
    tally = plan.tally
    first = True
    finished = False
    queue: Any = None
    try:
        # AsyncLLM.generate's loop, written out: the output collector stays at hand, so
        # an output the engine counted but nobody read is counted here too.
        queue = await current_llm().add_request(
            plan.request_id,
            prompt,
            params,
            priority=scheduling_priority(request),
            **parsing.engine_kwargs,
        )
        if tally is not None:
            tally.accepted(prompt_tokens)
        while not finished:
            output = queue.get_nowait() or await queue.get()
            finished = output.finished
            if tally is not None:
                tally.generated(token_count(output))
            prompt_logprobs = prompt_texts = None
            if first and sampling.prompt_logprobs is not None:
                prompt_logprobs = convert_prompt_logprobs(
                    prompt_ids, output.prompt_logprobs, sampling.prompt_logprobs
                )
                prompt_texts = prompt_token_texts(prompt_ids, prompt_logprobs, tokenizer)
            first = False
            choices = conversion.choices(output)
            yield GenerateOutput(
                prompt_tokens=prompt_tokens,
                choices=choices,
                prompt_logprobs=prompt_logprobs,
                cached_tokens=output.num_cached_tokens or 0,
                prompt_token_texts=prompt_texts,
            )
        finished = True
    except ValueError as exc:  # vLLM's input validation (a grammar xgrammar refuses...)
        constraint = request.response_format
        param = constraint.param if constraint is not None and plan.constraint else None
        raise EngineRequestError(str(exc), param=param) from exc
    except Exception as exc:
        raise EngineFailure(repr(exc)) from exc
    finally:
        if not finished:
            await _end_early(current_llm(), queue, plan.request_id, tally)


async def _end_early(llm: Any, queue: Any, request_id: str, tally: Tally | None) -> None:
    """Closed before the end (client gone, an error, a drain): count what the engine
    already counted but nobody read, then abort. The count comes before any await:
    the output handler runs on this loop and cannot add to the collector meanwhile,
    and the abort removes the request from vLLM's output processor (which counts
    nothing for a request it no longer holds)."""
    if queue is not None and tally is not None:
        tally.generated(unread_tokens(queue))
    if llm is None or llm.errored:
        return  # a dead engine holds nothing to abort
    if queue is not None:
        await llm.abort(queue.request_id, internal=True)
    else:  # cancelled while vLLM was adding it: it may hold it under our id already
        await llm.abort(request_id)
