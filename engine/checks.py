"""Decisions every engine makes the same way, each in one place: whether the model may
serve now, whether it takes images, and how many tokens a request may generate.

The scripted and vLLM engines, admission and the HTTP side all call these, so they
cannot disagree (a check done early on the HTTP side and again in the engine gives the
same answer). Model-independent: each takes the facts it decides on, nothing from vLLM.
"""

from __future__ import annotations

from engine.errors import ContextLengthExceeded, EngineRequestError, EngineUnavailable
from engine.protocol import GenerateRequest, ModelHost, ModelInfo


def require_ready(host: ModelHost) -> None:
    """Raise EngineUnavailable unless the host serves now (loaded, not failed)."""
    if not host.is_ready():
        raise EngineUnavailable("The model is still loading.")


def require_image_input(model: ModelInfo, param: str = "messages", where: str = "") -> None:
    """Raise EngineRequestError (400 `image_input_not_supported`) unless the model takes
    images; `where` adds which part of the request held one."""
    if not model.supports_vision:
        raise EngineRequestError(
            f"The model `{model.name}` does not accept image input{where}.",
            param=param,
            code="image_input_not_supported",
        )


# A rough, tokenizer-free estimate: admission and per-key limits only need the scale.
CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 8  # role markers and separators a chat template adds


def estimate_prompt_tokens(text_chars: int, messages: int = 0, token_ids: int = 0) -> int:
    """A prompt's tokens before it is tokenized (the engine does that later): a token
    per 4 characters of text (or bytes of a request body), rounded up, plus what a chat
    template adds per message; a prompt given as token ids counts by its length."""
    return -(-text_chars // CHARS_PER_TOKEN) + messages * TOKENS_PER_MESSAGE + token_ids


# The output budget of a request that leaves out `max_tokens`: a quarter of the context,
# at most this many tokens. Without it, one request (times `n`) claims the whole rest of
# the context and admission must keep the KV cache for it.
DEFAULT_OUTPUT_TOKENS_CAP = 4096


def default_output_tokens(max_model_len: int) -> int:
    """The model-dependent `max_tokens` of a request that does not give one."""
    return max(1, min(DEFAULT_OUTPUT_TOKENS_CAP, max_model_len // 4))


def output_budget(prompt_tokens: int, requested: int | None, max_model_len: int) -> int:
    """Tokens the request may generate: `requested`, or when None the model's default
    (`default_output_tokens`) bounded by the rest of the context. Raises
    ContextLengthExceeded when the prompt and the request do not fit."""
    room = max_model_len - prompt_tokens
    if requested is None:
        if room <= 0:
            raise ContextLengthExceeded(prompt_tokens, None, max_model_len)
        return min(room, default_output_tokens(max_model_len))
    if requested > room:
        raise ContextLengthExceeded(prompt_tokens, requested, max_model_len)
    return requested


def truncated(prompt_ids: list[int], request: GenerateRequest, max_model_len: int) -> list[int]:
    """The prompt with `truncate_prompt_tokens` applied: its last k tokens (-1: as many as
    the context holds), as vLLM truncates from the left."""
    keep = request.truncate_prompt_tokens
    if keep is None:
        return prompt_ids
    if keep == -1:
        keep = max_model_len
    if keep == 0:
        raise EngineRequestError(
            "`truncate_prompt_tokens` must be -1 or at least 1.", param="truncate_prompt_tokens"
        )
    if keep > max_model_len:
        raise EngineRequestError(
            f"`truncate_prompt_tokens` ({keep}) must not exceed the model's context length "
            f"({max_model_len}).",
            param="truncate_prompt_tokens",
        )
    return prompt_ids[-keep:] if keep else []


async def checked(request: GenerateRequest) -> None:
    """The request has passed the engine's checks: run its `before_run` (a sleeping
    model wakes here) before the model takes it."""
    if request.before_run is not None:
        await request.before_run()
