"""vLLM's per-token logprob dictionaries -> the engine-neutral TokenLogprob."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from engine.protocol import TokenLogprob, TopLogprob

# JSON has no -inf; OpenAI-compatible servers report this floor instead.
_FLOOR = -9999.0


def _finite(value: float) -> float:
    return value if math.isfinite(value) else _FLOOR


def _token_logprob(token_id: int, entries: Mapping[int, Any], top_k: int) -> TokenLogprob:
    chosen = entries[token_id]
    ranked = sorted(
        (entry.rank, other_id, entry.decoded_token or "", entry.logprob)
        for other_id, entry in entries.items()
        if entry.rank is not None and entry.rank <= top_k
    )
    return TokenLogprob(
        token=chosen.decoded_token or "",
        logprob=_finite(chosen.logprob),
        top=[
            TopLogprob(token=text, logprob=_finite(lp), token_id=other_id, rank=rank)
            for rank, other_id, text, lp in ranked[:top_k]
        ],
        token_id=token_id,
        rank=chosen.rank,
    )


def convert_sample_logprobs(
    token_ids: Sequence[int], logprobs: Sequence[Mapping[int, Any]] | None, top_k: int
) -> list[TokenLogprob] | None:
    if logprobs is None:
        return None
    return [
        _token_logprob(t, entries, top_k) for t, entries in zip(token_ids, logprobs, strict=False)
    ]


def convert_prompt_logprobs(
    token_ids: Sequence[int], logprobs: Sequence[Mapping[int, Any] | None] | None, top_k: int
) -> list[TokenLogprob | None] | None:
    if logprobs is None:
        return None
    return [
        None if entries is None else _token_logprob(t, entries, top_k)
        for t, entries in zip(token_ids, logprobs, strict=False)
    ]


def prompt_token_texts(
    token_ids: Sequence[int], logprobs: Sequence[TokenLogprob | None] | None, tokenizer: Any
) -> list[str]:
    """Each prompt token's text, as `vllm serve` echoes them: the decoded token of its
    logprob entry, and the token decoded alone where there is none (the first token,
    which nothing predicted). Joined, they give back the prompt's text."""
    entries = list(logprobs or [])
    texts = []
    for position, token_id in enumerate(token_ids):
        entry = entries[position] if position < len(entries) else None
        texts.append(entry.token if entry is not None else tokenizer.decode([token_id]))
    return texts
