"""vLLM's `prompt_logprobs`: how likely each prompt token was, given the tokens before
it, and the k most likely tokens at its place, keyed by token id (vLLM's shape).

`vllm serve` returns them on whole responses only and refuses a positive count with
`stream`; here any count with `stream` is a 400 (vLLM accepts 0 there and ignores it,
and a field is never accepted and ignored here).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.errors import InvalidRequest
from app.schemas.extensions import PromptLogprob, PromptLogprobs
from app.schemas.sampling import SamplingFields
from engine.protocol import TokenLogprob


def requested(request: SamplingFields) -> int | None:
    """The request's `prompt_logprobs` count (bounded by its schema), checked against
    `stream`."""
    count = request.prompt_logprobs
    if count is not None and request.stream:
        raise InvalidRequest(
            "`prompt_logprobs` are not available when `stream` is true.",
            param="prompt_logprobs",
        )
    return count


def engine_count(*counts: int | None) -> int | None:
    """What the engine is asked for when several consumers want prompt logprobs (echoed
    `logprobs` and `prompt_logprobs`): the largest; each consumer keeps its own top k."""
    given = [count for count in counts if count is not None]
    return max(given) if given else None


def _position(entry: TokenLogprob, top_k: int) -> dict[str, PromptLogprob]:
    # The prompt's own token first, then the most likely ones (vLLM's order); a top
    # token that is the prompt's own is not repeated.
    found = {str(entry.token_id): PromptLogprob(entry.logprob, entry.rank, entry.token)}
    for top in entry.top[:top_k]:
        found.setdefault(str(top.token_id), PromptLogprob(top.logprob, top.rank, top.token))
    return found


def wire_prompt_logprobs(
    entries: Sequence[TokenLogprob | None] | None, top_k: int
) -> PromptLogprobs | None:
    """Engine prompt logprobs (one per prompt token, None for the first) -> vLLM's
    `prompt_logprobs`: per position, at most `top_k + 1` token ids."""
    if entries is None:
        return None
    return [None if entry is None else _position(entry, top_k) for entry in entries]
